"""The kernel_launches and stream_queues analyzers against HTA's own numbers on real traces.

On the trace's measured clock our launch pairs (``events.launch_id``) must be HTA's
``get_cuda_kernel_launch_stats`` rows, with the same CPU / GPU durations and launch delays, and
our per-stream maximum queue length HTA's ``get_queue_length_summary`` maximum. HTA leaves out
graph launches and, when the trace has several ProfilerSteps, everything launched from the last
one; the comparison applies the same selection. Skips without ../shared or HTA.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analyzers import kernel_launches, stream_queues
from mtia_trace.ingest import load
from mtia_trace.runs import connect
from mtia_trace.storage import write_run
from replay.run import replay_events
from tests.conftest import real_file, requires_real

hta_trace_analysis = pytest.importorskip("hta.trace_analysis", reason="HTA is not installed")

pytestmark = [requires_real, pytest.mark.real]

#: Launch calls HTA's kernel launch stats and queue length read (its runtime launch query).
HTA_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                "cudaMemsetAsync", "runFunction - job_prep_and_submit_for_execution")
TRACES = ("critical_path/alexnet", "critical_path/cuda_event_sync_multi_stream")


@pytest.fixture(scope="module", params=TRACES)
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = real_file(f"hta/{request.param}")
    res = replay_events(load(str(folder)).events)
    run = write_run({t: getattr(res, t) for t in ("events", "edges", "steps", "collectives",
                                                   "summary")},
                    tmp_path_factory.mktemp("hta") / "r", {"hardware": "as-measured"})
    con = connect([run])
    logging.getLogger("hta").setLevel(logging.ERROR)
    hta = hta_trace_analysis.TraceAnalysis(trace_dir=str(folder))
    return con, hta


def _hta_selection(con) -> np.ndarray:
    """Measured launch pairs HTA considers: its launch calls, before the last ProfilerStep."""
    pairs = kernel_launches.launch_pairs_with_times(con, measured=True)
    steps = con.sql("SELECT ts_us FROM events WHERE name LIKE 'ProfilerStep#%'").fetchall()
    keep = pc.is_in(pairs.column("launch"), value_set=pa.array(HTA_LAUNCHES))
    if len(steps) > 1:
        last = max(s[0] for s in steps)
        keep = pc.and_(keep, pc.less(pairs.column("launch_start_us"), last))
    return pairs.filter(keep)


def test_launch_stats_match_hta(both) -> None:
    con, hta = both
    ours = _hta_selection(con).to_pandas().set_index("correlation").sort_index()
    theirs = hta.get_cuda_kernel_launch_stats(ranks=[0], visualize=False)[0]
    theirs = theirs.set_index("correlation").sort_index()
    assert list(ours.index) == list(theirs.index)
    np.testing.assert_allclose(ours["cpu_us"], theirs["cpu_duration"], atol=1e-3)
    np.testing.assert_allclose(ours["gpu_us"], theirs["gpu_duration"], atol=1e-3)
    np.testing.assert_allclose(ours["delay_us"], theirs["launch_delay"], atol=1e-3)


def test_max_queue_length_matches_hta(both) -> None:
    con, hta = both
    pairs = _hta_selection(con)
    mine = stream_queues.summary(pairs).to_pylist()
    ours = {int(r["stream"].rsplit(":", 1)[1]): r["max_queued"] for r in mine}
    theirs = hta.get_queue_length_summary(ranks=[0])
    theirs = {int(s): int(v) for (_, s), v in theirs[("queue_length", "max")].items()}
    assert set(ours) == set(theirs)
    # where a launch and a start fall on the same microsecond, HTA's order is its sort's (it
    # may count the launch first, one more); we count the start first
    p = pairs.to_pandas()
    for stream, n in ours.items():
        mine_p = p[p["stream"].str.endswith(f":{stream}")]
        tied = bool(np.isin(mine_p["launch_start_us"], mine_p["start_us"]).any())
        assert theirs[stream] == n or (tied and theirs[stream] == n + 1), stream
