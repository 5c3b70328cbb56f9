"""Text from a trace (op, thread, file and run names) made safe for where it is shown.

A trace is input nobody vetted: a name can hold terminal escape sequences (OSC 52 writes the
clipboard, OSC 8 hides a link target, CSI clears lines), bidi overrides that reverse text,
Markdown that starts a heading or embeds HTML in a CI job summary, or ``<!--`` that ends an HTML
report's script. Every renderer passes names through one of these:

- `terminal`: C0 and C1 controls, DEL and bidi controls shown as ``\\x1b`` / ``\\u202e``.
- `markdown`: the above, line breaks as spaces, and outside code spans ``<``, ``>``, ``[``,
  ``]`` backslash-escaped (no raw HTML, no links, no images); code spans are kept whole.
- `md_code`: a name as one inline code span, whatever backticks it holds.
- `script_json`: JSON text safe inside ``<script>``: ``<``, ``>``, ``&`` as ``\\u003c`` ...
"""

from __future__ import annotations

import re
from typing import Any, TextIO

#: Characters a terminal acts on or that reorder text: C0 controls (tab and newline are kept by
#: `terminal` unless ``cells``), DEL, C1 controls, and the Unicode bidi controls.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_CELL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _show(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal(text: str, *, cells: bool = False) -> str:
    """``text`` with every control and bidi character shown escaped (``\\x1b``); newline and tab
    are kept unless ``cells`` (one table cell: they would break the row)."""
    return (_UNSAFE_CELL if cells else _UNSAFE).sub(_show, text)


def has_unsafe(text: str) -> bool:
    return _UNSAFE.search(text) is not None


_CODE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
_MD_SPECIAL = re.compile(r"([\\<>\[\]])")


def markdown(text: str) -> str:
    """Markdown text (ours: bold, code spans) with names in it made inert: no line breaks (a
    name with ``\\n## x`` would start a heading), no raw HTML, links or images outside code
    spans, controls shown escaped. Code spans are kept as they are, minus line breaks."""
    text = terminal(text.replace("\r\n", " ").replace("\r", " ").replace("\n", " "),
                    cells=True)
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_MD_SPECIAL.sub(r"\\\1", text[pos:m.start()]))
        out.append(m.group())
        pos = m.end()
    out.append(_MD_SPECIAL.sub(r"\\\1", text[pos:]))
    return "".join(out)


def md_code(name: str) -> str:
    """``name`` as one inline code span: fenced with one more backtick than its longest run,
    padded when it starts or ends with a backtick; line breaks as spaces, controls escaped."""
    name = terminal(str(name).replace("\r", " ").replace("\n", " "), cells=True)
    longest = max((len(r) for r in re.findall(r"`+", name)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if name.startswith("`") or name.endswith("`") or not name.strip() else ""
    return f"{fence}{pad}{name}{pad}{fence}"


def md_cell(text: str) -> str:
    """One Markdown table cell: `markdown`, and ``|`` escaped (it would end the cell, even in a
    code span)."""
    return markdown(text).replace("|", "\\|")


def script_json(text: str) -> str:
    """JSON text to embed in an HTML ``<script>``: ``<``, ``>`` and ``&`` as JSON escapes, so
    no ``</script>``, ``<!--`` or entity in a name can end or change the script; U+2028/U+2029
    too (line terminators in older JavaScript)."""
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


_SGR = re.compile(r"(\x1b\[[0-9;]*m)")


class TerminalStream:
    """A text stream to a terminal that shows every control and bidi character escaped, except
    the colour and bold sequences (SGR, ``ESC [ ... m``) the tables print; the CLI puts one in
    front of stdout and stderr when they are terminals, so no name reaches the terminal raw.
    The stream it wraps is ``raw_terminal`` (for a progress line that draws on it)."""

    def __init__(self, raw: TextIO) -> None:
        self.raw_terminal = raw

    def write(self, text: str) -> int:
        parts = _SGR.split(text)
        self.raw_terminal.write("".join(p if i % 2 else terminal(p) for i, p in enumerate(parts)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":  # no way around the escaping
            raise AttributeError(name)
        return getattr(self.raw_terminal, name)


__all__ = ["terminal", "has_unsafe", "markdown", "md_code", "md_cell", "script_json",
           "TerminalStream"]
