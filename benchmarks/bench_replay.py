"""Benchmark: graph + schedule + attribution on a generated ~1M-event trace and on the largest
real trace (when present). Prints events/s, peak RSS against the events table's size, and, when
Holistic Trace Analysis is installed (``pip install -e .[bench]``), HTA's own critical-path
analysis of the same real trace measured in the same run (CPU seconds for the same rows; HTA's
parse is left out of both, see bench_ingest.py), or why it could not be measured.

    .venv/bin/python benchmarks/bench_replay.py [--events 1000000] [--real PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtia_trace import schema

_HTA_CP = r"""
import json, logging, sys, time
from pathlib import Path
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
p = Path(sys.argv[1]).resolve()
ta = TraceAnalysis(trace_files={0: str(p)}, trace_dir=str(p.parent))
steps = [s for s in ta.t.symbol_table.get_sym_table() if s.startswith("ProfilerStep#")]
c0 = time.process_time()
g, ok = ta.critical_path_analysis(rank=0, annotation="ProfilerStep",
                                  instance_id=(0, len(steps) - 1) if len(steps) > 1 else 0)
print(json.dumps({"cpu": time.process_time() - c0, "ok": bool(ok), "nodes": g.number_of_nodes(),
                  "rows": len(ta.t.get_trace(0))}))
"""


def hta_critical_path(path: Path) -> str:
    """HTA's critical path on ``path``, measured in a child process, as one line of text."""
    if subprocess.run([sys.executable, "-c", "import hta"], capture_output=True).returncode:
        return "HTA critical path: not measured (HTA not installed: pip install -e .[bench])"
    p = subprocess.run([sys.executable, "-c", _HTA_CP, str(path)], capture_output=True, text=True)
    if p.returncode:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return f"HTA critical path: failed on this install ({err})"
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return (f"HTA critical path: {r['cpu']:.2f} s CPU for {r['rows']:,} rows "
            f"({r['nodes']:,} graph nodes, success={r['ok']})")


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


def bench(events: pa.Table, label: str) -> float:
    from replay.attribution import attribute_steps, check_attribution
    from replay.costs import COMPONENTS, AsMeasured
    from replay.critical_path import path_tables
    from replay.graph import build_graph
    from replay.pipeline import costing_input
    from replay.scheduler import schedule

    n = events.num_rows
    size_mb = events.nbytes / 2**20
    rss0 = rss_mb()
    t0 = time.process_time()
    g = build_graph(events)
    t1 = time.process_time()
    costs = AsMeasured().cost(costing_input(events, g))
    comps = {c: getattr(costs, f"{c}_us") for c in COMPONENTS}
    t2 = time.process_time()
    s = schedule(g, sum(comps.values()))
    t3 = time.process_time()
    pt = path_tables(g, s, comps)
    steps, _walks = attribute_steps(events, g, s, pt)
    check_attribution(steps)
    t4 = time.process_time()
    gs = (t1 - t0) + (t3 - t2)
    meas = steps.column("measured_us").to_numpy()
    err = np.abs(steps.column("total_us").to_numpy() - meas) / np.maximum(meas, 1e-12)
    print(f"[{label}] {n:,} events, table {size_mb:.0f} MB, {g.n and len(g.src_pt):,} cross-track edges, "
          f"{s.passes} passes")
    print(f"  CPU s: graph {t1 - t0:.2f}s  schedule {t3 - t2:.2f}s  critical path+attribution {t4 - t3:.2f}s "
          f"(costing {t2 - t1:.2f}s, not counted)")
    print(f"  graph+schedule: {n / gs / 1e6:.2f} M events/s (target >= 1.0)")
    print(f"  graph+schedule+attribution: {n / (gs + t4 - t3) / 1e6:.2f} M events/s "
          f"({gs + t4 - t3:.2f} s)")
    print(f"  peak RSS {rss_mb():.0f} MB (before replay {rss0:.0f} MB; growth "
          f"{(rss_mb() - rss0) / max(size_mb, 1e-9):.1f}x the events table, target <= 3x)")
    print(f"  as-measured step error: median {np.median(err):.2e}, worst {err.max():.2e}")
    return gs + t4 - t3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--real", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="a 20k-event generated trace only")
    a = ap.parse_args()
    if a.quick:
        a.events = 20_000
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
    if real is not None and real.exists() and not a.quick:
        from mtia_trace.ingest import load

        ours = bench(load(real).events, f"real {real.name}")
        print(f"  ours: graph+schedule+attribution {ours:.2f} s CPU")
        print(f"  {hta_critical_path(real)}")


if __name__ == "__main__":
    main()
