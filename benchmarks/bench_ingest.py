"""Ingest throughput against the floor of a bare JSON parse, measured in the same run.

    python benchmarks/bench_ingest.py [TRACE ...] [--events N]

Each measurement runs in a fresh subprocess so peak RSS (VmHWM, which exec resets) is its own;
the floor and the ingest alternate `--repeat` times and the fastest of each is kept, so load
from other processes hits both alike. Prints events/s, MB/s of JSON, peak RSS, and the ratios
to plain `orjson.loads` of the same (decompressed) bytes. Default inputs: the two biggest real
traces under ../shared/traces/real (when present) and a generated trace of ~1M events.
HTA reads such traces at about 30-45k events/s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "shared" / "traces" / "real"
HTA_EVENTS_PER_S = 45_000

_CHILD = r"""
import gzip, json, sys, time
from pathlib import Path
mode, path = sys.argv[1], Path(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
if mode == "orjson":
    import orjson
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    t0, c0 = time.perf_counter(), time.process_time()
    doc = orjson.loads(raw)
    n = len(doc["traceEvents"])
else:
    from mtia_trace.ingest import load   # imports (numpy, pandas, pyarrow) are reported apart
    imp = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    n = load(path).events.num_rows
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"s": dt, "cpu": cpu, "rss_mb": hwm / 1024, "n": n,
                  "import_s": imp if mode != "orjson" else 0.0}))
"""


def _measure(mode: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def generate(path: Path, n_events: int) -> None:
    """A 1-rank GPU-style trace: ops with shapes, launches, kernels, flows, a step every 10k."""
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    t = 0.0
    i = 0
    step = 0
    while len(ev) < n_events:
        if i % 2000 == 0:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t, "dur": 2000 * 10.0})
            step += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t,
                   "dur": 8.0, "args": {"External id": i, "Input Dims": [[64], [32, 128], [128, 64], [], []],
                                        "Input type": ["float", "float", "float", "Scalar", "Scalar"]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t + 1, "dur": 5.0, "args": {"External id": i, "correlation": i}})
        ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": t + 1})
        ev.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm", "pid": 0, "tid": 7,
                   "ts": t + 6, "dur": 3.0, "args": {"External id": i, "correlation": i, "device": 0,
                                                     "stream": 7}})
        ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 0, "tid": 7, "ts": t + 6,
                   "bp": "e"})
        t += 10.0
        i += 1
    path.write_text(json.dumps({"traceEvents": ev}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    traces = list(args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        if not traces:
            if REAL.is_dir():
                traces += sorted(REAL.rglob("*.json.gz"), key=lambda p: -p.stat().st_size)[:2]
            gen = Path(tmp) / "generated.json"
            generate(gen, args.events)
            traces.append(gen)
        for path in traces:
            import gzip
            raw = path.read_bytes()
            mb = len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6
            runs: dict[str, list[dict]] = {"orjson": [], "ingest": []}
            for _ in range(args.repeat):
                for mode, got in runs.items():
                    got.append(_measure(mode, path))
            floor, ing = ({"s": min(r["s"] for r in rs), "cpu": min(r["cpu"] for r in rs),
                           "rss_mb": max(r["rss_mb"] for r in rs), "n": rs[0]["n"]}
                          for rs in runs.values())
            ing["import_s"] = min(r["import_s"] for r in runs["ingest"])
            print(f"{path.name}: {floor['n']:,} JSON events, {ing['n']:,} rows, {mb:.1f} MB JSON")
            for label, m in (("orjson.loads ", floor), ("ingest (load)", ing)):
                print(f"  {label}: {m['s']:.2f} s wall ({m['cpu']:.2f} s CPU), "
                      f"{floor['n'] / m['s']:,.0f} events/s, {mb / m['s']:.0f} MB/s, "
                      f"peak RSS {m['rss_mb']:.0f} MB")
            print(f"  (importing the ingest package takes {ing['import_s']:.2f} s more, once per process)")
            print(f"  ratios: time {ing['s'] / floor['s']:.2f}x the bare parse "
                  f"(CPU {ing['cpu'] / floor['cpu']:.2f}x; target <= 2), "
                  f"RSS {ing['rss_mb'] / floor['rss_mb']:.2f}x (target <= 1), "
                  f"{floor['n'] / ing['s'] / HTA_EVENTS_PER_S:.1f}x HTA's 45k events/s (target >= 10)")


if __name__ == "__main__":
    main()
