"""How close `synth`'s up-front estimate is to what it then does: events and bytes written, and
peak memory (the child's max RSS growth over its RSS after imports), per configuration.

    python benchmarks/bench_synth_estimate.py [--quick]

Prints one row per configuration with estimate / actual ratios. The estimate refuses requests
past a limit, so it must not under-estimate by much; the factors are reported, not asserted
(tests/test_synth_estimate.py checks small cases within a factor).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys
from pathlib import Path
from mtia_trace.synth import SynthOptions, synthesize
import mtia_trace.synth.generate as g
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
opts = SynthOptions(**json.loads(sys.argv[1]))
seen = {}
res = synthesize(opts, Path(sys.argv[2]), on_estimate=lambda e: seen.update(e=e))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
e = seen["e"]
print(json.dumps({"events": res.events, "bytes": res.bytes, "peak": peak,
                  "e_events": e.events, "e_bytes": e.bytes, "e_peak": e.peak_bytes}))
"""

CONFIGS = [
    {"ranks": 8, "steps": 2}, {"ranks": 8, "steps": 20}, {"ranks": 8, "steps": 200},
    {"ranks": 64, "steps": 2, "sharding": "twrw"}, {"ranks": 256, "steps": 2, "sharding": "twrw"},
    {"ranks": 64, "steps": 20, "sharding": "cw"},
    {"ranks": 64, "steps": 4, "sharding": "rw"}, {"ranks": 512, "steps": 2, "sharding": "rw"},
    {"ranks": 32, "steps": 4, "sharding": "twrw"}, {"ranks": 16, "steps": 8, "mode": "infer"},
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first four configurations only")
    args = ap.parse_args()
    configs = CONFIGS[:4] if args.quick else CONFIGS
    print(f"{'configuration':<40}{'events':>12}{'est/act':>9}{'MB':>9}{'est/act':>9}"
          f"{'peak MB':>9}{'est/act':>9}")
    for cfg in configs:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg), f"{tmp}/t"],
                                 capture_output=True, text=True, cwd=REPO,
                                 env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        if out.returncode:
            print(f"{json.dumps(cfg):<40} failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout)
        print(f"{json.dumps(cfg):<40}{r['events']:>12,}{r['e_events'] / r['events']:>9.2f}"
              f"{r['bytes'] / 1e6:>9.1f}{r['e_bytes'] / r['bytes']:>9.2f}"
              f"{r['peak'] / 1e6:>9.0f}{r['e_peak'] / max(r['peak'], 1):>9.2f}")


if __name__ == "__main__":
    main()
