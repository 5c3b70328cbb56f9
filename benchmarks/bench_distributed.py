"""Benchmark: single-process replay against a local Dask cluster, on generated DLRM-DCNv2 traces
(row-wise sharded embeddings, so every rank is in every all-to-all) at several rank counts.

Per configuration: wall time of the replay (cluster start-up excluded, reported apart), peak RSS
of the process running the replay (single) or of the driver and of each worker (distributed,
with each worker's RSS right after start-up as its baseline), the coupling iterations, and the
largest difference to the single-process run in the steps table and the events' start/end times.
Each configuration runs in a fresh process (fresh workers), so peaks do not carry over.

    .venv/bin/python benchmarks/bench_distributed.py [--ranks 128,256,512] [--workers 2,4]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HW = "mtia300"


def _mem_mb(field: str) -> float:
    """``VmHWM`` (peak RSS) or ``VmRSS`` of this process, from /proc (Linux). Unlike
    getrusage's ru_maxrss it is not inherited from the parent across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    return _mem_mb("VmHWM")


def _now_mb() -> float:
    return _mem_mb("VmRSS")


def _child(trace: Path, dest: Path, workers: int) -> dict:
    """Replay ``trace`` into ``dest`` in this process (workers == 0) or on a fresh local cluster."""
    from mtia_trace.replay_job import ReplayOptions, cost_model, replay_trace

    if workers == 0:
        import replay.run  # noqa: F401  (imports in the baseline, as in a worker's)

        base = _now_mb()
        t = time.perf_counter()
        replay_trace(trace, {HW: dest}, ReplayOptions(hws=[HW]))
        return {"wall_s": time.perf_counter() - t, "driver_mb": _rss_mb(), "base_mb": base}
    from replay.distributed.driver import connect, replay_distributed

    t = time.perf_counter()
    client = connect(None, workers)
    startup = time.perf_counter() - t
    base = client.run(_now_mb)
    model, spec, _ = cost_model(HW, ReplayOptions(hws=[HW]))
    t = time.perf_counter()
    _, meta = replay_distributed(trace, model, dest, {"hardware": HW, "spec": spec},
                                 client=client)
    wall = time.perf_counter() - t
    peak = client.run(_rss_mb)
    cluster = client.cluster
    client.close()
    cluster.close()
    return {"wall_s": wall, "startup_s": startup, "driver_mb": _rss_mb(),
            "worker_mb": [peak[w] for w in sorted(peak)],
            "worker_base_mb": [base[w] for w in sorted(peak)],
            "iterations": meta["distributed"]["coupling_iterations"]}


def _run(trace: Path, dest: Path, workers: int) -> dict:
    r = subprocess.run([sys.executable, __file__, "--child", str(trace), str(dest), str(workers)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        sys.exit(f"replay with {workers} workers failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _max_diff(a: Path, b: Path) -> tuple[float, float]:
    """Largest |difference| over the steps table's float columns, and over events' start/end."""
    from mtia_trace.storage import open_run

    ra, rb = open_run(a), open_run(b)
    sa = ra.read("steps").to_pandas().sort_values(["rank", "step"]).reset_index(drop=True)
    sb = rb.read("steps").to_pandas().sort_values(["rank", "step"]).reset_index(drop=True)
    assert len(sa) == len(sb) and list(sa.columns) == list(sb.columns)
    cols = [c for c in sa.columns if sa[c].dtype.kind == "f"]
    d_steps = float(np.abs(sa[cols].to_numpy() - sb[cols].to_numpy()).max())
    ea = ra.read("events").select(["event_id", "start_us", "end_us"]).to_pandas()
    eb = rb.read("events").select(["event_id", "start_us", "end_us"]).to_pandas()
    ea, eb = ea.sort_values("event_id"), eb.sort_values("event_id")
    assert (ea["event_id"].to_numpy() == eb["event_id"].to_numpy()).all()
    d_ev = float(np.abs(ea[["start_us", "end_us"]].to_numpy()
                        - eb[["start_us", "end_us"]].to_numpy()).max())
    return d_steps, d_ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="128,256,512")
    ap.add_argument("--workers", default="2,4", help="local cluster sizes (1 thread each)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(_child(Path(a.child[0]), Path(a.child[1]), int(a.child[2]))))
        return
    ranks = [int(x) for x in a.ranks.split(",")]
    sizes = [int(x) for x in a.workers.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        for n in ranks:
            tr = Path(tmp) / f"syn{n}"
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import sys; from mtia_trace.cli import main; sys.exit(main())",
                            "synth", "--preset", "dlrm-dcnv2", "--sharding", "rw", "--ranks",
                            str(n), "--steps", "1", "--batch", str(a.batch), "-o", str(tr)],
                           check=True, capture_output=True)
            print(f"synth {n} ranks: {time.perf_counter() - t:.1f} s", file=sys.stderr)
            one = _run(tr, Path(tmp) / f"one{n}", 0)
            rows.append({"ranks": n, "workers": 0, **one})
            for w in sizes:
                res = _run(tr, Path(tmp) / f"w{w}-{n}", w)
                res["diff"] = _max_diff(Path(tmp) / f"one{n}", Path(tmp) / f"w{w}-{n}")
                rows.append({"ranks": n, "workers": w, "ref_s": one["wall_s"], **res})
                print(f"{n} ranks, {w} workers done", file=sys.stderr)
    _table(rows)


def _table(rows: list[dict]) -> None:
    print("ranks  config      replay_s  vs_single  driver_MB  worker_peak_MB  worker_base_MB  "
          "ranks/worker  MB/rank(worker)  iterations  max|diff| steps/events")
    for r in rows:
        if r["workers"] == 0:
            print(f"{r['ranks']:5d}  single      {r['wall_s']:8.1f}  {1:9.2f}  "
                  f"{r['driver_mb']:9.0f}  {'-':>14}  {r['base_mb']:14.0f}  {r['ranks']:12d}  "
                  f"{(r['driver_mb'] - r['base_mb']) / r['ranks']:15.2f}  {'-':>10}  -")
            continue
        peak, base = max(r["worker_mb"]), max(r["worker_base_mb"])
        per = r["ranks"] / r["workers"]
        its = "+".join(str(i) for i in r["iterations"])
        print(f"{r['ranks']:5d}  {r['workers']} workers   {r['wall_s']:8.1f}  "
              f"{r['wall_s'] / r['ref_s']:9.2f}  {r['driver_mb']:9.0f}  {peak:14.0f}  "
              f"{base:14.0f}  {per:12.0f}  {(peak - base) / per:15.2f}  {its:>10}  "
              f"{r['diff'][0]:.1e}/{r['diff'][1]:.1e}")
    ups = [r["startup_s"] for r in rows if r["workers"]]
    print("(replay_s excludes the local cluster's start-up, "
          f"{min(ups):.1f}-{max(ups):.1f} s here; MB/rank(worker) is (peak - baseline) / ranks "
          "per worker; single: the same for the one process)")


if __name__ == "__main__":
    main()
