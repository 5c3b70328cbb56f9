"""HTML renderer: one self-contained file (inline CSS, figures as base64 PNG, no scripts/network)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable

from analyzers.report.document import Block, Figure, Heading, Items, Paragraph, Table

_CSS = """
body{font:15px/1.5 -apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;
 max-width:1100px;margin:2em auto;padding:0 1.5em;background:#fff}
h1{font-size:1.7em;border-bottom:2px solid #3b6fd4;padding-bottom:.2em}
h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #d8dde6}
h3{font-size:1.1em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #d8dde6;padding:.25em .6em}
th{background:#eef2f9;text-align:left}
td.r{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#f8f9fc}
code{background:#f0f2f5;padding:0 .25em;border-radius:3px;font-size:.92em;overflow-wrap:anywhere}
.tw{overflow-x:auto;max-width:100%}
figure{margin:1.2em 0}
figure img{max-width:100%;border:1px solid #e2e6ee}
figcaption{color:#555;font-size:.9em}
.note{color:#666;font-style:italic;font-size:.88em}
.legend{color:#555;font-size:.82em;margin-top:-.3em}
ol li,ul li{margin:.25em 0}
"""


def _inline(text: str) -> str:
    """Escape, then translate the Markdown subset the builders use: **bold** and `code`."""
    out = html.escape(text, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _table(t: Table) -> str:
    align = t.align or ["l"] * len(t.columns)
    head = "".join(f"<th>{_inline(c)}</th>" for c in t.columns)
    body = "".join(
        "<tr>" + "".join(f'<td class="{a}">{_inline(c)}</td>' for c, a in zip(row, align)) + "</tr>"
        for row in t.rows)
    note = f'<p class="note">{_inline(t.note)}</p>' if t.note else ""
    if t.legend:
        note += f'<p class="legend">{_inline(t.legend)}</p>'
    return (f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            f"</div>{note}")


def render_html(blocks: Iterable[Block], *, title: str) -> str:
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            parts.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Items):
            tag = "ol" if b.ordered else "ul"
            parts.append(f"<{tag}>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + f"</{tag}>")
        elif isinstance(b, Table):
            parts.append(_table(b))
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png).decode("ascii")
            alt = html.escape(b.alt or b.caption)
            parts.append(f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{_inline(b.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
