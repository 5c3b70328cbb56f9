"""How the pipeline's time and memory grow with the trace: a fit of `a·N + b·N·R + c·N·S`.

    python benchmarks/bench_scaling.py [--ranks 32 128 512] [--steps 1 2 4] [--repeat 2]
        [--big 2048x4] [--quick]

Generates DLRM-DCNv2 traces (row-wise sharded, so every rank is in every all-to-all) on a grid of
rank counts R and step counts S, and runs `mtia-trace replay` (`replay_trace`: ingest, replay on
``--hw``, write the run) on each in a fresh subprocess. Per run: N (rows of the events table), wall
and CPU seconds of each phase, peak RSS (VmHWM; per phase for the large run) and the events table's
size. The grid is run ``--repeat`` times, pass after pass, and each point keeps its run of least
CPU (a slow spell of a shared machine then hits one run of a point, not the points it spans).
The grid reads its files serially (``MTIA_TRACE_INGEST_WORKERS=1``), so the fit sees the
work's growth and not where the parallel read switches on; the large run reads them as a user's
run does (traces of 64 MB of JSON or more on one process per CPU, `mtia_trace.ingest.readers`),
and its CPU time counts the reader processes too: the work done, where wall time is the wait.
Then fits CPU time and
peak RSS to ``a·N + b·N·R + c·N·S`` (least squares over the grid) and prints the coefficients and
the share of the largest run's time that the N·R and N·S terms make: for a pipeline linear in N
both are ~0. CPU time is what is fitted (also per phase, and for the phases after ingest
together): on a shared machine wall time carries other processes' load. ``--big RxS`` runs one large trace at the end against the 60 s / 4 GB targets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mtia_trace.ingest.readers import WORKERS_ENV

_CHILD = r"""
import json, sys, time
from pathlib import Path
from mtia_trace.replay_job import ReplayOptions, replay_trace
trace, dest, hw = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def hwm():
    # peak RSS (MB) since the last call, which resets it (Linux clear_refs 5)
    mb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return mb
marks = [("start", time.perf_counter(), time.process_time())]
peaks = []
def say(msg):
    peaks.append(hwm())  # the peak of the phase that ends here
    marks.append((msg.split(" ")[0], time.perf_counter(), time.process_time()))
rows = {}
import mtia_trace.ingest as ing
_load = ing.load
def load(*a, **k):
    tr = _load(*a, **k)
    rows["n"] = tr.events.num_rows
    rows["table_mb"] = tr.events.nbytes / 2**20
    rows["readers"] = tr.readers
    return tr
ing.load = load
replay_trace(trace, {hw: dest}, ReplayOptions(hws=[hw], force=True), progress=say)
say("done")
phases = {}
for (name, w0, c0), (_, w1, c1), pk in zip(marks, marks[1:], peaks):
    p = phases.setdefault(name, [0.0, 0.0, 0.0])
    p[0] += w1 - w0
    p[1] += c1 - c0
    p[2] = max(p[2], pk)
import resource  # the ingest's forked reader processes (`ingest.readers`), if any, all reaped
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
rows["reader_cpu"] = ru.ru_utime + ru.ru_stime
rows["reader_peak_mb"] = ru.ru_maxrss / 1024  # the largest one's (it counts pages it shares)
print(json.dumps({"phases": phases, "wall": marks[-1][1] - marks[0][1],
                  "cpu": marks[-1][2] - marks[0][2], "peak_mb": max(peaks), **rows}))
"""

#: progress messages of replay_trace / replay_events -> phase shown
PHASES = {"ingesting": "ingest", "reading": "ingest", "start": "ingest", "building": "graph",
          "costing": "cost", "scheduling": "schedule", "attributing": "attribute",
          "writing": "write"}


def synth(tmp: Path, ranks: int, steps: int) -> tuple[Path, int]:
    """(trace directory, JSON events written) of a generated DLRM-DCNv2 trace."""
    from mtia_trace.synth import PRESETS, SynthOptions, synthesize

    m = PRESETS["dlrm-dcnv2"]
    res = synthesize(SynthOptions(preset="dlrm-dcnv2", ranks=ranks, steps=steps, sharding="rw",
                                  batch=ranks * max(1, m.batch // m.ranks), compress_level=1),
                     tmp / f"dcnv2-{ranks}x{steps}", force=True)
    return res.out_dir, res.events


def run(trace: Path, dest: Path, hw: str, *, serial: bool = False) -> dict:
    env = {**os.environ, **({WORKERS_ENV: "1"} if serial else {})}
    p = subprocess.run([sys.executable, "-c", _CHILD, str(trace), str(dest), hw],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"replay of {trace} failed:\n{p.stderr[-2000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    grouped: dict[str, list[float]] = {}
    phase = "ingest"
    for name, (w, c, pk) in out["phases"].items():
        phase = PHASES.get(name, phase)  # other messages belong to the phase before them
        g = grouped.setdefault(phase, [0.0, 0.0, 0.0])
        g[0] += w
        g[1] += c
        g[2] = max(g[2], pk)
    grouped["ingest"][1] += out["reader_cpu"]  # CPU of the reader processes, if any
    out["cpu"] += out["reader_cpu"]
    out["phases"] = grouped
    return out


def _fit(terms: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Least-squares coefficients of y = Σ coef·term, in relative errors, so small and large
    runs weigh alike."""
    x = np.stack(terms, axis=1) / y[:, None]
    coef, *_ = np.linalg.lstsq(x, np.ones_like(y), rcond=None)
    return coef


def fit(n: np.ndarray, r: np.ndarray, s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(a, b, c, d) of y = a·N + b·N·R + c·N·S + d, d the fixed cost (imports, the
    interpreter)."""
    return _fit([n, n * r, n * s, np.ones_like(n)], y)


def fit_linear(n: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(a, d) of y = a·N + d."""
    return _fit([n, np.ones_like(n)], y)


def report_fit(what: str, unit: str, scale: float, n, r, s, y) -> np.ndarray:
    a, b, c, d = coef = fit(n, r, s, y)
    big = int(np.argmax(n))
    var = a * n[big] + b * n[big] * r[big] + c * n[big] * s[big]
    print(f"{what} = {a * scale:.3g} {unit}·N + {b * scale:.3g} {unit}·N·R + "
          f"{c * scale:.3g} {unit}·N·S + {d * scale:.3g} {unit}")
    print(f"  at R={r[big]:.0f}, S={s[big]:.0f} (N={n[big]:,.0f}): of the part that grows with N, "
          f"the N·R term is {b * n[big] * r[big] / var:.0%} and the N·S term "
          f"{c * n[big] * s[big] / var:.0%} (both ~0% for a pipeline linear in N)")
    pred = a * n + b * n * r + c * n * s + d
    print(f"  fit error: worst {np.max(np.abs(pred - y) / y):.0%} of the measured value")
    return coef


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--ranks", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--hw", default="mtia300", help="target of the replay (or as-measured)")
    ap.add_argument("--big", default="2048x4", help="RANKSxSTEPS of the large run ('0': none)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="passes over the grid; each point keeps its run of least CPU")
    ap.add_argument("--quick", action="store_true", help="a 2x2 grid of tiny traces, no big run")
    a = ap.parse_args(argv)
    if a.quick:
        a.ranks, a.steps, a.big, a.repeat = [4, 8], [1, 2], "0", 1
    grid = [(r, s) for r in a.ranks for s in a.steps]
    after = None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        traces = {(r, s): synth(tmp, r, s)[0] for r, s in grid}
        # whole passes, one after the other: a slow spell of the machine hits one run of a
        # point, not every run of the points measured during it
        best: dict[tuple[int, int], dict] = {}
        for _ in range(max(1, a.repeat)):
            for r, s in grid:
                out = run(traces[r, s], tmp / f"run-{r}x{s}", a.hw, serial=True)
                if (r, s) not in best or out["cpu"] < best[r, s]["cpu"]:
                    best[r, s] = out
        print(f"{'R':>5} {'S':>3} {'N rows':>10} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} "
              f"{'table MB':>8}  CPU s per phase (the run of least CPU of {max(1, a.repeat)})")
        res = [(r, s, best[r, s]) for r, s in grid]
        for r, s, out in res:
            ph = " ".join(f"{k} {v[1]:.2f}" for k, v in out["phases"].items())
            print(f"{r:>5} {s:>3} {out['n']:>10,} {out['wall']:>7.2f} {out['cpu']:>7.2f} "
                  f"{out['peak_mb']:>8.0f} {out['table_mb']:>8.0f}  {ph}")
        if len(grid) >= 3:
            n = np.array([o["n"] for _, _, o in res], dtype=float)
            rr = np.array([r for r, _, _ in res], dtype=float)
            ss = np.array([s for _, s, _ in res], dtype=float)
            report_fit("CPU time", "ns", 1e9, n, rr, ss, np.array([o["cpu"] for *_, o in res]))
            report_fit("peak RSS", "B", 2**20, n, rr, ss,
                       np.array([o["peak_mb"] for *_, o in res]))
            for ph in res[-1][2]["phases"]:
                y = np.array([o["phases"].get(ph, [0, 0])[1] for *_, o in res])
                if (y > 0.05).all():
                    report_fit(f"  {ph} CPU", "ns", 1e9, n, rr, ss, y)
            # the replay's phases together (each alone is too short to fit on the small runs)
            y = np.array([sum(v[1] for k, v in o["phases"].items() if k != "ingest")
                          for *_, o in res])
            top = int(np.argmax(n))
            after = (report_fit("  after ingest (graph, cost, schedule, attribute, write) CPU",
                                "ns", 1e9, n, rr, ss, y), fit_linear(n, y),
                     (res[top][0], res[top][1], n[top], y[top]))
        if a.big not in ("0", ""):
            r, s = (int(x) for x in a.big.lower().split("x"))
            trace, n_json = synth(tmp, r, s)
            out = run(trace, tmp / "run-big", a.hw)
            ph = ", ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in out["phases"].items())
            print(f"big: {r} ranks x {s} steps, {n_json:,} JSON events, {out['n']:,} rows: {out['wall']:.1f} s wall "
                  f"(target < 60 s; {out['cpu']:.1f} s CPU in all processes), peak RSS {out['peak_mb'] / 1024:.2f} GB"
                  f" (target < 4 GB), table {out['table_mb']:.0f} MB")
            print(f"  wall/CPU s per phase: {ph}")
            print(f"  ingest read on {out['readers']} process(es); largest reader's peak RSS "
                  f"{out['reader_peak_mb'] / 1024:.2f} GB (pages shared with this process count)")
            print("  peak RSS per phase (GB): " + ", ".join(
                f"{k} {v[2] / 1024:.2f}" for k, v in out["phases"].items()))
            if after is not None:
                # the big run's phases after ingest run as the grid's do: a point the fits were
                # not made from, where an N·R or N·S term the grid found would show
                (fa, fb, fc, fd), (la, ld), (r0, s0, n0, y0) = after
                nb = out["n"]
                got = sum(v[1] for k, v in out["phases"].items() if k != "ingest")
                print(f"  after ingest: {got:.1f} s CPU; the grid's fit predicts "
                      f"{fa * nb + fb * nb * r + fc * nb * s + fd:.1f} s, a fit of a·N + d alone "
                      f"{la * nb + ld:.1f} s")
                print(f"  against the grid's largest run ({r0}x{s0}): {nb / n0:.1f}x the rows at "
                      f"{r / r0:.0f}x the ranks and {s / s0:.0f}x the steps take {got / y0:.2f}x "
                      f"its after-ingest CPU ({got / nb * 1e6:.1f} vs {y0 / n0 * 1e6:.1f} us a row)")
            ing = out["phases"]["ingest"][2]
            print(f"  ingest peak RSS {ing / 1024:.2f} GB = {ing / out['table_mb']:.2f}x the events "
                  "table (target <= 2x)")


if __name__ == "__main__":
    main()
