"""`--format json` on every command that prints a result: one JSON document, a stable shape."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from mtia_trace.schema import ATTRIBUTION
from tests.conftest import SAMPLES

TRACE = SAMPLES / "synth" / "dcnv2_infer_1rank"
CPU_TRACE = SAMPLES / "torch_cpu_dlrm"
STEP_KEYS = {"step", "ranks", "total_us", "measured_us", *(f"{a}_us" for a in ATTRIBUTION)}


def _json(cli, *args: object) -> object:
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return orjson.loads(out)  # exactly one document: trailing text would not parse


def test_inspect(cli) -> None:
    d = _json(cli, "inspect", TRACE)
    assert set(d) == {"ranks", "files", "steps", "streams", "events_by_kind", "top_ops_by",
                      "top_ops", "collectives", "warnings"}
    assert d["ranks"] == [0] and d["top_ops_by"] == "device time"
    assert {"rank", "step", "measured_us"} <= set(d["steps"][0])
    assert {"name", "kind", "calls", "total_us", "share"} <= set(d["top_ops"][0])
    assert all(isinstance(v, int) for v in d["events_by_kind"].values())


def test_replay(cli, tmp_path: Path) -> None:
    d = _json(cli, "replay", TRACE, "--hw", "h100,mtia300", "--out", tmp_path / "runs")
    assert set(d) == {"runs", "identical_targets", "warnings"}
    assert [r["hardware"] for r in d["runs"]] == ["h100", "mtia300"]
    for r in d["runs"]:
        assert Path(r["path"]).is_dir() and r["steps"]
        assert set(r["steps"][0]) == STEP_KEYS and isinstance(r["steps"][0]["step"], int)
    assert d["identical_targets"] is None and isinstance(d["warnings"], list)


def test_validate(cli) -> None:
    d = _json(cli, "validate", TRACE)
    assert set(d) == {"steps", "median_abs_error", "worst_abs_error", "strict_median_abs_error",
                      "strict_worst_abs_error", "checked", "max_error", "passed",
                      "unexplained_fraction", "device_events_without_launch",
                      "device_start", "strict_device_start", "device_starts_unexplained",
                      "strict_keeps_measured"}
    assert d["checked"] == "error" and 0.0 <= d["unexplained_fraction"] <= 1.0
    assert d["passed"] is True and d["max_error"] == pytest.approx(0.02)
    assert set(d["steps"][0]) == {"rank", "step", "measured_us", "replayed_us", "error",
                                  "strict_error", "unexplained_us", "over_limit"}


def test_sweep(cli, tmp_path: Path) -> None:
    d = _json(cli, "sweep", TRACE, "--hw", "mtia300", "--vary", "hbm.bandwidth_GBps=3000,6000",
              "--out", tmp_path / "s.parquet")
    assert set(d) == {"path", "hardware", "axes", "points"}
    assert d["axes"] == ["hbm.bandwidth_GBps"] and len(d["points"]) == 2
    assert {"point", "step_us", *(f"{a}_us" for a in ATTRIBUTION)} <= set(d["points"][0])


def test_hw_list_and_show(cli) -> None:
    rows = _json(cli, "hw", "list")
    assert {r["name"] for r in rows} >= {"h100", "mtia300"}
    assert all(set(r) == {"name", "family", "assumed", "description"} for r in rows)
    d = _json(cli, "hw", "show", "mtia300")
    assert set(d) == {"name", "family", "description", "origin", "values", "model", "differences"}
    assert all(set(v) == {"key", "value", "confidence", "source"} for v in d["values"])
    assert set(d["model"]) == {"overlap_slowdown", "concurrent_collectives_per_rank",
                               "assumed_values"}


def test_whatif_json_is_a_list_of_group_rows(cli) -> None:
    rows = _json(cli, "whatif", CPU_TRACE, "--top", "2", "-q")
    assert isinstance(rows, list) and len(rows) == 2
    assert all(set(r) == {"group", "selects", "by", "busy_us", "step_us", "step_2x_us", "gain_2x_us",
                          "step_zero_us", "gain_zero_us"} for r in rows)
    assert rows[0]["gain_2x_us"] >= rows[1]["gain_2x_us"]


def test_diff_json_shape(cli) -> None:
    d = _json(cli, "diff", CPU_TRACE, CPU_TRACE, "-q")
    assert set(d) == {"base_step_us", "new_step_us", "predicted_step_us", "error",
                      "base_replayed_step_us", "predicted_change_us", "matched_fraction",
                      "matched_events", "unmatched_base", "unmatched_new", "attribution",
                      "contributions", "steps", "base_spread_us", "new_spread_us", "noise_us",
                      "change_within_noise", "notes"}
    assert all(set(c) == {"group", "delta_us"} for c in d["contributions"])
    assert all(set(s) == {"base_us", "new_us", "predicted_us", "error"} for s in d["steps"])
    assert d["matched_fraction"] == 1.0 and d["predicted_change_us"] == pytest.approx(0.0, abs=1e-6)


def test_synth(cli, tmp_path: Path) -> None:
    d = _json(cli, "synth", "--preset", "dlrm-dcnv2", "--ranks", "2", "--batch", "256",
              "--steps", "1", "-o", tmp_path / "t")
    assert set(d) == {"out_dir", "files", "model", "ranks", "sharding", "batch", "host_overhead",
                      "events", "bytes", "rank_load", "load_imbalance"}
    assert d["ranks"] == 2 and len(d["files"]) == 2 and d["batch"] == 256
    assert all((tmp_path / "t" / f).is_file() for f in d["files"])
    assert d["bytes"] == sum((tmp_path / "t" / f).stat().st_size for f in d["files"])
