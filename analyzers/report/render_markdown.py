"""Markdown renderer: GitHub-flavoured, fits a CI job summary. Figures are left out."""

from __future__ import annotations

import re
from collections.abc import Iterable

from analyzers.report.document import Block, Figure, Heading, Items, Paragraph, Table
from mtia_trace.escape import markdown, md_cell

#: Longest table cell, in characters, in a pasteable report (kernel names run to hundreds).
MAX_MD_CELL = 72


def _clip(cell: str) -> str:
    """A cell cut to `MAX_MD_CELL` characters, a lone code span kept a code span."""
    if len(cell) <= MAX_MD_CELL:
        return cell
    m = re.fullmatch(r"(`+)( ?)(.*?)\2\1", cell, re.S)
    if m:
        fence, pad, inner = m.groups()
        return f"{fence}{pad}{inner[:MAX_MD_CELL - 1].rstrip('`')}…{pad}{fence}"
    return cell[:MAX_MD_CELL - 1] + "…"


def _escape(text: str) -> str:
    return md_cell(_clip(text))


def _table(t: Table) -> list[str]:
    align = t.align or ["l"] * len(t.columns)
    out = ["| " + " | ".join(_escape(c) for c in t.columns) + " |",
           "|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|"]
    out += ["| " + " | ".join(md_cell(c) if i in t.prose else _escape(c)
                              for i, c in enumerate(row)) + " |" for row in t.rows]
    if t.note:
        out += ["", f"_{markdown(t.note)}_"]
    if t.legend:
        out += ["", markdown(t.legend)]
    return out


def render_markdown(blocks: Iterable[Block]) -> str:
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Figure):
            continue
        if lines:
            lines.append("")
        if isinstance(b, Heading):
            lines.append("#" * b.level + " " + markdown(b.text))
        elif isinstance(b, Paragraph):
            lines.append(markdown(b.text))
        elif isinstance(b, Items):
            lines += [(f"{i}. " if b.ordered else "- ") + markdown(item)
                      for i, item in enumerate(b.items, 1)]
        elif isinstance(b, Table):
            lines += _table(b)
    return "\n".join(lines) + "\n"
