"""Small hand-built traces whose replay is derived by hand in tests/test_known_answers.py (their
graphs are pinned value by value in tests/golden/graph.json)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mtia_trace.ingest.nesting import parents
from replay.costs import AsMeasured, EventCosts
from tests.replay_tables import dev, host
from tests.replay_tables import table as _rows_table


def table(rows: list[dict[str, object]]) -> pa.Table:
    """`replay_tables.table` with host nesting filled in as ingest fills it (parent, depth)."""
    t = _rows_table(rows)
    key = [f"{r}|{tr}" for r, tr in zip(t.column("rank").to_pylist(), t.column("track").to_pylist())]
    n = t.num_rows
    start = np.maximum.accumulate(np.where(np.r_[True, [a != b for a, b in zip(key[1:], key[:-1])]],
                                           np.arange(n), 0))
    dev_ = t.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    parent, depth = parents(start, t.column("ts_us").to_numpy(), t.column("dur_us").to_numpy(),
                            ~dev_)
    parent[dev_], depth[dev_] = -1, 0
    for name, v in (("parent_id", parent), ("depth", depth)):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(v, type=t.schema.field(i).type))
    return t


def _coll(rank: int, ts: float, dur: float, *, pg: str, seq: int, stream: int, corr: int
          ) -> dict[str, object]:
    return dev(rank, ts, dur, stream=stream, kind="collective", pg=pg, coll_seq=seq,
               coll_op="all_reduce", correlation=corr, step=1, name=f"nccl:{pg}:{seq}")


def _rank_host(rank: int, launches: list[tuple[float, int]], sync_from: float, end: float
               ) -> list[dict[str, object]]:
    """A step annotation [0, end], 1 us launch calls at (ts, correlation), and a device
    synchronize from ``sync_from`` to ``end``."""
    rows = [host(rank, 0, end, name="ProfilerStep#1", kind="annotation", step=1),
            host(rank, sync_from, end - sync_from, name="cudaDeviceSynchronize", kind="runtime",
                 depth=1, step=1)]
    rows += [host(rank, ts, 1, name="cudaLaunchKernel", kind="runtime", depth=1, correlation=c,
                  step=1) for ts, c in launches]
    return rows


def two_collectives_one_late_rank() -> pa.Table:
    """Two ranks; each launches all-reduce A (stream 7) and then B (stream 8), 1 us after each
    launch call starts. Rank 0 launches at 0 and 2, rank 1 at 20 and 25. Measured (no pool):
    A runs 21-41 (20 us) and B 26-36 (10 us) on both ranks; each rank synchronizes until
    41.5."""
    rows = _rank_host(0, [(0.0, 0), (2.0, 1)], 30.0, 41.5)
    rows += _rank_host(1, [(20.0, 0), (25.0, 1)], 30.0, 41.5)
    rows += [_coll(0, 1, 40, pg="0", seq=0, stream=7, corr=0),
             _coll(0, 3, 33, pg="0", seq=1, stream=8, corr=1),
             _coll(1, 21, 20, pg="0", seq=0, stream=7, corr=0),
             _coll(1, 26, 10, pg="0", seq=1, stream=8, corr=1)]
    return table(rows)


def two_groups_same_sequence() -> pa.Table:
    """Two ranks in two process groups "A" and "B", each group's first collective (sequence
    number 0 in both). Rank 0 launches A at 0 and B at 2; rank 1 launches B at 2 and A at 49.
    Measured: B runs 3-15 on both ranks (12 us); A waits for rank 1 and runs 50-60 (10 us);
    both ranks synchronize until 60.5."""
    rows = _rank_host(0, [(0.0, 0), (2.0, 1)], 20.0, 60.5)
    rows += _rank_host(1, [(49.0, 0), (2.0, 1)], 20.0, 60.5)
    rows += [_coll(0, 1, 59, pg="A", seq=0, stream=7, corr=0),
             _coll(0, 3, 12, pg="B", seq=0, stream=8, corr=1),
             _coll(1, 50, 10, pg="A", seq=0, stream=7, corr=0),
             _coll(1, 3, 12, pg="B", seq=0, stream=8, corr=1)]
    return table(rows)


def annotated_launch() -> pa.Table:
    """One rank: ``## forward ##`` [0, 10] holds ``aten::mm`` [0, 10], which calls
    ``cudaLaunchKernel`` [5, 6]; the kernel runs 6-86 (its ready lag after the launch call's
    start: 1 us); ``cudaDeviceSynchronize`` [10, 86.5] ends the step."""
    rows = [host(0, 0, 86.5, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 0, 10, name="## forward ##", kind="annotation", depth=1, step=1),
            host(0, 0, 10, name="aten::mm", depth=2, step=1),
            host(0, 5, 1, name="cudaLaunchKernel", kind="runtime", depth=3, correlation=0,
                 step=1),
            dev(0, 6, 80, correlation=0, step=1),
            host(0, 10, 76.5, name="cudaDeviceSynchronize", kind="runtime", depth=1, step=1)]
    return table(rows)


def launches_faster_and_slower() -> pa.Table:
    """One rank, one stream: kernel 0 starts 1 us after its launch call starts, kernel 1 6 us
    after (launch calls at 0 and 20, kernels of 5 us)."""
    rows = [host(0, 0, 40, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 0, 1, name="cudaLaunchKernel", kind="runtime", depth=1, correlation=0,
                 step=1),
            host(0, 20, 1, name="cudaLaunchKernel", kind="runtime", depth=1, correlation=1,
                 step=1),
            dev(0, 1, 5, correlation=0, step=1), dev(0, 26, 5, correlation=1, step=1),
            host(0, 30, 10, name="cudaDeviceSynchronize", kind="runtime", depth=1, step=1)]
    return table(rows)


class OnePerRankPool(AsMeasured):
    """As measured, but a rank's device collectives share one pool of one unit (as a target
    with one collective engine per rank would run them)."""

    name = "as-measured, one collective at a time per rank"

    def cost(self, events: pa.Table) -> EventCosts:
        c = super().cost(events)
        kind = events.column("kind").to_numpy(zero_copy_only=False)
        dev_ = events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
        rank = events.column("rank").to_numpy()
        c.resource = np.where((kind == "collective") & dev_, rank, -1).astype(np.int32)
        c.resource_capacity = np.ones(int(rank.max()) + 1, dtype=np.int32)
        return c


#: traces pinned value by value in tests/golden/graph.json
SMALL = {"known_two_collectives_one_late_rank": two_collectives_one_late_rank,
         "known_two_groups_same_sequence": two_groups_same_sequence,
         "known_annotated_launch": annotated_launch,
         "known_launches_faster_and_slower": launches_faster_and_slower}
