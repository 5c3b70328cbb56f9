"""Storage and SQL benchmark: write a ~1M-event run, time `analyze` (all analyzers) and a point
query on `events`, and print sizes, times and ratios against reading the events file in the
same process.

Targets (issue 6): all analyzers < 5 s; a point query on events < 0.2 s.

    .venv/bin/python benchmarks/bench_storage.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from runfixture import RANKS, STEP_US, STEPS, tiny_tables  # noqa: E402

from analyzers import ANALYZERS  # noqa: E402
from mtia_trace.runs import connect, query  # noqa: E402
from mtia_trace.storage import TABLES, write_run  # noqa: E402

REFS = ("event_id", "parent_id", "launch_id", "bound_src")


def tile(copies_rank: int, copies_step: int) -> dict[str, pa.Table]:
    """The tiny run repeated over more ranks and steps (ids remapped, sort order kept)."""
    base = tiny_tables()
    ev = base["events"]
    n = ev.num_rows
    k = copies_rank * copies_step
    cr = np.repeat(np.arange(copies_rank), copies_step)  # copy -> rank block
    cs = np.tile(np.arange(copies_step), copies_rank)    # copy -> step block
    copy = np.repeat(np.arange(k), n)
    cols = {name: np.tile(ev.column(name).to_numpy(zero_copy_only=False), k) for name in ev.column_names}
    cols["rank"] = cols["rank"] + RANKS * cr[copy]
    cols["step"] = cols["step"] + STEPS * cs[copy]
    shift = STEPS * STEP_US * cs[copy]
    for c in ("ts_us", "start_us", "end_us"):
        cols[c] = cols[c] + shift
    cols["coll_seq"] = np.where(cols["coll_seq"] >= 0, cols["coll_seq"] + STEPS * cs[copy], -1)
    cols["pg"] = np.where(cols["pg"] == None, None, (cr[copy]).astype(str))  # noqa: E711
    cols["track"] = np.char.add(np.char.add(cols["track"].astype(str), "#"), cr[copy].astype(str))
    order = np.lexsort((-(cols["end_us"] - cols["start_us"]), cols["ts_us"], cols["track"], cols["rank"]))
    new_id = np.empty(n * k, dtype=np.int64)
    new_id[order] = np.arange(n * k)
    for c in REFS:
        old = cols[c]
        cols[c] = np.where(old >= 0, new_id[np.clip(old + n * copy, 0, None)], -1)
    events = pa.table({c: pa.array(cols[c][order] if c != "event_id" else np.arange(n * k),
                                   type=ev.schema.field(c).type) for c in ev.column_names},
                      schema=ev.schema)

    def rep(name: str, id_cols: tuple[str, ...] = ()) -> pa.Table:
        t = base[name]
        m = t.num_rows
        c = np.repeat(np.arange(k), m)
        out = {}
        for f in t.schema:
            a = np.tile(t.column(f.name).to_numpy(zero_copy_only=False), k)
            if f.name in id_cols:
                a = new_id[a + n * c]
            elif f.name in ("rank", "late_rank", "straggler_rank"):
                a = np.where(a >= 0, a + RANKS * cr[c], a)
            elif f.name in ("step", "coll_seq"):
                a = a + STEPS * cs[c]
            elif f.name.endswith("_us") and f.name in ("start_us", "end_us", "first_arrival_us",
                                                        "last_arrival_us"):
                a = a + STEPS * STEP_US * cs[c]
            out[f.name] = pa.array(a, type=f.type)
        return pa.table(out, schema=t.schema)

    return {"events": events, "edges": rep("edges", ("src", "dst")), "steps": rep("steps"),
            "collectives": rep("collectives"), "summary": base["summary"]}


def timed(fn, repeat: int = 1):  # noqa: ANN001, ANN202
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    per_copy = tiny_tables()["events"].num_rows
    copies = max(1, args.events // per_copy)
    rank_copies = 8
    tables = tile(rank_copies, max(1, copies // rank_copies))
    ev = tables["events"]
    print(f"run: {ev.num_rows:,} events, {tables['edges'].num_rows:,} edges, "
          f"{tables['steps'].num_rows:,} rank-steps, {RANKS * rank_copies} ranks")
    with tempfile.TemporaryDirectory() as tmp:
        t_write, run = timed(lambda: write_run(tables, Path(tmp) / "bench", {"hardware": "bench"}))
        print(f"write run:              {t_write:7.3f} s")
        for name in TABLES:
            p = run.table_path(name)
            md = pq.ParquetFile(p).metadata
            print(f"  {name + '.parquet':20s} {p.stat().st_size / 2**20:8.2f} MiB, "
                  f"{md.num_rows:>9,} rows, {md.num_row_groups:>3} row groups")
        print(f"  in-memory events        {ev.nbytes / 2**20:8.2f} MiB (Arrow)")
        t_ref, _ = timed(lambda: pq.read_table(run.table_path("events")), repeat=3)
        print(f"reference: read events.parquet fully: {t_ref:7.3f} s")

        t_con, _ = timed(lambda: connect([run]), repeat=3)
        eid = ev.num_rows * 7 // 9

        def point() -> pa.Table:
            return query(connect([run]), f"SELECT * FROM events WHERE event_id = {eid}")

        t_point, res = timed(point, repeat=5)
        assert res.num_rows == 1 and res.column("event_id")[0].as_py() == eid
        print(f"point query (connect + SELECT * WHERE event_id = {eid}): {t_point:7.3f} s "
              f"(target < 0.2 s; connect alone {t_con:.3f} s; {t_point / t_ref:.2f}x reference)")

        def analyze_all() -> dict[str, float]:
            con = connect([run])
            times = {}
            for name, a in ANALYZERS.items():
                t0 = time.perf_counter()
                a.run(con)
                times[name] = time.perf_counter() - t0
            return times

        t_all, per = timed(analyze_all, repeat=2)
        print(f"analyze (all {len(ANALYZERS)} analyzers): {t_all:7.3f} s "
              f"(target < 5 s; {t_all / t_ref:.2f}x reference)")
        for name, t in sorted(per.items(), key=lambda x: -x[1]):
            print(f"  {name:16s} {t:7.3f} s")


if __name__ == "__main__":
    main()
