"""Benchmark: `replay --workers 2` (a local Dask cluster) against one process, as a user runs it.

    python benchmarks/bench_workers.py [--ranks 16,64,256] [--workers 2] [--rounds 1]

Per rank count, generates `synth --preset dlrm-dcnv2 --sharding rw --steps 1 --batch 512` (every
rank in every all-to-all) and times whole `mtia-trace replay TRACE --hw mtia300` processes, the
configurations interleaved per round: one process reading the files serially
(``MTIA_TRACE_INGEST_WORKERS=1``: the reference), the default (no flag: reader processes for a
trace of 64 MB of JSON or more, else as the reference), and ``--workers N`` (the local cluster's
start-up included: a user waits for it). Printed per configuration: the median wall time and its
ratio to the reference's of the same rank count, whether the run's ``steps`` table equals the
reference's (float columns to 1e-9 us), and, last, the smallest measured rank count from which
the cluster is faster than one process ("none" when it never is in the measured range).

`benchmarks/bench_distributed.py` measures the same clusters inside one process (start-up
excluded) with memory per worker; this one answers what the default should be.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HW = "mtia300"
CLI = [sys.executable, "-c", "import sys; from mtia_trace.cli import main; sys.exit(main())"]


def _replay(trace: Path, dest: Path, extra: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    r = subprocess.run([*CLI, "replay", str(trace), "--hw", HW, "-o", str(dest), "--force",
                        "--quiet", *extra], capture_output=True, text=True, check=False,
                       env={**os.environ, **env})
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"replay {' '.join(extra)} failed: {r.stderr.strip()[-2000:]}")
    return wall


def _steps_equal(a: Path, b: Path) -> bool:
    from mtia_trace.storage import open_run

    sa = open_run(a).read("steps").sort_by([("rank", "ascending"), ("step", "ascending")])
    sb = open_run(b).read("steps").sort_by([("rank", "ascending"), ("step", "ascending")])
    if sa.column_names != sb.column_names or sa.num_rows != sb.num_rows:
        return False
    for c in sa.column_names:
        x = sa.column(c).to_numpy(zero_copy_only=False)
        y = sb.column(c).to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            if not np.allclose(x, y, rtol=0, atol=1e-9, equal_nan=True):
                return False
        elif not (x == y).all():
            return False
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--ranks", default="16,64,256")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--batch", type=int, default=512)
    a = ap.parse_args(argv)
    configs = {
        "one process": ([], {"MTIA_TRACE_INGEST_WORKERS": "1"}),
        "default": ([], {}),
        f"--workers {a.workers}": (["--workers", str(a.workers)], {}),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        for n in (int(x) for x in a.ranks.split(",")):
            trace = Path(tmp) / f"syn{n}"
            subprocess.run([*CLI, "synth", "--preset", "dlrm-dcnv2", "--sharding", "rw",
                            "--ranks", str(n), "--steps", "1", "--batch", str(a.batch),
                            "-o", str(trace)], check=True, capture_output=True)
            walls: dict[str, list[float]] = {k: [] for k in configs}
            for i in range(a.rounds):
                for name, (extra, env) in configs.items():
                    walls[name].append(_replay(trace, Path(tmp) / f"{n}-{i}-{len(extra)}-{len(env)}",
                                               extra, env))
                    print(f"{n} ranks, round {i + 1}: {name} {walls[name][-1]:.1f} s",
                          file=sys.stderr, flush=True)
            ref = statistics.median(walls["one process"])
            ref_run = Path(tmp) / f"{n}-0-0-1"
            for name, (extra, env) in configs.items():
                run = Path(tmp) / f"{n}-0-{len(extra)}-{len(env)}"
                med = statistics.median(walls[name])
                rows.append((n, name, med, med / ref, run == ref_run or _steps_equal(ref_run, run)))
    print(f"replay on {HW}, synth dlrm-dcnv2 rw, {os.cpu_count()} CPUs, {a.rounds} round(s); "
          "wall time of the whole command (cluster start-up included)")
    print(f"{'ranks':>5}  {'config':<12} {'median s':>9} {'x one process':>14}  steps equal")
    for n, name, med, ratio, same in rows:
        print(f"{n:5d}  {name:<12} {med:9.1f} {ratio:14.2f}  {'yes' if same else 'NO'}")
    cluster = f"--workers {a.workers}"
    pays = [n for n, name, _, ratio, _ in rows if name == cluster and ratio < 1.0]
    print(f"the local cluster of {a.workers} workers is faster than one process from: "
          f"{f'{min(pays)} ranks' if pays else 'none of the measured sizes'}")


if __name__ == "__main__":
    main()
