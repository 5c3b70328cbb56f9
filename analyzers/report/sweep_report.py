"""Reports for sweep tables (`mtia-trace sweep` output): one row per grid point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analyzers.report import fmt
from analyzers.report.document import Block, Figure, Heading, Paragraph, Table
from mtia_trace.errors import RunNotFoundError
from mtia_trace.schema import ATTRIBUTION

#: Columns every sweep table has besides its axes.
FIXED = ("point", "hw", "step_us", *(f"{c}_us" for c in ATTRIBUTION), "speedup_vs_point0")
MAX_ROWS = 50


def is_sweep(path: Path) -> bool:
    return path.is_file() and path.suffix == ".parquet"


def load_sweep(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise RunNotFoundError(f"{path}: unreadable Parquet ({exc}); pass a run directory or a "
                               "table written by `mtia-trace sweep`") from None
    missing = [c for c in ("point", "step_us") if c not in table.column_names]
    if missing:
        raise RunNotFoundError(f"{path}: not a sweep table (no {', '.join(missing)} column); pass "
                               "a run directory or a table written by `mtia-trace sweep`")
    return table


def sweep_axes(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in FIXED]


def build_sweep_report(table: pa.Table, name: str, *, with_figures: bool = True) -> list[Block]:
    axes = sweep_axes(table)
    hw = ", ".join(sorted({str(h) for h in table.column("hw").to_pylist()})) \
        if "hw" in table.column_names else "?"
    step = table.column("step_us").to_numpy()
    blocks: list[Block] = [
        Heading(1, f"mtia-trace sweep report: {name}"),
        Paragraph(f"Hardware **{hw}** · {table.num_rows} grid points over "
                  + (", ".join(f"`{a}`" for a in axes) or "no axes") + "."),
    ]
    if table.num_rows:
        best, worst = int(np.argmin(step)), int(np.argmax(step))

        def where(i: int) -> str:
            return ", ".join(f"{a}={table.column(a)[i].as_py()}" for a in axes) or "base spec"

        if step[worst] == step[best]:
            blocks.append(Paragraph(f"Every point has the same step time, **{fmt.us(step[best])} "
                                    "µs**: the swept parameters do not bind on this trace."))
        else:
            blocks.append(Paragraph(
                f"Fastest step **{fmt.us(step[best])} µs** at {where(best)}; slowest "
                f"{fmt.us(step[worst])} µs at {where(worst)} "
                f"({fmt.ratio(step[worst] / step[best])} slower)."))
    if with_figures:
        # imported here for startup cost only (matplotlib), as in `build.build_report`
        from analyzers.report import figures as figs

        png = figs.sweep_figure(table, axes)
        if png:
            blocks.append(Figure("Step time over the swept parameters.", png))
    cols = axes + ["step_us"] + [f"{c}_us" for c in ATTRIBUTION]
    rows = [[str(r[c]) if c in axes else fmt.us(r[c]) for c in cols]
            for r in table.select(cols).slice(0, MAX_ROWS).to_pylist()]
    note = f"showing {MAX_ROWS} of {table.num_rows} points" if table.num_rows > MAX_ROWS else ""
    blocks += [Heading(2, "Grid points (µs per rank-step)"),
               Table(cols, rows, ["l"] * len(axes) + ["r"] * (len(cols) - len(axes)), note)]
    return blocks


def sweep_dict(table: pa.Table, name: str) -> dict:
    return {"sweep": name, "axes": sweep_axes(table), "points": table.to_pylist()}
