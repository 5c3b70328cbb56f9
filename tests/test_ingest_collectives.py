"""coll_seq: the trace's own sequence numbers win over per-rank order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from mtia_trace.ingest import load
from mtia_trace.ingest.collectives import _share_within


def _rank(path: Path, rank: int, seqs: list[int | None]) -> None:
    ev = []
    for k, s in enumerate(seqs):
        t = 100.0 * k
        args = {"External id": k + 1, "Collective name": "allreduce", "Process Group Name": "0",
                "Process Group Ranks": "[0, 1]", "Group size": 2, "In msg nelems": 256,
                "Out msg nelems": 256, "dtype": "Float"}
        if s is not None:
            args["Seq"] = s
        ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1,
                   "ts": t, "dur": 50, "args": {"External id": k + 1}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                   "ts": t + 1, "dur": 10, "args": args})
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2},
                                "traceEvents": ev}))


def _seqs(d: Path) -> dict[int, list[int]]:
    t = load(d).events.to_pandas()
    roots = t[t.name == "c10d::allreduce_"].sort_values("ts_us")
    rec = t[t.name == "record_param_comms"].sort_values("ts_us")
    assert (roots.coll_seq.to_numpy() == rec.coll_seq.to_numpy()).all()
    return {r: g.coll_seq.tolist() for r, g in roots.groupby("rank")}


def test_recorded_seq_matches_ranks_that_start_late(tmp_path: Path) -> None:
    _rank(tmp_path / "rank0.json", 0, [4, 5, 6])
    _rank(tmp_path / "rank1.json", 1, [5, 6])   # this rank's trace missed collective 4
    assert _seqs(tmp_path) == {0: [4, 5, 6], 1: [5, 6]}


def test_order_when_the_trace_has_no_seq(tmp_path: Path) -> None:
    _rank(tmp_path / "rank0.json", 0, [None, None, None])
    _rank(tmp_path / "rank1.json", 1, [7, None])   # partial: falls back to order
    assert _seqs(tmp_path) == {0: [0, 1, 2], 1: [0, 1]}


def test_events_of_one_collective_share_their_sizes() -> None:
    """`collectives._share_within` against its definition, a pandas group-by max per (rank,
    process group, seq) filling the sizes a row lacks (<= 0), on random rows."""
    rnd = np.random.default_rng(3)
    for _ in range(50):
        n = int(rnd.integers(1, 60))
        rank = rnd.integers(0, 3, n).astype(np.int32)
        pg = np.array([rnd.choice(["0", "1", None]) for _ in range(n)], dtype=object)
        seq = rnd.integers(-1, 4, n).astype(np.int64)
        b_in = rnd.choice([0.0, 8.0, 64.0, np.nan, 4096.0], n)
        b_out = rnd.choice([0.0, 16.0, 128.0], n)
        gsize = rnd.integers(0, 4, n).astype(np.int32)
        idx = np.flatnonzero(rnd.random(n) < 0.8)
        rows = idx[seq[idx] >= 0]
        want = [b_in.copy(), b_out.copy(), gsize.copy()]
        if len(rows):
            df = pd.DataFrame({"rank": rank[rows], "pg": pd.Series(pg[rows]).fillna("").to_numpy(),
                               "seq": seq[rows], "bin": b_in[rows], "bout": b_out[rows],
                               "g": gsize[rows]})
            m = df.groupby(["rank", "pg", "seq"])[["bin", "bout", "g"]].transform("max")
            for w, c in zip(want, ("bin", "bout", "g")):
                w[rows] = np.where(w[rows] > 0, w[rows], m[c].to_numpy())
        _share_within(rank, pg, seq, idx, b_in, b_out, gsize)
        for got, w in zip((b_in, b_out, gsize), want):
            np.testing.assert_array_equal(got, w)
            assert got.dtype == w.dtype
