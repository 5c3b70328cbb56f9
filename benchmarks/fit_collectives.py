"""Fit the collective model's calibrated terms on published nccl-tests tables; print the fit
beside leave-one-table-out error.

Two terms are fitted, each one named mechanism (docs/hardware.md, "Calibrated terms"):

- ``comm.fill_chunks`` (one value for every GPU spec): chunk rounds of pipeline fill whose
  step synchronisation is not overlapped with transfer, so the in-node links run at
  ``1 / (1 + fill / (1 + rounds))`` of their rate (`replay.hardware.collectives._as_run`);
- ``comm.group_launch_us`` (per spec, as it is the host's): the per-GPU host cost of one
  thread launching a grouped collective on several GPUs (nccl-tests ``-g N``). A spec with no
  launch-bound row left to fit on keeps its ``host.kernel_launch_us``.

Only tables whose system matches a bundled spec (``match`` in validate_collectives.py) are fitted
on. The loss is the mean over tables of the mean |log(predicted / measured time)| of their rows,
so every table weighs the same whatever its row count. Leave-one-table-out refits both terms
without the table and predicts it, so a term that only fits its own tables shows.

    python benchmarks/fit_collectives.py [DIR]

``DIR`` defaults to ../shared/nccl next to the repository, else the copy in tests/data/nccl (the
repository never needs ../shared); a directory without matching tables is said so, exit 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_collectives import BANDS, DEFAULT_DIR, Result, validate_table  # noqa: E402

from replay.hardware import load_spec  # noqa: E402

#: grids the terms are fitted over (the step is the precision the spec files carry)
FILL_GRID = np.round(np.arange(0.0, 2.001, 0.05), 2)
LAUNCH_GRID = np.round(np.arange(1.0, 10.001, 0.1), 1)
#: the device time alone, so the launch bound can be applied for every grid value at once
_NO_LAUNCH = "comm.group_launch_us=0.001"


class Table:
    """One matching table's rows: measured time and, per fill value, the device time."""

    def __init__(self, path: Path, results: dict[float, Result]) -> None:
        first = next(iter(results.values()))
        self.name, self.spec, self.g = path.stem, first.spec, first.gpus_per_thread
        self.bytes = np.array([q["bytes"] for q in first.points], dtype=np.float64)
        self.measured = np.array([q["measured_us"] for q in first.points], dtype=np.float64)
        self.device = {f: np.array([q["predicted_us"] for q in r.points])
                       for f, r in results.items()}

    def predicted(self, fill: float, launch: float) -> np.ndarray:
        dev = self.device[fill]
        return np.maximum(dev, self.g * launch) if self.g > 1 else dev

    def loss(self, fill: float, launch: float) -> float:
        return float(np.mean(np.abs(np.log(self.predicted(fill, launch) / self.measured))))


def load(directory: Path) -> list[Table]:
    tables = []
    for path in sorted(directory.glob("*.json")):
        base = validate_table(path)
        if base is None or not base.match or base.metric not in ("time_us", "busbw"):
            continue
        runs = {float(f): validate_table(path, (f"comm.fill_chunks={f}", _NO_LAUNCH))
                for f in FILL_GRID}
        tables.append(Table(path, runs))  # type: ignore[arg-type]
    return tables


def prior_launch(spec: str) -> float:
    return float(load_spec(spec).value("host.kernel_launch_us"))  # type: ignore[arg-type]


def fit(tables: list[Table]) -> tuple[float, dict[str, float]]:
    """(fill, group launch per spec) minimising the mean table loss over ``tables``."""
    specs = sorted({t.spec for t in tables})
    best: tuple[float, float, dict[str, float]] | None = None
    for f in FILL_GRID:
        launch, total = {}, 0.0
        for s in specs:
            mine = [t for t in tables if t.spec == s]
            losses = [sum(t.loss(f, lv) for t in mine) for lv in LAUNCH_GRID]
            if max(losses) - min(losses) > 1e-9:  # some row of a -g table is launch-bound
                i = int(np.argmin(losses))
                launch[s], total = float(LAUNCH_GRID[i]), total + losses[i]
            else:
                launch[s] = prior_launch(s)
                total += sum(t.loss(f, launch[s]) for t in mine)
        if best is None or total < best[0] - 1e-12:
            best = (total, float(f), launch)
    assert best is not None
    return best[1], best[2]


def summary(table: Table, fill: float, launch: float) -> dict[str, float | None]:
    """median and p90 |time error|, and median |time error| per size band."""
    err = np.abs(table.predicted(fill, launch) / table.measured - 1)
    out: dict[str, float | None] = {"median": float(np.median(err)),
                                    "p90": float(np.percentile(err, 90))}
    for label, lo, hi in BANDS:
        m = (table.bytes >= lo) & (table.bytes < hi)
        out[label] = float(np.median(err[m])) if m.any() else None
    return out


def _cells(s: dict[str, float | None]) -> str:
    return "".join(f" {'-' if s[k] is None else f'{s[k]:.1%}':>8}"
                   for k in ("median", "p90", *(b[0] for b in BANDS)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    a = ap.parse_args(argv)
    if not a.dir.is_dir():
        print(f"{a.dir}: no nccl-tests tables here; nothing to fit (pass a directory)")
        return 0
    tables = load(a.dir)
    if not tables:
        print(f"{a.dir}: no table matches a bundled spec; nothing to fit")
        return 0
    fill, launch = fit(tables)
    print(f"fitted on {len(tables)} matching tables: comm.fill_chunks = {fill:g}; "
          "comm.group_launch_us = " + ", ".join(f"{s} {v:g}" for s, v in sorted(launch.items())))
    for s in sorted(launch):
        spec = load_spec(s)
        have = (spec.value("comm.fill_chunks"), spec.value("comm.group_launch_us"))
        print(f"  {s}.toml carries fill {have[0]:g}, group launch {have[1]:g}"
              + ("" if have == (fill, launch[s]) else "  <- differs from the fit"))
    cols = "".join(f" {k:>8}" for k in ("median", "p90", *(b[0] for b in BANDS)))
    head = (f"{'table':<44} {'-g':>2}  in-sample{cols[9:]}   | leave-one-out{cols[13:]}   LOO fill"
            "  LOO launch")
    print(head)
    print("-" * len(head))
    passes = {"in": 0, "loo": 0}
    band_pass: dict[str, list[int]] = {b[0]: [0, 0, 0] for b in BANDS}  # in, loo, tables
    for t in tables:
        ins = summary(t, fill, launch[t.spec])
        f2, l2 = fit([u for u in tables if u is not t])
        launch2 = l2.get(t.spec, prior_launch(t.spec))
        loo = summary(t, f2, launch2)
        for key, s in (("in", ins), ("loo", loo)):
            passes[key] += int(s["median"] <= 0.15 and s["p90"] <= 0.35  # type: ignore[operator]
                               and all(s[b[0]] is None or s[b[0]] <= 0.15  # type: ignore[operator]
                                       for b in BANDS))
        for label, _, _ in BANDS:
            if ins[label] is not None:
                band_pass[label][2] += 1
                band_pass[label][0] += int(ins[label] <= 0.15)  # type: ignore[operator]
                band_pass[label][1] += int(loo[label] <= 0.15)  # type: ignore[operator]
        print(f"{t.name:<44} {t.g:>2} {_cells(ins)}   | {_cells(loo)}   {f2:<8g}  {launch2:g}")
    print(f"tables within median <= 15%, p90 <= 35% and every band's median <= 15%: "
          f"in-sample {passes['in']}/{len(tables)}, leave-one-out {passes['loo']}/{len(tables)}")
    print("band median <= 15% (in-sample / leave-one-out / tables with rows in the band): "
          + "; ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in band_pass.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
