"""Progress for long work (ingest, replay, sweeps, reports): shown on a terminal only.

Progress goes to stderr, and only when stderr is a terminal and ``quiet`` is false, so pipes,
CI logs and captured output stay clean. On a terminal it is a `rich.progress` line: a spinner,
the stage, ``[i/n]`` when counted, the JSON read so far during ingest, and the elapsed time,
which keeps ticking inside a long stage. Whatever is written to stderr meanwhile (warnings) is
printed above the line, never glued to it; the line is gone at the end.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from mtia_trace.escape import terminal


def _nbytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


class Progress:
    """``with Progress("replay", total=3) as p: p.update("h100")`` shows ``label [i/n] msg``."""

    def __init__(self, label: str, *, total: int | None = None, quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        raw = getattr(self.stream, "raw_terminal", self.stream)  # past the escaping wrapper
        isatty = getattr(raw, "isatty", None)
        self.enabled = not quiet and bool(isatty and isatty())
        self.done = 0
        self._bar: RichProgress | None = None
        self._task = TaskID(0)
        self._read = 0
        if self.enabled:
            console = Console(file=raw, highlight=False)
            self._bar = RichProgress(SpinnerColumn(), TextColumn("[bold]{task.fields[label]}"),
                                     TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=console, transient=True, redirect_stdout=False,
                                     redirect_stderr=True, refresh_per_second=8)
            self._task = self._bar.add_task("", label=f"mtia-trace: {terminal(label)}")
            self._bar.start()
            # the ingest package (pandas, msgspec) loads only for a bar on a terminal: a report
            # or a query does not pay its import to show progress
            from mtia_trace.ingest import decode

            decode.on_bytes_read = self._bytes_read

    def _bytes_read(self, n: int) -> None:
        self._read = n
        if self._bar is not None:
            self._show(self._message)

    _message = ""

    def _show(self, message: str) -> None:
        self._message = message
        count = f"[{self.done}/{self.total}] " if self.total else ""
        read = f" ({_nbytes(self._read)} of JSON read)" if self._read else ""
        if self._bar is not None:
            self._bar.update(self._task, description=count + terminal(message) + read)

    def update(self, message: str = "", *, advance: int = 1) -> None:
        self.done += advance
        if message != self._message:
            self._read = 0
        self._show(message)

    def __call__(self, message: str) -> None:
        """A stage message without advancing the count (the ``progress`` callback of the library)."""
        self.update(message, advance=0)

    def close(self) -> None:
        if self._bar is not None:
            # loaded when the bar started (see __init__)
            from mtia_trace.ingest import decode

            if decode.on_bytes_read == self._bytes_read:
                decode.on_bytes_read = None
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
