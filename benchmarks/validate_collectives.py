"""Validate the collective model against published nccl-tests tables.

For each table in a directory of published nccl-tests results (JSON: ``url``, ``hardware``,
``ranks``, ``op``, ``env``, ``rows`` of ``bytes`` / ``time_us`` / ``algbw`` / ``busbw``), build
the matching spec from the table's own fields (`infer_table`: the bundled spec of its GPU, with
``--set`` overrides for the system's NIC count/speed and the algorithm its run forced, and the
run's nccl-tests ``-g``), predict every row with
`replay.hardware.collectives.nccl_tests_rows` and print per table the median and 90th
percentile relative error of ``time_us`` (of ``busbw`` for busbw-only tables), and where it
misses: the median signed time error by size band (`BANDS`: latency-bound small messages, the
ramp, bandwidth-bound large ones), negative where the model is faster than the measurement
(for busbw-only tables the time error is measured / predicted busbw - 1), and how many
matching tables pass in each band. Constants are the specs': NCCL's tuning model, vendor
figures, and the calibrated terms that benchmarks/fit_collectives.py fits (with
leave-one-table-out error); nothing here fits anything.

    python benchmarks/validate_collectives.py [DIR] [--format table|json] [--figure PNG]
        [--band-figure PNG] [--tuning-only] [--json-out benchmarks/results/collectives.json]

``DIR`` defaults to ../shared/nccl next to the repository, else tests/data/nccl (a copy).
``--json-out`` writes each table's figures (`summary`), from which docs/generate.py renders the
table in docs/hardware.md and benchmarks/gates.json's bounds are checked. Targets: median <= 15%
and p90 <= 35% on tables whose system matches a bundled spec (``match`` column), and median <=
15% in each size band a table has rows in.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from replay.hardware import NCCL_TESTS_OPS, load_spec
from replay.hardware.collectives import nccl_tests_rows, normalize_op

MEDIAN_TARGET, P90_TARGET = 0.15, 0.35
#: size bands the signed error is summarised over: (label, smallest bytes, bytes past the band)
BANDS = (("<64K", 0, 64 << 10), ("64K-256M", 64 << 10, 256 << 20), (">=256M", 256 << 20, 1 << 62))
_REPO = Path(__file__).resolve().parent.parent
#: ../shared/nccl when present, else the copy vendored with the tests
DEFAULT_DIR = next((d for d in (_REPO / ".." / "shared" / "nccl", _REPO / "tests" / "data" / "nccl")
                    if d.is_dir()), _REPO / "tests" / "data" / "nccl")

@dataclass(frozen=True)
class Table:
    """How one published table maps onto a spec (`infer_table`)."""

    spec: str
    sets: tuple[str, ...] = ()
    match: bool = False      # the system is a bundled spec's as shipped (target applies)
    ranks: int | None = None  # where the file's ranks is unset: from busbw / algbw
    gpus_per_thread: int = 1  # nccl-tests' -g of the run


#: tables from Azure's AI-benchmarking-guide come from ``NCCL_ALGO=NVLS all_reduce_perf -b 8 -e 8G
#: -f 2 -g <all the VM's GPUs> -n 40`` in one process (Benchmarks/NVIDIA/NCCLBandwidth.py there)
_ONE_PROCESS_SOURCES = {"github.com/Azure/AI-benchmarking-guide": "nvls"}
#: bundled spec by GPU name, most specific first
_GPU_SPECS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"))
#: fabrics whose latencies NCCL's InfiniBand model does not describe: no target applies
_OTHER_FABRICS = ("EFA", "TCPX")
#: GPU variants without the bundled specs' NVSwitch node (PCIe cards, NVL pairs): no target
_OTHER_GPUS = re.compile(r"PCIe|\bNVL\b", re.IGNORECASE)


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
    #: median signed time error per `BANDS` label (None: no row in the band)
    bias: dict[str, float | None] = field(default_factory=dict)
    #: median |time error| per `BANDS` label (None: no row in the band)
    band_error: dict[str, float | None] = field(default_factory=dict)

    def band_passed(self, label: str) -> bool | None:
        """The band's median |time error| within the median target; None without rows there
        (a table of large messages only is no evidence for small ones)."""
        e = self.band_error.get(label)
        return None if e is None else e <= MEDIAN_TARGET

    @property
    def passed(self) -> bool:
        return (self.median <= MEDIAN_TARGET and self.p90 <= P90_TARGET
                and all(self.band_passed(b[0]) is not False for b in BANDS))


def _ranks(doc: dict, table: Table) -> int:
    if table.ranks:
        return table.ranks
    if doc.get("ranks"):
        return int(doc["ranks"])
    hw = doc.get("hardware") or {}
    return int(hw.get("gpus_per_node") or 8) * int(hw.get("nodes") or 1)


def _forced_algorithm(doc: dict) -> str | None:
    """The algorithm a table's run forced: ``NCCL_ALGO=X`` in its env, else its source's."""
    m = re.search(r"NCCL_ALGO=(\w+)", str(doc.get("env") or ""))
    if m:
        return m.group(1).lower()
    return next((a for src, a in _ONE_PROCESS_SOURCES.items()
                 if src in str(doc.get("url") or "")), None)


def _ranks_from_rows(doc: dict) -> int | None:
    """World size from busbw / algbw, which nccl-tests sets to 2(n-1)/n (all_reduce) or (n-1)/n."""
    for r in doc.get("rows") or []:
        a, b = r.get("algbw"), r.get("busbw")
        if a and b and a > 0:
            f = b / a if doc.get("op") == "all_reduce" else 2 * b / a
            if 0 < 2 - f:
                return round(2 / (2 - f))
    return None


def infer_table(doc: dict) -> Table | None:
    """A table's mapping from its own fields: the bundled spec of its GPU, the NIC bandwidth per GPU where it differs from the spec's (nodes > 1),
    the algorithm its run forced (dropped where the spec lacks it, as NCCL falls back), NCCL's
    NVLS placement of the release the run used (``chunked`` before 2.20, where stated), its
    ring LL share (``quarter`` before 2.21, with Hopper's one-node LL cap of those releases), and
    ``match`` unless the NIC bandwidth differs, the fabric is EFA / TCPX (on more than one node:
    a single node uses no NIC) or the GPU a PCIe / NVL variant, and the run's -g
    (`_gpus_per_thread`). None without a bundled spec for the GPU."""
    hw = doc.get("hardware") or {}
    gpu = str(hw.get("gpu") or "")
    name = next((s for key, s in _GPU_SPECS if key in gpu), None)
    if name is None:
        return None
    spec = load_spec(name)
    sets: list[str] = []
    nodes = int(hw.get("nodes") or 1)
    # one node uses no NIC: its cluster's fabric says nothing about the run
    match = (not (nodes > 1 and any(f in str(hw.get("nic_type") or "") for f in _OTHER_FABRICS))
             and not _OTHER_GPUS.search(gpu))
    nics, gbps, gpn = hw.get("nics_per_node"), hw.get("nic_gbps"), hw.get("gpus_per_node") or 8
    if nics and gbps and nodes > 1:
        per_gpu = float(nics) * float(gbps) / 8 / float(gpn)
        if abs(per_gpu - float(spec.value("network.inter_node_GBps"))) > 1e-9:
            sets.append(f"network.inter_node_GBps={per_gpu:g}")
            match = False
    algo = _forced_algorithm(doc)
    if algo and algo.startswith("collnet"):
        sets += ["comm.collnet=true", "comm.algorithm=collnet"]
    elif algo == "nvls" and float(spec.get("comm.nvls_efficiency") or 0) > 0:
        sets.append("comm.algorithm=nvls")
    elif algo in ("ring", "tree"):
        sets.append(f"comm.algorithm={algo}")
    # NVLS (not NVLS-tree, whose placement is not modelled) runs on one node
    if (nodes == 1 and float(spec.get("comm.nvls_efficiency") or 0) > 0
            and (_nccl_version(doc) or _NVLS_BALANCED) < _NVLS_BALANCED):
        sets.append("comm.nvls_placement=chunked")
    if (_nccl_version(doc) or _RING_LL_HALF) < _RING_LL_HALF:
        sets.append("comm.ring_ll_share=quarter")
        if nodes == 1 and name in _LL_MAX_1NODE_BEFORE_HALF:
            sets.append(f"comm.ll_max_1node_GBps={_LL_MAX_1NODE_BEFORE_HALF[name]:g}")
    ranks = None if doc.get("ranks") else _ranks_from_rows(doc)
    return Table(name, tuple(sets), match, ranks, _gpus_per_thread(doc))


#: the NCCL release from which NVLS spreads a message over all its channels (``comm.nvls_placement``)
_NVLS_BALANCED = (2, 20)
#: the NCCL release from which a ring LL takes half the bus bandwidth (``comm.ring_ll_share``)
_RING_LL_HALF = (2, 21)
#: one-node LL cap of NCCL < 2.21 where it differs from the spec's (tuning.cc llMaxBws, Hopper-N1
#: 87.7 GB/s at https://github.com/NVIDIA/nccl/blob/v2.20.5-1/src/graph/tuning.cc, 141.0 from
#: v2.21.5; Ampere's 87.7 is the same in both)
_LL_MAX_1NODE_BEFORE_HALF = {"h100": 87.7, "h200": 87.7}


def _nccl_version(doc: dict) -> tuple[int, int] | None:
    """(major, minor) of the NCCL a table's run used, None where the table does not say."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(doc.get("nccl_version") or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _gpus_per_thread(doc: dict) -> int:
    """nccl-tests' -g of the run: "-g N" / "nGpus N" in its env or note, else all the node's
    GPUs for a source known to run one process per node, else 1 (one GPU per process, as
    mpirun / srun runs use)."""
    if any(src in str(doc.get("url") or "") for src in _ONE_PROCESS_SOURCES):
        return int(doc["hardware"].get("gpus_per_node") or 8)
    text = f"{doc.get('env') or ''} {doc.get('note') or ''}"
    m = re.search(r"(?:-g\s*|nGpus\s+)(\d+)", text)
    return int(m.group(1)) if m else 1


def _row_op(row: dict, op: str) -> str:
    """A row's collective: its own ``op`` in a table of mixed single points, else the table's."""
    return normalize_op(str(row.get("op") or op))


def validate_table(path: Path, overrides: tuple[str, ...] = ()) -> Result | None:
    """Predict every row of one table (mapped by `infer_table`; ``overrides`` are further
    ``--set`` values, as the fitting script passes); None for a table of a GPU without a
    bundled spec."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    table = infer_table(doc)
    if table is None:
        return None
    ranks, op = _ranks(doc, table), normalize_op(str(doc.get("op")))
    rpn = int((doc.get("hardware") or {}).get("gpus_per_node") or 8)
    spec = load_spec(table.spec, [*table.sets, f"network.ranks_per_node={rpn}", *overrides])
    rows = [r for r in doc.get("rows") or [] if r.get("bytes") is not None
            and _row_op(r, op) in NCCL_TESTS_OPS]
    g = table.gpus_per_thread
    pred: list = [None] * len(rows)
    for row_op in {_row_op(r, op) for r in rows}:  # one vectorised call per collective
        at = [i for i, r in enumerate(rows) if _row_op(r, op) == row_op]
        got = nccl_tests_rows(spec, row_op, ranks, [int(rows[i]["bytes"]) for i in at], g)
        for i, p in zip(at, got):
            pred[i] = p
    timed = all(r.get("time_us") is not None for r in rows)
    metric = "time_us" if timed else "busbw"
    points, errs = [], []
    for r, p in zip(rows, pred):
        meas = float(r["time_us"]) if timed else float(r["busbw"])
        got = p.time_us if timed else p.busbw_GBps
        err = abs(got - meas) / meas if meas > 0 else (0.0 if got == 0 else float("inf"))
        # predicted / measured time - 1 (time is bytes / busbw at a fixed size)
        signed = (got / meas if timed else meas / got) - 1 if meas > 0 and got > 0 else 0.0
        errs.append(err)
        points.append({"bytes": int(r["bytes"]), "measured": meas, "predicted": got,
                       "predicted_us": p.time_us,
                       "measured_us": p.time_us / (1 + signed) if signed > -1 else None,
                       "measured_busbw": float(r["busbw"]) if r.get("busbw") is not None else None,
                       "predicted_busbw": p.busbw_GBps, "algorithm": p.algorithm,
                       "protocol": p.protocol, "bound": p.bound, "rel_error": err,
                       "time_error": signed})
    e = np.array(errs) if errs else np.zeros(1)
    bias, band_error = {}, {}
    for label, lo, hi in BANDS:
        band = [q["time_error"] for q in points if lo <= q["bytes"] < hi]
        bias[label] = float(np.median(band)) if band else None
        band_error[label] = float(np.median(np.abs(band))) if band else None
    return Result(path.stem, table.spec, table.sets, op, ranks, metric, table.match, len(rows),
                  float(np.median(e)), float(np.percentile(e, 90)), points, g, bias,
                  band_error)


def validate_dir(directory: Path) -> tuple[list[Result], list[str]]:
    """Results of every table in ``directory`` and the names of those without a bundled spec."""
    results, skipped = [], []
    for p in sorted(directory.glob("*.json")):
        r = validate_table(p)
        if r is None:
            skipped.append(p.stem)
        else:
            results.append(r)
    return results, skipped


def summary(results: list[Result]) -> list[dict]:
    """Each table's figures without its rows (what the docs and the gates read)."""
    keys = ("name", "spec", "sets", "op", "ranks", "metric", "match", "rows", "median", "p90",
            "gpus_per_thread", "bias", "band_error")
    return [{k: list(v) if isinstance(v := getattr(r, k), tuple) else v for k in keys}
            | {"passed": r.passed} for r in results]


def render(results: list[Result]) -> str:
    bands = "".join(f" {label:>8}" for label, _, _ in BANDS)
    head = f"{'table':<46} {'spec':<6} {'ranks':>5} {'metric':<7} {'n':>3} {'median':>7} " \
           f"{'p90':>7}  {'match':<5} {'target':<6} {'-g':>2}{bands}  sets"
    lines = [head, "-" * len(head)]
    for r in results:
        verdict = ("pass" if r.passed else "MISS") if r.match else "-"
        bias = "".join(f" {'-' if (b := r.bias.get(label)) is None else f'{b:+.0%}':>8}"
                       for label, _, _ in BANDS)
        lines.append(f"{r.name:<46} {r.spec:<6} {r.ranks:>5} {r.metric:<7} {r.rows:>3} "
                     f"{r.median:>7.1%} {r.p90:>7.1%}  {'yes' if r.match else 'no':<5} "
                     f"{verdict:<6} {r.gpus_per_thread:>2}{bias}  {' '.join(r.sets)}")
    lines.append(f"{'':<46} time error by size (median of predicted / measured time - 1; "
                 "negative: the model is faster)")
    matching = [r for r in results if r.match]
    lines.append(f"matching tables within target (median, p90 and every band's median |time "
                 f"error|): {sum(r.passed for r in matching)}/{len(matching)}")
    lines.append("band median |time error| <= 15%, matching tables with rows in the band: "
                 + "; ".join(f"{label} {sum(r.band_passed(label) is True for r in matching)}/"
                             f"{sum(r.band_passed(label) is not None for r in matching)}"
                             for label, _, _ in BANDS))
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


#: NCCL's tuning model alone: the calibrated terms set to what no calibration gives (no pipeline
#: fill; the grouped launch at the spec's per-kernel launch cost)
TUNING_ONLY = ("comm.fill_chunks=0",)


def tuning_only(directory: Path) -> list[Result]:
    """`validate_dir` with NCCL's tuning model alone (`TUNING_ONLY`, and each spec's
    ``host.kernel_launch_us`` as the grouped launch cost): the comparison the calibrated
    terms are judged against."""
    out = []
    for p in sorted(directory.glob("*.json")):
        t = infer_table(json.loads(p.read_text(encoding="utf-8")))
        if t is None:
            continue
        launch = load_spec(t.spec).value("host.kernel_launch_us")
        r = validate_table(p, (*TUNING_ONLY, f"comm.group_launch_us={launch}"))
        if r is not None:
            out.append(r)
    return out


def band_figure(results: list[Result], before: list[Result], out: Path) -> None:
    """Predicted vs measured time per size band over the matching tables, NCCL's tuning model
    alone (``before``) and with the calibrated terms (matplotlib OO API)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (label, lo, hi) in enumerate(BANDS):
        ax = fig.add_subplot(1, len(BANDS), i + 1)
        title, seen = [label], []
        for runs, style, name in ((before, dict(marker="o", mfc="none", color="0.55", ls=""),
                                   "tuning model"),
                                  (results, dict(marker=".", color="C0", ls=""), "calibrated")):
            pts = [q for r in runs if r.match for q in r.points
                   if lo <= q["bytes"] < hi and q["measured_us"]]
            if not pts:
                continue
            x = np.array([q["measured_us"] for q in pts])
            y = np.array([q["predicted_us"] for q in pts])
            ax.plot(x, y, ms=4, label=name, **style)
            seen += [*x, *y]
            title.append(f"{name}: median |err| {np.median(np.abs(y / x - 1)):.0%}")
        if not seen:
            continue
        ref = np.geomspace(min(seen), max(seen))
        ax.plot(ref, ref, "k-", lw=0.8)
        ax.fill_between(ref, ref * 0.85, ref * 1.15, color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured time (us)", fontsize=8)
        ax.set_ylabel("predicted time (us)", fontsize=8)
        ax.set_title("\n".join(title), fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7)
    fig.savefig(out, dpi=90)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--figure", type=Path, default=None)
    ap.add_argument("--tuning-only", action="store_true",
                    help="NCCL's tuning model alone: no pipeline fill, the grouped launch at "
                         "host.kernel_launch_us (the comparison for the calibrated terms)")
    ap.add_argument("--band-figure", type=Path, default=None,
                    help="PNG: predicted vs measured time by size band, tuning model alone and "
                         "with the calibrated terms")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="write each table's figures here (benchmarks/results/collectives.json)")
    a = ap.parse_args(argv)
    if not a.dir.is_dir():
        print(f"{a.dir}: no such directory of nccl-tests tables; pass one", file=sys.stderr)
        return 2
    results, skipped = validate_dir(a.dir)
    if a.tuning_only:
        results = tuning_only(a.dir)
    if skipped:
        print(f"skipped (no bundled spec for the GPU): {', '.join(skipped)}", file=sys.stderr)
    if a.format == "json":
        print(json.dumps([{k: v for k, v in r.__dict__.items()} | {"passed": r.passed}
                          for r in results], indent=1))
    else:
        print(render(results))
    if a.figure:
        figure(results, a.figure)
    if a.band_figure:
        band_figure(results, tuning_only(a.dir), a.band_figure)
    if a.json_out:
        a.json_out.write_text(json.dumps(summary(results), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
