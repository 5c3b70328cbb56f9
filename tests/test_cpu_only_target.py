"""A trace without device work replayed on an accelerator: its host ops stay host cost (a CPU op
made slower stays slower on every target); only collective and launch latencies change."""

from __future__ import annotations

import numpy as np
import pytest

from replay.hardware import model_for
from replay.run import replay_events
from tests.conftest import REAL, SAMPLES, requires_real
from tests.replay_tables import host, table


def cpu_step(addmm_us: float) -> object:
    rows = [host(0, 0, addmm_us + 40, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 10, addmm_us + 20, name="aten::linear", depth=1, step=1),
            host(0, 20, addmm_us, name="aten::addmm", kind="gemm", depth=2, step=1)]
    t = table(rows)
    i = t.column("name").to_pylist().index("aten::addmm")
    flops = np.zeros(t.num_rows)
    flops[i] = 2e9
    return t.set_column(t.schema.get_field_index("flops"), "flops", [flops])


@pytest.mark.parametrize("hw", ["mtia300", "h100"])
def test_a_slower_cpu_op_stays_slower_on_an_accelerator(hw: str) -> None:
    model = model_for(hw)
    base = replay_events(cpu_step(300.0), model)
    slow = replay_events(cpu_step(900.0), model)
    step = lambda r: float(r.steps.column("total_us").to_numpy()[0])  # noqa: E731
    # 600 us more CPU work: 600 us longer (it vanished when the op was priced by the roofline)
    assert step(slow) - step(base) == pytest.approx(600.0)
    assert step(base) == pytest.approx(340.0)


def _host_cost_kept(path) -> None:  # noqa: ANN001
    from mtia_trace.ingest import load

    events = load(path).events
    r = replay_events(events, model_for("mtia300"))
    assert "only through launch and collective latencies" in str(r.notes["cpu_only"])
    e = r.events
    kind = e.column("kind").to_numpy(zero_copy_only=False)
    ops = np.isin(kind, ["gemm", "elementwise", "embedding", "reduction", "host_op"])
    assert float(e.column("compute_us").to_numpy()[ops].sum()) == 0.0
    span = e.column("end_us").to_numpy() - e.column("start_us").to_numpy()
    # (1 ns: replayed times are absolute trace times in float us)
    np.testing.assert_allclose(span[ops], e.column("dur_us").to_numpy()[ops], rtol=0, atol=1e-3)


def test_bundled_cpu_trace_keeps_its_host_ops() -> None:
    _host_cost_kept(SAMPLES / "torch_cpu_dlrm")


@requires_real
def test_real_cpu_trace_keeps_its_host_ops() -> None:
    path = REAL / "torch_cpu" / "dev_tiny_rank0.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    _host_cost_kept(path)
