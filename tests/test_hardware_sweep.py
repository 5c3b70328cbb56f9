"""Sweeps: grid parsing, and step-level monotonicity on a real 2-rank trace (skips without it)."""

from __future__ import annotations

import pytest

from mtia_trace.errors import HardwareSpecError, UsageError
from mtia_trace.schema import ATTRIBUTION
from replay.sweep import grid, parse_vary, sweep
from tests.conftest import REAL, requires_real


def test_parse_vary_and_grid() -> None:
    axes = parse_vary(["comm.message_engines=4,8", "hbm.bandwidth_GBps=1000, 2000 ,3000"])
    assert axes == [("comm.message_engines", ["4", "8"]),
                    ("hbm.bandwidth_GBps", ["1000", "2000", "3000"])]
    pts = grid(axes)
    assert len(pts) == 6
    assert pts[0] == ["comm.message_engines=4", "hbm.bandwidth_GBps=1000"]
    assert pts[-1] == ["comm.message_engines=8", "hbm.bandwidth_GBps=3000"]


@pytest.mark.parametrize("item", ["comm.message_engines", "=4,8", "comm.message_engines=", "x=,"])
def test_bad_vary(item: str) -> None:
    with pytest.raises(UsageError, match="KEY=V1,V2"):
        parse_vary([item])


def _events():
    from mtia_trace.ingest import load

    files = sorted((REAL / "torch_cpu").glob("dev_rank2_small_rank*.json.gz"))
    if len(files) != 2:
        pytest.skip("dev_rank2_small traces not found")
    return load(files).events


@requires_real
def test_sweep_step_time_monotone_in_bandwidth_and_loss() -> None:
    ev = _events()
    t = sweep(ev, "h100", parse_vary(["network.intra_node_GBps=10,100,1000"]))
    steps = t.column("step_us").to_pylist()
    assert t.num_rows == 3 and all(b <= a + 1e-6 for a, b in zip(steps, steps[1:]))
    parts = sum(t.column(f"{a}_us").to_numpy() for a in ATTRIBUTION)
    assert parts == pytest.approx(t.column("step_us").to_numpy(), rel=1e-6)
    lossy = sweep(ev, "mtia300", parse_vary(["loss.rto_us=50,5000"]), loss_rate=0.05, seed=3)
    a, b = lossy.column("step_us").to_pylist()
    assert b >= a
    again = sweep(ev, "mtia300", parse_vary(["loss.rto_us=50,5000"]), loss_rate=0.05, seed=3)
    assert again.column("step_us").to_pylist() == [a, b]


@requires_real
def test_sweep_validates_grid_before_replaying() -> None:
    with pytest.raises(HardwareSpecError, match="integer"):
        sweep(_events(), "mtia300", parse_vary(["comm.message_engines=4,eight"]))
