"""Benchmarks are not run in CI; each one's --help must not start it, and --quick must run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mtia_trace

ROOT = Path(__file__).resolve().parents[1]
BENCH = sorted((ROOT / "benchmarks").glob("bench_*.py"))
QUICK = ("bench_costs.py", "bench_ingest.py", "bench_performance.py", "bench_replay.py",
         "bench_scaling.py")


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if Path(mtia_trace.__file__).resolve().is_relative_to(ROOT / "mtia_trace"):  # the source tree
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_help_does_not_start_the_benchmark(path: Path) -> None:
    # argparse exits after printing the usage: nothing of the benchmark runs (the timeout only
    # catches one that starts anyway; a loaded machine may take seconds to import)
    p = _run(str(path), "--help", timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:"), p.stdout[:200]


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK)
def test_quick_mode_runs(name: str) -> None:
    p = _run(str(ROOT / "benchmarks" / name), "--quick", timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip(), "a quick run prints its measurements"
