"""synth estimates its events, bytes and peak memory before generating, and refuses past a limit."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from mtia_trace.errors import UsageError
from mtia_trace.synth import SynthOptions, synthesize
from mtia_trace.synth import estimate as budget


@pytest.mark.parametrize("opts", [
    SynthOptions(ranks=2, steps=1),
    SynthOptions(ranks=4, steps=3, sharding="rw"),
    SynthOptions(ranks=16, steps=1, sharding="twrw", batch=1024),
    SynthOptions(preset="dlrm-kaggle", steps=2, mode="infer"),
], ids=["tw2", "rw4x3", "twrw16", "kaggle-infer"])
def test_estimate_matches_what_is_written(tmp_path: Path, opts: SynthOptions) -> None:
    seen: list[budget.Estimate] = []
    res = synthesize(opts, tmp_path / "t", on_estimate=seen.append)
    est = seen[0]
    # the probe runs on at most 2 x ranks_per_node ranks and two steps: the record count per
    # step must not depend on either, or this is off by a factor
    assert est.events == res.events
    assert 0.75 < est.bytes / res.bytes < 1.5, (est.bytes, res.bytes)
    assert est.peak_bytes > est.bytes


def test_huge_requests_are_refused_before_allocating(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        for opts in (SynthOptions(ranks=100_000, batch=100_000, sharding="rw"),
                     SynthOptions(steps=100_000)):
            with pytest.raises(UsageError, match="peak memory limit is 8.0 GiB.*"
                               "MTIA_TRACE_SYNTH_MAX_MEMORY="):
                synthesize(opts, tmp_path / "t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20, peak  # the rank x rank plan alone would be 74.5 GiB
    assert not (tmp_path / "t").exists() and not list(tmp_path.iterdir())


def test_limits_can_be_lowered_and_raised(tmp_path: Path, cli,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTIA_TRACE_SYNTH_MAX_BYTES", "1K")
    code, _, err = cli("synth", "-o", tmp_path / "t", "--ranks", "2", "--steps", "1")
    assert code == 2 and err.count("\n") == 1
    assert "the trace output limit is 1.0 KiB" in err and "MTIA_TRACE_SYNTH_MAX_BYTES=" in err
    monkeypatch.setenv("MTIA_TRACE_SYNTH_MAX_BYTES", "1G")
    code, out, err = cli("synth", "-o", tmp_path / "t", "--ranks", "2", "--steps", "1")
    assert code == 0 and "wrote 2 trace(s)" in out
    monkeypatch.setenv("MTIA_TRACE_SYNTH_MAX_MEMORY", "lots")
    code, _, err = cli("synth", "-o", tmp_path / "u", "--ranks", "2", "--steps", "1")
    assert code == 2 and "MTIA_TRACE_SYNTH_MAX_MEMORY=lots: not a size" in err
