"""A stalled transfer delays every peer waiting on it: ring collectives wait for every member's
stall, an all-to-all stall reaches its rank and the peer its lost packet was for."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from replay.hardware import load_spec, model_for
from replay.hardware.collectives import OPS
from replay.hardware.retries import couple
from replay.run import replay_events
from tests.replay_tables import dev, table

AR, A2A = OPS.index("all_reduce"), OPS.index("all_to_all")


def test_ring_members_wait_for_every_stall() -> None:
    own = np.array([0.0, 7.0, 0.0, 0.0, 3.0, 0.0])
    inst = np.array([0, 0, 0, 1, 1, -1])
    out = couple(np.full(6, AR), inst, own, np.zeros(6))
    assert out.tolist() == [7.0, 7.0, 7.0, 3.0, 3.0, 0.0]      # -1: unmatched, alone


def test_all_to_all_stall_reaches_one_peer() -> None:
    own = np.array([0.0, 5.0, 0.0, 0.0])
    inst = np.zeros(4, dtype=np.int64)
    u = np.array([0.0, 0.5, 0.0, 0.0])  # rank 1's lost packet was for peer (1 + 1 + 1) % 4 = 3
    out = couple(np.full(4, A2A), inst, own, u)
    assert out.tolist() == [0.0, 5.0, 0.0, 5.0]


def _ring(ranks: int, loss_rate: float, seed: int, sets=()):  # noqa: ANN001, ANN202
    """``ranks`` ranks (one per node on h100, so traffic crosses NICs), each: a 64 MiB
    all-reduce, then a kernel waiting for it on the same stream."""
    rows = []
    for r in range(ranks):
        rows.append(dev(r, 0.0, 1.0, stream=20, kind="collective", pg="0", coll_seq=0,
                        coll_op="all_reduce", name="ncclAllReduce"))
        rows.append(dev(r, 10.0, 5.0, stream=20, kind="elementwise", name="after"))
    t = table(rows)
    c = np.array([n == "ncclAllReduce" for n in t.column("name").to_pylist()])
    for name, v in (("coll_bytes_in", np.where(c, 2.0 ** 26, 0.0)),
                    ("coll_bytes_out", np.where(c, 2.0 ** 26, 0.0)),
                    ("group_size", np.where(c, ranks, 0).astype(np.int32))):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(v, type=t.schema.field(i).type))
    spec = load_spec("h100", ["network.ranks_per_node=1", "loss.rto_model=fixed",
                              "loss.ib_timeout=8", *sets])
    return t, model_for(spec, mode="roofline", loss_rate=loss_rate, seed=seed), c


def test_a_loss_on_one_rank_is_waited_for_by_its_peers() -> None:
    ranks, q = 4, 2e-5
    # a seed whose draws lose a packet on exactly one rank
    for seed in range(200):
        t, m, c = _ring(ranks, q, seed)
        costs = m.cost(t)
        own_total = costs.notes["retry_own_us"]
        if own_total > 0 and costs.notes["retry_from_peers_us"] == pytest.approx(
                (ranks - 1) * own_total):
            break
    else:
        pytest.fail("no seed drew a loss on a single rank")
    retry = costs.retry_us[c]
    np.testing.assert_allclose(retry, own_total, rtol=1e-12)   # every member waits for it
    # the replayed step: every rank ends later by the stall, not only the lossy one
    base = replay_events(t, _ring(ranks, 0.0, seed)[1]).events
    lossy = replay_events(t, m).events
    end = lambda ev: ev.column("end_us").to_numpy()  # noqa: E731
    after = np.array([n == "after" for n in t.column("name").to_pylist()])
    np.testing.assert_allclose(end(lossy)[after] - end(base)[after], own_total, rtol=1e-9)
