"""Generation speed of `mtia-trace synth`: events/s, and events and file sizes per preset.

Run: python benchmarks/bench_synth.py [--ranks 8 40] [--big 1024]
The reference is a plain `orjson.dumps` of the same number of event dicts built in Python,
measured in the same run, so the ratio is machine-independent.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import orjson

from mtia_trace.synth import PRESETS, SynthOptions, synthesize

#: a sharding each preset supports at the rank counts measured
SHARDING = {"dlrm-kaggle": "rw", "dlrm-dcnv2": "twrw", "rec-150b": "twrw"}


def _reference(n: int) -> float:
    t = time.perf_counter()
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e9 + i * 0.001,
           "dur": 1.5, "args": {"External id": i, "correlation": i}} for i in range(n)]
    orjson.dumps({"traceEvents": ev})
    return n / (time.perf_counter() - t)


def run(preset: str, ranks: int, steps: int, tmp: Path, level: int = 6,
        sharding: str | None = None) -> tuple[int, int, float]:
    m = PRESETS[preset]
    batch = ranks * max(1, m.batch // m.ranks)
    t = time.perf_counter()
    res = synthesize(SynthOptions(preset=preset, ranks=ranks, steps=steps, batch=batch,
                                  sharding=sharding or SHARDING[preset], compress_level=level),
                     tmp / f"{preset}-{ranks}", force=True)
    return res.events, res.bytes, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="*", default=[8, 40])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--big", type=int, default=1024, help="ranks of the scale run (0 to skip)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"{'preset':<12} {'ranks':>5} {'events':>10} {'MB (gz)':>9} {'s':>7} {'events/s':>11}")
        for preset in PRESETS:
            for r in a.ranks:
                n, b, s = run(preset, r, a.steps, tmp)
                print(f"{preset:<12} {r:>5} {n:>10,} {b / 1e6:>9.2f} {s:>7.2f} {n / s:>11,.0f}")
        if a.big:
            n, b, s = run("dlrm-dcnv2", a.big, a.steps, tmp, level=1, sharding="rw")
            ref = _reference(min(n, 500_000))
            print(f"scale: dlrm-dcnv2 rw {a.big} ranks x {a.steps} steps: {n:,} events,"
                  f" {b / 1e6:.1f} MB (gzip level 1), {s:.1f} s, {n / s:,.0f} events/s;"
                  f" {n / s / ref:.2f}x a bare orjson dump of event dicts ({ref:,.0f}/s)")


if __name__ == "__main__":
    main()
