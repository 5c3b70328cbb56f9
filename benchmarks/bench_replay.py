"""Benchmark: graph + schedule + attribution on a generated ~1M-event trace and on the largest
real trace (when present). Prints events/s, peak RSS against the events table's size, and the
ratio to HTA's critical-path throughput (~25k nodes/s, 45k nodes in 1.8 s), measured here as
our own critical-path + attribution rate.

    .venv/bin/python benchmarks/bench_replay.py [--events 1000000] [--real PATH]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtia_trace import schema

HTA_NODES_PER_S = 45_000 / 1.8


def generated(n_events: int, ranks: int = 8, steps: int = 10, seed: int = 0) -> pa.Table:
    """Per rank and step: a ProfilerStep, K launches and their kernels on 2 streams, one
    all-reduce per step and a synchronize; measured times consistent with the graph."""
    rng = np.random.default_rng(seed)
    k = max(1, (n_events // (ranks * steps) - 3) // 2)
    cols: dict[str, list[np.ndarray]] = {c: [] for c in (
        "rank", "track", "is_device", "device", "stream", "ts_us", "dur_us", "depth", "kind",
        "name", "correlation", "launch_id", "step", "pg", "coll_seq", "coll_op")}
    rows_per_rank = steps * (2 * k + 2)
    base = 0
    for r in range(ranks):
        h_ts, h_dur, h_depth, h_kind, h_name, h_corr, h_step = [], [], [], [], [], [], []
        d_ts, d_dur, d_str, d_kind, d_corr, d_step = [], [], [], [], [], []
        t = 0.0
        free = {7: 0.0, 9: 0.0}
        for s in range(steps):
            step_start = t
            gaps = rng.uniform(1, 6, k)
            ldur = rng.uniform(2, 5, k)
            starts = t + np.cumsum(gaps + np.r_[0, ldur[:-1]])
            t = starts[-1] + ldur[-1]
            kd = rng.uniform(2, 12, k)
            strm = np.where(rng.random(k) < 0.8, 7, 9)
            kst = np.empty(k)
            for st in (7, 9):  # two streams: a running max per stream
                m = strm == st
                lat = starts[m] + 4.0
                c = np.cumsum(kd[m])
                prev = c - kd[m]
                kst[m] = prev + np.maximum.accumulate(np.maximum(lat - prev, free[st] - prev[0] * 0))
                if m.any():
                    free[st] = kst[m][-1] + kd[m][-1]
            dev_end = max(free.values())
            corr = np.arange(k) + s * k + 1
            h_ts += [starts]; h_dur += [ldur]; h_depth += [np.ones(k)]; h_kind += [["runtime"] * k]
            h_name += [["cudaLaunchKernel"] * k]; h_corr += [corr]; h_step += [np.full(k, s)]
            d_ts += [kst]; d_dur += [kd]; d_str += [strm]; d_kind += [["gemm"] * k]
            d_corr += [corr]; d_step += [np.full(k, s)]
            sync_ts = t + 1.0
            sync_end = max(sync_ts + 2.0, dev_end + 2.0)
            h_ts += [[sync_ts], [step_start]]; h_dur += [[sync_end - sync_ts], [sync_end + 3 - step_start]]
            h_depth += [[1], [0]]; h_kind += [["runtime"], ["annotation"]]
            h_name += [["cudaDeviceSynchronize"], [f"ProfilerStep#{s}"]]
            h_corr += [[-1], [-1]]; h_step += [[s], [s]]
            t = sync_end + 3 + rng.uniform(5, 20)
        hts = np.concatenate([np.asarray(x, float) for x in h_ts])
        hdur = np.concatenate([np.asarray(x, float) for x in h_dur])
        ho = np.lexsort((-hdur, hts))
        dts = np.concatenate(d_ts)
        dstr = np.concatenate(d_str)
        do = np.lexsort((dts, dstr))
        nh, nd = len(hts), len(dts)
        hcorr = np.concatenate([np.asarray(x, np.int64) for x in h_corr])[ho]
        dcorr = np.concatenate(d_corr)[do]
        # launch ids: host row with the same correlation
        pos = {int(c): i for i, c in enumerate(hcorr.tolist()) if c >= 0}
        launch = base + np.array([pos[int(c)] for c in dcorr.tolist()], dtype=np.int64)
        cols["rank"] += [np.full(nh + nd, r)]
        cols["track"] += [np.array([f"host:{r}:1"] * nh + [f"dev:{r}:{s}" for s in dstr[do].tolist()])]
        cols["is_device"] += [np.r_[np.zeros(nh, bool), np.ones(nd, bool)]]
        cols["device"] += [np.r_[np.full(nh, -1), np.zeros(nd, int)]]
        cols["stream"] += [np.r_[np.full(nh, -1), dstr[do]]]
        cols["ts_us"] += [np.r_[hts[ho], dts[do]]]
        cols["dur_us"] += [np.r_[hdur[ho], np.concatenate(d_dur)[do]]]
        cols["depth"] += [np.r_[np.concatenate([np.asarray(x, int) for x in h_depth])[ho], np.zeros(nd, int)]]
        cols["kind"] += [np.r_[np.concatenate([np.asarray(x) for x in h_kind])[ho], np.concatenate(d_kind)[do]]]
        cols["name"] += [np.r_[np.concatenate([np.asarray(x) for x in h_name])[ho], np.full(nd, "gemm_kernel")]]
        cols["correlation"] += [np.r_[hcorr, dcorr]]
        cols["launch_id"] += [np.r_[np.full(nh, -1), launch]]
        cols["step"] += [np.r_[np.concatenate([np.asarray(x, int) for x in h_step])[ho], np.concatenate(d_step)[do]]]
        cols["pg"] += [np.full(nh + nd, None, dtype=object)]
        cols["coll_seq"] += [np.full(nh + nd, -1)]
        cols["coll_op"] += [np.full(nh + nd, None, dtype=object)]
        base += nh + nd
    del rows_per_rank
    data = {c: np.concatenate(v) for c, v in cols.items()}
    data["event_id"] = np.arange(len(data["rank"]))
    return schema.from_columns(data)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench(events: pa.Table, label: str) -> None:
    from replay.attribution import attribute_steps, check_attribution
    from replay.costs import COMPONENTS, AsMeasured
    from replay.critical_path import path_tables
    from replay.graph import build_graph
    from replay.run import costing_input
    from replay.scheduler import schedule

    n = events.num_rows
    size_mb = events.nbytes / 2**20
    rss0 = rss_mb()
    t0 = time.perf_counter()
    g = build_graph(events)
    t1 = time.perf_counter()
    costs = AsMeasured().cost(costing_input(events, g))
    comps = {c: getattr(costs, f"{c}_us") for c in COMPONENTS}
    t2 = time.perf_counter()
    s = schedule(g, sum(comps.values()))
    t3 = time.perf_counter()
    pt = path_tables(g, s, comps)
    steps, _walks = attribute_steps(events, g, s, pt)
    check_attribution(steps)
    t4 = time.perf_counter()
    gs = (t1 - t0) + (t3 - t2)
    meas = steps.column("measured_us").to_numpy()
    err = np.abs(steps.column("total_us").to_numpy() - meas) / np.maximum(meas, 1e-12)
    print(f"[{label}] {n:,} events, table {size_mb:.0f} MB, {g.n and len(g.src_pt):,} cross-track edges, "
          f"{s.passes} passes")
    print(f"  graph {t1 - t0:.2f}s  schedule {t3 - t2:.2f}s  critical path+attribution {t4 - t3:.2f}s "
          f"(costing {t2 - t1:.2f}s, not counted)")
    print(f"  graph+schedule: {n / gs / 1e6:.2f} M events/s (target >= 1.0)")
    print(f"  graph+schedule+attribution: {n / (gs + t4 - t3) / 1e6:.2f} M events/s; "
          f"vs HTA critical path ~{HTA_NODES_PER_S / 1e3:.0f}k nodes/s: "
          f"{n / (gs + t4 - t3) / HTA_NODES_PER_S:.0f}x (target >= 40x)")
    print(f"  peak RSS {rss_mb():.0f} MB (before replay {rss0:.0f} MB; growth "
          f"{(rss_mb() - rss0) / max(size_mb, 1e-9):.1f}x the events table, target <= 3x)")
    print(f"  as-measured step error: median {np.median(err):.2e}, worst {err.max():.2e}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--real", type=Path, default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    ev = generated(a.events)
    print(f"generated {ev.num_rows:,} events in {time.perf_counter() - t:.1f}s")
    bench(ev, "generated")
    del ev
    real = a.real
    if real is None:
        root = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "real"
        cands = sorted(root.rglob("*.json.gz"), key=lambda p: p.stat().st_size) if root.is_dir() else []
        real = cands[-1] if cands else None
    if real is not None and real.exists():
        from mtia_trace.ingest import load

        bench(load(real).events, f"real {real.name}")


if __name__ == "__main__":
    main()
