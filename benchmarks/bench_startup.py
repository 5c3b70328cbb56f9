"""CLI startup benchmark: wall time of `--help`, `--version` and `hw list` in a fresh interpreter,
against `python -c pass` measured in the same run (best of N).

Target: each well under 1 s; `import mtia_trace.cli` under 0.5 s (check it with
`python -X importtime -c "import mtia_trace.cli"`).

    .venv/bin/python benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = {"python -c pass": ["-c", "pass"],
         "import mtia_trace.cli": ["-c", "import mtia_trace.cli"],
         **{f"mtia-trace {' '.join(a)}": ["-c", "import sys; from mtia_trace.cli import main; "
                                         "sys.exit(main(sys.argv[1:]))", *a]
            for a in (["--help"], ["--version"], ["hw", "list"])}}


def best(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *argv], cwd=REPO, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ref = best(CASES["python -c pass"], args.repeat)
    for name, argv in CASES.items():
        t = best(argv, args.repeat)
        print(f"{name:<24} {t:6.3f} s  ({t / ref:5.1f}x python -c pass)")


if __name__ == "__main__":
    main()
