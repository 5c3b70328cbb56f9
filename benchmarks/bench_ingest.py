"""Ingest throughput against the floor of a bare JSON parse, measured in the same run.

    python benchmarks/bench_ingest.py [TRACE ...] [--events N]

Each measurement runs in a fresh subprocess so peak RSS is its own. Prints events/s, MB/s of
JSON, peak RSS, and the ratios to plain `orjson.loads` of the same (decompressed) bytes.
Default inputs: the biggest real trace under ../shared/traces/real (when present) and a
generated trace of ~1M events. HTA reads such traces at about 30-45k events/s.
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
import gzip, json, resource, sys, time
from pathlib import Path
mode, path = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
if mode == "orjson":
    import orjson
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    t0 = time.perf_counter()
    doc = orjson.loads(raw)
    n = len(doc["traceEvents"])
else:
    from mtia_trace.ingest import load
    n = load(path).events.num_rows
dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "n": n}))
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
    args = ap.parse_args()
    traces = list(args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        if not traces:
            if REAL.is_dir():
                traces.append(max(REAL.rglob("*.json.gz"), key=lambda p: p.stat().st_size))
            gen = Path(tmp) / "generated.json"
            generate(gen, args.events)
            traces.append(gen)
        for path in traces:
            import gzip
            raw = path.read_bytes()
            mb = len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6
            floor = _measure("orjson", path)
            ing = _measure("ingest", path)
            print(f"{path.name}: {floor['n']:,} JSON events, {ing['n']:,} rows, {mb:.1f} MB JSON")
            print(f"  orjson.loads : {floor['s']:.2f} s, {floor['n'] / floor['s']:,.0f} events/s, "
                  f"{mb / floor['s']:.0f} MB/s, peak RSS {floor['rss_mb']:.0f} MB")
            print(f"  ingest (load): {ing['s']:.2f} s, {floor['n'] / ing['s']:,.0f} events/s, "
                  f"{mb / ing['s']:.0f} MB/s, peak RSS {ing['rss_mb']:.0f} MB")
            print(f"  ratios: time {ing['s'] / floor['s']:.2f}x the bare parse (target <= 2), "
                  f"RSS {ing['rss_mb'] / floor['rss_mb']:.2f}x (target <= 1), "
                  f"{floor['n'] / ing['s'] / HTA_EVENTS_PER_S:.1f}x HTA's 45k events/s (target >= 10)")


if __name__ == "__main__":
    main()
