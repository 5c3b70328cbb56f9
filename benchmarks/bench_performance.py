"""The ingest and scaling report in one run: ingest against its references, then the scaling fit.

    python benchmarks/bench_performance.py [--repeat 3] [--big 2048x4] [--quick]

Runs `bench_ingest.py` and then `bench_scaling.py`, each as its own ``--help`` describes:

* ingest against the GC-off typed decode of the same file, and against Holistic Trace Analysis
  when it is installed, on the shared real traces and a generated one, with the ingest's peak
  memory against the final table;
* the fit of CPU time and peak RSS to ``a·N + b·N·R + c·N·S`` with its coefficients, and the
  large run (``--big``) against the 60 s / 4 GB targets, with its peak RSS per phase and the
  ingest's peak against the table.

``--quick`` passes ``--quick`` to both: a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402  (the sibling scripts, found through the path set above)
import bench_scaling  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--repeat", type=int, default=3, help="bench_ingest's --repeat")
    ap.add_argument("--big", default="2048x4", help="bench_scaling's --big (RANKSxSTEPS, '0': none)")
    ap.add_argument("--quick", action="store_true", help="--quick for both (a smoke run)")
    a = ap.parse_args(argv)
    print("== ingest against the decode floor and HTA (bench_ingest.py)", flush=True)
    bench_ingest.main(["--quick"] if a.quick else ["--repeat", str(a.repeat)])
    print("\n== how time and memory grow with the trace (bench_scaling.py)", flush=True)
    bench_scaling.main(["--quick"] if a.quick else ["--big", a.big])


if __name__ == "__main__":
    main()
