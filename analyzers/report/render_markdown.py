"""Markdown renderer: GitHub-flavoured, fits a CI job summary. Figures are left out."""

from __future__ import annotations

from collections.abc import Iterable

from analyzers.report.document import Block, Figure, Heading, Items, Paragraph, Table


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> list[str]:
    align = t.align or ["l"] * len(t.columns)
    out = ["| " + " | ".join(_escape(c) for c in t.columns) + " |",
           "|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|"]
    out += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in t.rows]
    if t.note:
        out += ["", f"_{t.note}_"]
    if t.legend:
        out += ["", _escape(t.legend)]
    return out


def render_markdown(blocks: Iterable[Block]) -> str:
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Figure):
            continue
        if lines:
            lines.append("")
        if isinstance(b, Heading):
            lines.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            lines.append(b.text)
        elif isinstance(b, Items):
            lines += [(f"{i}. " if b.ordered else "- ") + item for i, item in enumerate(b.items, 1)]
        elif isinstance(b, Table):
            lines += _table(b)
    return "\n".join(lines) + "\n"
