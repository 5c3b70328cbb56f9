"""Benchmark: `report` against the replay that made the run, in whole processes, interleaved.

    python benchmarks/bench_report.py [TRACE] [--hw mtia300] [--rounds 3]

TRACE defaults to the MTIA training trace under ../shared/traces/real/hta when present, else the
bundled 2-rank synthetic sample. Each round runs, one after another: the replay (`mtia-trace
replay TRACE --hw HW`, the reference), `report --format md` and `report --format html` of the run
it wrote. Printed per command: fastest and median wall time, the median's ratio to the replay's
median, and the peak RSS of the process against the run's tables in memory (the Parquet files'
Arrow size). A report reads a stored run, so it should cost a fraction of the replay. Targets on
the MTIA run (a 2-core machine): HTML under 3 s, Markdown under 1.5 s, peak memory under 2x the
tables' size in memory above the process's start-up footprint. The median CPU time (user +
system) and its ratio to the replay's are printed beside the wall times: on a loaded machine the
wall time waits on other processes, the CPU time much less (the targets are judged on wall time).

The start-up footprint of a format is the peak RSS of a process that loads what that report
loads before it reads anything (the report command, loaded as the CLI loads it, which chooses
Arrow's memory pool; pyarrow, which loads pandas on its first array; an empty DuckDB connection;
matplotlib for HTML) and then exits: the memory a report pays whatever the run's size. `mtia-trace --version`'s peak is printed beside it.

Every process runs with Python's bytecode cache on (in a temporary folder,
``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` is dropped), as an installed package has
it, after one untimed run of each command that writes it: otherwise each process compiles the
project's sources again.
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

ROOT = Path(__file__).resolve().parents[1]
MTIA = ROOT.parent / "shared" / "traces" / "real" / "hta" / "mtia_trace_single_rank"
SAMPLE = ROOT / "sample_traces" / "synth" / "dcnv2_train_2rank"
TARGETS_S = {"report md": 1.5, "report html": 3.0}


def _cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from mtia_trace.cli import main; sys.exit(main())"]


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one process running ``argv``."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:])}: exit {proc.returncode}: {err.strip()[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


#: What a report of each format loads before reading the run (see the module docstring): the
#: command as the CLI loads it, which picks Arrow's memory pool before pyarrow loads.
_FOOTPRINT = ("from mtia_trace.cli import load_command; load_command('report'); "
              "import duckdb, pyarrow as pa; pa.array([0]); duckdb.connect(':memory:').close()")
FOOTPRINTS = {"report md": _FOOTPRINT,
              "report html": _FOOTPRINT + "; import analyzers.report.figures"}


def _tables_mb(run: Path) -> float:
    import pyarrow.parquet as pq

    return sum(pq.read_table(f).nbytes for f in run.rglob("*.parquet")) / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("trace", nargs="?", type=Path, default=MTIA if MTIA.exists() else SAMPLE)
    ap.add_argument("--hw", default="mtia300")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmds = {
            "replay": [*_cli(), "replay", str(a.trace), "--hw", a.hw, "-o", str(run), "--force",
                       "--quiet"],
            "report md": [*_cli(), "report", str(run), "--format", "md", "-o",
                          str(Path(tmp) / "r.md"), "--force"],
            "report html": [*_cli(), "report", str(run), "--format", "html", "-o",
                            str(Path(tmp) / "r.html"), "--force"],
        }
        # bytecode cached as an installed package has it, in a folder of its own (the checkout
        # stays clean): without it every process compiles the project's sources again
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        for argv_ in cmds.values():  # warm-up, untimed: writes the bytecode cache
            _timed(argv_, env)
        # after the warm-up, as the reports run: a footprint that compiled the sources would
        # count the compiler's memory, which no timed report pays
        version_mb = _timed([*_cli(), "--version"], env)[2]
        base_mb = {name: _timed([sys.executable, "-c", code], env)[2]
                   for name, code in FOOTPRINTS.items()}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        cpus: dict[str, list[float]] = {k: [] for k in cmds}
        peaks: dict[str, list[float]] = {k: [] for k in cmds}
        for i in range(a.rounds):
            print(f"round {i + 1}/{a.rounds}", file=sys.stderr, flush=True)
            for name, argv_ in cmds.items():
                wall, cpu, peak = _timed(argv_, env)
                times[name].append(wall)
                cpus[name].append(cpu)
                peaks[name].append(peak)
        tables = _tables_mb(run)
    ref = statistics.median(times["replay"])
    ref_cpu = statistics.median(cpus["replay"])
    print(f"trace: {a.trace} on {a.hw}; {a.rounds} rounds; the run's tables in memory "
          f"{tables:.1f} MB; start-up footprint md {base_mb['report md']:.0f} MB, html "
          f"{base_mb['report html']:.0f} MB (`--version`: {version_mb:.0f} MB)")
    print(f"{'command':<12} {'fastest s':>9} {'median s':>9} {'x replay':>9} {'CPU s':>6} "
          f"{'x replay':>9} {'peak MB':>8} {'peak-start / tables':>20}  target")
    for name in cmds:
        med = statistics.median(times[name])
        peak = max(peaks[name])
        start = base_mb.get(name, version_mb)
        over = (peak - start) / tables if tables else float("nan")
        target = TARGETS_S.get(name)
        verdict = ""
        if target is not None:
            met = med < target and over < 2.0
            verdict = f"< {target:g} s, < 2x tables: {'met' if met else 'missed'}"
        cpu = statistics.median(cpus[name])
        print(f"{name:<12} {min(times[name]):9.2f} {med:9.2f} {med / ref:9.2f} {cpu:6.2f} "
              f"{cpu / ref_cpu:9.2f} {peak:8.0f} {over:20.2f}  {verdict}")


if __name__ == "__main__":
    main()
