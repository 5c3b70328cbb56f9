"""The out-of-sample checks as gates: the collective model against the published nccl-tests
tables vendored in tests/data/nccl, and whole-step predictions against published training
throughputs, each figure at most its bound in benchmarks/gates.json; and the committed results
(benchmarks/results/*.json, rendered into docs/hardware.md) are what the code gives now."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import gates  # noqa: E402
import validate_collectives as vc  # noqa: E402
import validate_throughput as vt  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
pytestmark = pytest.mark.real


def _gate(group: str, got: dict[str, float], report) -> None:
    bounds = json.loads(gates.GATES.read_text(encoding="utf-8"))
    rows = gates.check({group: got}, {group: bounds[group]})
    for _, name, v, b in rows:
        mark = "ok  " if b is not None and v <= b else "FAIL"
        report(f"{mark} {group:<18} {name:<56} {v:>7.1%}  <= {'-' if b is None else f'{b:.1%}'}")
    bad = gates.failures(rows)
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def collectives() -> list[dict]:
    results, skipped = vc.validate_dir(DATA / "nccl")
    assert results and not skipped
    return vc.summary(results)


def test_collective_model_within_its_gates(collectives: list[dict], gate_report) -> None:
    _gate("collectives", gates.figures(collectives, {"points": [], "ratios": []})["collectives"],
          gate_report)


def test_collective_results_file_is_current(collectives: list[dict]) -> None:
    """benchmarks/results/collectives.json (the docs' table) is what validate_collectives gives
    now: `python benchmarks/validate_collectives.py tests/data/nccl --json-out
    benchmarks/results/collectives.json` after a change to the collective model."""
    stored = json.loads((RESULTS / "collectives.json").read_text(encoding="utf-8"))
    assert [t["name"] for t in stored] == [t["name"] for t in collectives]
    for s, c in zip(stored, collectives):
        c = json.loads(json.dumps(c))
        assert {k: v for k, v in s.items() if k not in ("median", "p90", "bias")} == \
            {k: v for k, v in c.items() if k not in ("median", "p90", "bias")}
        assert (s["median"], s["p90"]) == pytest.approx((c["median"], c["p90"]), abs=1e-9)
        assert s["bias"].keys() == c["bias"].keys()
        for band, b in s["bias"].items():
            assert (b is None) == (c["bias"][band] is None)
            assert b is None or b == pytest.approx(c["bias"][band], abs=1e-9)


@pytest.mark.slow
def test_training_throughput_within_its_gates(published_runs: list[dict], gate_report) -> None:
    """Every published training run rebuilt with synth and replayed (about half a minute); the
    step-time and ratio errors at most their bounds, and benchmarks/results/throughput.json
    (the docs' table) what the code gives now."""
    rows = published_runs
    got = gates.figures([], {"points": rows, "ratios": vt.ratios(rows)})
    stored = json.loads((RESULTS / "throughput.json").read_text(encoding="utf-8"))
    _gate("throughput", got["throughput"], gate_report)
    _gate("throughput_ratios", got["throughput_ratios"], gate_report)
    assert [p["name"] for p in stored["points"]] == [r["name"] for r in rows]
    for s, r in zip(stored["points"], rows):
        assert math.isclose(s["predicted_ms"], r["predicted_ms"], rel_tol=1e-6), (
            f"{r['name']}: results file says {s['predicted_ms']:.3f} ms, the code gives "
            f"{r['predicted_ms']:.3f}; run `python benchmarks/validate_throughput.py --json-out "
            f"benchmarks/results/throughput.json`")


def test_a_worse_figure_fails_its_gate() -> None:
    """The check itself: a figure past its bound, a figure without a bound and a bound without
    its figure each fail."""
    rows = gates.check({"throughput": {"a": 0.10, "b": 0.30, "new": 0.01}},
                       {"throughput": {"a": 0.11, "b": 0.29, "gone": 0.05}})
    bad = gates.failures(rows)
    assert len(bad) == 3
    assert any("b = 30.0% exceeds its bound 29.0%" in x for x in bad)
    assert any("new" in x and "no bound" in x for x in bad)
    assert any("gone" in x and "no figure" in x for x in bad)
    assert gates.bound(0.1234) == 0.134 and gates.bound(0.0) == 0.01
