"""Validate the collective model against published nccl-tests tables.

For each table in a directory of published nccl-tests results (JSON: ``url``, ``hardware``,
``ranks``, ``op``, ``env``, ``rows`` of ``bytes`` / ``time_us`` / ``algbw`` / ``busbw``), build
the matching spec (a bundled spec plus the ``--set`` overrides listed in `TABLES` for the
system's NIC count/speed or the algorithm its ``env`` forces), predict every row with
`replay.hardware.collectives.nccl_tests_rows` and print per table the median and 90th
percentile relative error of ``time_us`` (of ``busbw`` for busbw-only tables). Constants are the
specs' (NCCL's tuning model and vendor figures); nothing here is fitted to the rows.

    python benchmarks/validate_collectives.py [DIR] [--format table|json] [--figure PNG]

``DIR`` defaults to ../shared/nccl next to the repository. Targets: median <= 15% and p90 <=
35% on tables whose system matches a bundled spec (``match`` column).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from replay.hardware import load_spec
from replay.hardware.collectives import nccl_tests_rows

MEDIAN_TARGET, P90_TARGET = 0.15, 0.35
DEFAULT_DIR = Path(__file__).resolve().parent.parent / ".." / "shared" / "nccl"

#: 32 x 100G EFA (p5) or 16 x 200G (p5en) per node of 8 GPUs: 400 Gb/s = 50 GB/s per GPU
_EFA = ["network.inter_node_GBps=50"]


@dataclass(frozen=True)
class Table:
    """How one published table maps onto a spec."""

    spec: str
    sets: tuple[str, ...] = ()
    match: bool = False      # the system is a bundled spec's as shipped (target applies)
    ranks: int | None = None  # where the file's ranks is unset: from busbw / algbw
    why: str = ""
    #: nccl-tests' -g (GPUs per host thread) where the table's env / note do not print it
    gpus_per_thread: int | None = None


#: Azure's AI-benchmarking-guide runs ``all_reduce_perf -b 8 -e 8G -f 2 -g <all GPUs> -n 40``
#: in one process (https://github.com/Azure/AI-benchmarking-guide, Benchmarks/NVIDIA/NCCLBandwidth.py)
_AZURE_G = 8


TABLES: dict[str, Table] = {
    "nccltests290_h100_1node_allreduce": Table("h100", match=True),
    "azure_ndh100v5_1node_allreduce_busbw": Table(
        "h100", ("comm.algorithm=nvls",), True, why="page: NVLS algorithm",
        gpus_per_thread=_AZURE_G),
    "skypilot_nebius_h100_2node_allreduce_k8s": Table("h100", match=True),
    "skypilot_nebius_h100_2node_allreduce_vm": Table("h100", match=True),
    "skypilot_together_h100_2node_allreduce": Table(
        "h100", match=True, why="NICs not stated; 8x400G IB assumed"),
    "coreweave_h100_multinode_allreduce_ibsharp": Table(
        "h100", ("comm.collnet=true", "comm.algorithm=collnet"), True, ranks=96,
        why="NCCL_ALGO=COLLNETCHAIN on IB SHARP; 96 ranks from busbw/algbw"),
    "aws_p5_2node_allreduce": Table("h100", tuple(_EFA), why="32x100G EFA = 50 GB/s per GPU"),
    "aws_p5_2node_allreduce_eks_partial": Table("h100", tuple(_EFA),
                                                why="32x100G EFA, older NCCL/plugin"),
    "gcp_a3mega_2node_allreduce": Table("h100", ("network.inter_node_GBps=25",),
                                        why="8x200G TCPXO"),
    "dstack_gcp_a3mega_2node_allgather": Table("h100", ("network.inter_node_GBps=25",),
                                               why="8x200G TCPXO"),
    "azure_ndh200v5_1node_allreduce_busbw": Table(
        "h200", ("comm.algorithm=nvls",), True, why="page: NVLS algorithm",
        gpus_per_thread=_AZURE_G),
    "skypilot_coreweave_h200_2node_allreduce": Table(
        "h200", match=True, why="NICs not stated; 8x400G IB assumed"),
    "skypilot_gcp_a3ultra_h200_2node_allgather": Table("h200", match=True, why="8x400G RoCE"),
    "aws_p5en_16node_allreduce_partial": Table("h200", tuple(_EFA), why="16x200G EFA"),
    "stas00_a100_1node_allreduce": Table("a100", match=True),
    "azure_nda100v4_1node_allreduce_busbw": Table(
        "a100", match=True, why="page says NVLS, which A100 lacks: tuner's choice",
        gpus_per_thread=_AZURE_G),
    "nccltests152_a100_2node_allreduce_after_fix": Table(
        "a100", ("network.inter_node_GBps=12.5",), why="4x200G per node = 12.5 GB/s per GPU"),
}


@dataclass
class Result:
    name: str
    spec: str
    sets: tuple[str, ...]
    op: str
    ranks: int
    metric: str
    match: bool
    rows: int
    median: float
    p90: float
    points: list[dict] = field(default_factory=list)
    gpus_per_thread: int = 1

    @property
    def passed(self) -> bool:
        return self.median <= MEDIAN_TARGET and self.p90 <= P90_TARGET


def _ranks(doc: dict, table: Table) -> int:
    if table.ranks:
        return table.ranks
    if doc.get("ranks"):
        return int(doc["ranks"])
    hw = doc["hardware"]
    return int(hw["gpus_per_node"]) * int(hw["nodes"])


def _gpus_per_thread(doc: dict, table: Table) -> int:
    """nccl-tests' -g of the run: the mapping's, else "-g N" / "nGpus N" in env or note, else 1
    (one GPU per process, as mpirun / srun runs use)."""
    if table.gpus_per_thread:
        return table.gpus_per_thread
    text = f"{doc.get('env') or ''} {doc.get('note') or ''}"
    m = re.search(r"(?:-g\s*|nGpus\s+)(\d+)", text)
    return int(m.group(1)) if m else 1


def validate_table(path: Path) -> Result | None:
    """Predict every row of one table; None for a table `TABLES` does not map."""
    table = TABLES.get(path.stem)
    if table is None:
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    ranks, op = _ranks(doc, table), str(doc["op"])
    rpn = int(doc["hardware"].get("gpus_per_node") or 8)
    spec = load_spec(table.spec, [*table.sets, f"network.ranks_per_node={rpn}"])
    rows = [r for r in doc["rows"] if r.get("bytes") is not None]
    g = _gpus_per_thread(doc, table)
    pred = nccl_tests_rows(spec, op, ranks, [int(r["bytes"]) for r in rows], g)
    timed = all(r.get("time_us") is not None for r in rows)
    metric = "time_us" if timed else "busbw"
    points, errs = [], []
    for r, p in zip(rows, pred):
        meas = float(r["time_us"]) if timed else float(r["busbw"])
        got = p.time_us if timed else p.busbw_GBps
        err = abs(got - meas) / meas if meas > 0 else (0.0 if got == 0 else float("inf"))
        errs.append(err)
        points.append({"bytes": int(r["bytes"]), "measured": meas, "predicted": got,
                       "measured_busbw": float(r["busbw"]) if r.get("busbw") is not None else None,
                       "predicted_busbw": p.busbw_GBps, "algorithm": p.algorithm,
                       "protocol": p.protocol, "bound": p.bound, "rel_error": err})
    e = np.array(errs) if errs else np.zeros(1)
    return Result(path.stem, table.spec, table.sets, op, ranks, metric, table.match, len(rows),
                  float(np.median(e)), float(np.percentile(e, 90)), points, g)


def validate_dir(directory: Path) -> list[Result]:
    out = [validate_table(p) for p in sorted(directory.glob("*.json"))]
    return [r for r in out if r is not None]


def render(results: list[Result]) -> str:
    head = f"{'table':<46} {'spec':<6} {'ranks':>5} {'metric':<7} {'n':>3} {'median':>7} " \
           f"{'p90':>7}  {'match':<5} {'target':<6} {'-g':>2} sets"
    lines = [head, "-" * len(head)]
    for r in results:
        verdict = ("pass" if r.passed else "MISS") if r.match else "-"
        lines.append(f"{r.name:<46} {r.spec:<6} {r.ranks:>5} {r.metric:<7} {r.rows:>3} "
                     f"{r.median:>7.1%} {r.p90:>7.1%}  {'yes' if r.match else 'no':<5} "
                     f"{verdict:<6} {r.gpus_per_thread:>2} {' '.join(r.sets)}")
    return "\n".join(lines)


def figure(results: list[Result], out: Path) -> None:
    """Predicted vs measured busbw by size, one panel per table (matplotlib OO API)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [r for r in results if any(p["measured_busbw"] for p in r.points)]
    cols = 4
    rows = (len(shown) + cols - 1) // cols
    fig = Figure(figsize=(4 * cols, 3 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    for i, r in enumerate(shown):
        ax = fig.add_subplot(rows, cols, i + 1)
        x = [p["bytes"] for p in r.points]
        ax.plot(x, [p["measured_busbw"] for p in r.points], "o", ms=3, label="measured")
        ax.plot(x, [p["predicted_busbw"] for p in r.points], "-", label="predicted")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{r.name[:34]}\n{r.spec} {r.op} {r.ranks} ranks; {r.metric} median "
                     f"{r.median:.0%}", fontsize=7)
        ax.set_xlabel("bytes", fontsize=7)
        ax.set_ylabel("busbw GB/s", fontsize=7)
        ax.tick_params(labelsize=6)
        if i == 0:
            ax.legend(fontsize=6)
    fig.savefig(out, dpi=90)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--figure", type=Path, default=None)
    a = ap.parse_args(argv)
    if not a.dir.is_dir():
        print(f"{a.dir}: no such directory of nccl-tests tables; pass one", file=sys.stderr)
        return 2
    results = validate_dir(a.dir)
    if a.format == "json":
        print(json.dumps([{k: v for k, v in r.__dict__.items()} | {"passed": r.passed}
                          for r in results], indent=1))
    else:
        print(render(results))
    if a.figure:
        figure(results, a.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
