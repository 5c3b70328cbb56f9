"""Fuzz campaign: thousands of hostile CLI invocations, each in a forked copy of this process
(imports paid once, so a case costs its own work), each with a time and memory limit; prints
per class: tried / clean exit 2 / clean exit 0 / traceback / wrong exit / hang / silent wrong /
query wrote, and the first examples of every failure.

The case families (trace mutations, hostile files, timestamps, spec values and files, SQL write
attempts, output destinations, corrupted runs (truncated, swapped, page-level bit flips, older
schemas), arguments, synth requests under lowered size limits, large and failing streamed query
results, ranks that disagree, a full disk during writes, costly input shapes, the timestamp
window, memory limits below the campaign's own) are in tests/fuzzcases.py, shared with the
bounded property tests in tests/test_fuzz.py.

    python benchmarks/fuzz_campaign.py [--cases 660] [--seed 0] [--jobs 2]
        [--timeout 60] [--only "sql write"]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fuzzcases import FAMILIES, OUTCOMES, Case, Workspace, classify  # noqa: E402

import mtia_trace.cli  # noqa: E402,F401  (imported before forking: children start warm)

#: Address-space limit of one case (a bomb must fail with a message, not take the machine).
MEMORY_LIMIT = 6 * 2**30


def _child(case: Case, out_path: Path, err_path: Path) -> None:
    """In the forked child: run the CLI in process, stdout/stderr to files; exit with its code."""
    code = 3
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        os.environ.update(case.env)
        if case.setup is not None:
            case.setup()
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        from mtia_trace.cli import main
        code = main(case.argv)
    except BaseException:  # noqa: BLE001 - a traceback is what the campaign counts
        traceback.print_exc()
        code = 99
    try:  # the case's own check runs here too: the parent never touches pyarrow before a fork
        problem = case.check() if case.check is not None else None
        if problem:
            (out_path.parent / "problem.txt").write_text(problem)
    except BaseException:  # noqa: BLE001
        (out_path.parent / "problem.txt").write_text("check failed: " +
                                                     traceback.format_exc(limit=1))
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 99 else 99)


def run_case(case: Case, scratch: Path, timeout: float) -> tuple[str, str, float]:
    out_path, err_path = scratch / "out.txt", scratch / "err.txt"
    (scratch / "problem.txt").unlink(missing_ok=True)
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        _child(case, out_path, err_path)
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            status = 0
            break
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status) if not timed_out else None
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""  # noqa: E731
    out, err = read(out_path), read(err_path)
    crashed = code == 99 or (code is not None and code < 0)
    if code is not None and code < 0:
        err += f"\nTraceback (most recent call last): killed by signal {-code}"
    problem = read(scratch / "problem.txt") or None
    outcome, detail = classify(case, code, out, err, crashed, timed_out, problem)
    return outcome, detail or case.what, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=660,
                    help="invocations (the default, 660, took 12 minutes on 2 idle cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case (a hang)")
    ap.add_argument("--only", action="append", help="case families to run (repeatable)")
    args = ap.parse_args()
    families = {k: v for k, v in FAMILIES.items() if not args.only or k in args.only}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="mtia-fuzz-") as tmp:
        os.chdir(tmp)  # relative paths a case writes land here (and are checked)
        ws = Workspace(Path(tmp) / "ws")
        pid = os.fork()  # build the stored run in a child: no Arrow threads in this process
        if pid == 0:
            ws.build()
            os._exit(0)
        os.waitpid(pid, 0)
        cases = []
        names = list(families)
        for i in range(args.cases):
            fam = names[i % len(names)]
            cases.append(families[fam](ws, random.Random(rng.random())))
        # every case forks from here: what this process maps, each case holds before its own
        # memory limit counts (Arrow's allocator alone maps 1 GiB)
        loaded = [m for m in ("pyarrow", "numpy", "duckdb") if m in sys.modules]
        if loaded:
            sys.exit(f"fuzz campaign: building the cases loaded {', '.join(loaded)} in the "
                     "parent; load it in the case's setup or check instead")
        table: dict[str, Counter] = defaultdict(Counter)
        examples: dict[tuple[str, str], list[str]] = defaultdict(list)
        t0 = time.perf_counter()
        running: dict[int, tuple[Case, Path]] = {}
        # simple process-level parallelism: run `jobs` cases at once, each in its own fork
        queue = list(enumerate(cases))
        walls = []

        def finish(result: tuple[str, str, float], case: Case) -> None:
            outcome, detail, wall = result
            walls.append(wall)
            table[case.cls][outcome] += 1
            if outcome not in ("clean exit 2", "clean exit 0") and \
                    len(examples[(case.cls, outcome)]) < 3:
                examples[(case.cls, outcome)].append(f"{' '.join(case.argv)[:140]} :: "
                                                     f"{detail[:200]}")

        if args.jobs <= 1:
            for i, case in queue:
                scratch = Path(tmp) / f"s{i % 4}"
                scratch.mkdir(exist_ok=True)
                finish(run_case(case, scratch, args.timeout), case)
        else:
            import concurrent.futures as cf
            with cf.ThreadPoolExecutor(args.jobs) as pool:
                futs = {}
                for i, case in queue:
                    scratch = Path(tmp) / f"s{i}"
                    scratch.mkdir()
                    futs[pool.submit(run_case, case, scratch, args.timeout)] = case
                for f in cf.as_completed(futs):
                    finish(f.result(), futs[f])
        del running
        elapsed = time.perf_counter() - t0
    cols = ("tried",) + OUTCOMES
    width = max(len(k) for k in [*table, "total"]) + 2
    print(f"fuzz campaign: {args.cases} cases, seed {args.seed}, {args.jobs} job(s), "
          f"{elapsed:.0f} s wall ({sum(walls) / max(1, len(walls)):.2f} s per case)")
    print("class".ljust(width) + "  ".join(c.rjust(len(c)) for c in cols))
    total: Counter = Counter()
    for cls in sorted(table):
        row = table[cls]
        total.update(row)
        print(cls.ljust(width) + "  ".join(
            str(sum(row.values()) if c == "tried" else row[c]).rjust(len(c)) for c in cols))
    print("total".ljust(width) + "  ".join(
        str(sum(total.values()) if c == "tried" else total[c]).rjust(len(c)) for c in cols))
    for (cls, outcome), ex in sorted(examples.items()):
        print(f"\n{cls} / {outcome}:")
        for e in ex:
            print(f"  {e}")


if __name__ == "__main__":
    main()
