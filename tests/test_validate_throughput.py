"""benchmarks/validate_throughput.py: whole-step predictions against published training throughputs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import validate_throughput as vt  # noqa: E402


def _point(name: str):
    return next(p for p in vt.POINTS if p.name == name)


def test_measured_step_time_follows_from_the_mlperf_log():
    # 14,444 ms of training over 0.04999... epochs of 4,195,197,692 samples at batch 55,296
    p = _point("mlperf3.0-dgxh100-1x8")
    steps = (0.09997495683348931 - 0.049980888109768154) * 4_195_197_692 / 55296
    assert p.measured_ms == pytest.approx(14444 / steps)
    assert 3.7 < p.measured_ms < 3.9


def test_mixed_precision_predicts_a_shorter_step_than_tf32(published_runs):
    # the same 1-GPU DLRM in FP16 runs its GEMMs on the faster tensor-core path: a prediction
    # that does not come out shorter has lost the precision on the way through synth/replay
    by = {r["name"]: r for r in published_runs}
    tf32, amp = by["dle-tf2-dlrm-1xa100-tf32"], by["dle-tf2-dlrm-1xa100-amp"]
    for r in (tf32, amp):
        assert math.isfinite(r["predicted_ms"]) and r["predicted_ms"] > 0
        assert r["step_error"] == pytest.approx(r["predicted_ms"] / r["measured_ms"] - 1)
        assert r["parts_us"]["collective_us"] == 0  # one GPU: nothing to communicate
    assert amp["predicted_ms"] < 0.8 * tf32["predicted_ms"]
    assert amp["parts_us"]["compute_us"] < tf32["parts_us"]["compute_us"]


def test_unknown_point_is_a_usage_error(capsys):
    assert vt.main(["--only", "no-such-point"]) == 2
    assert "no such point" in capsys.readouterr().err
