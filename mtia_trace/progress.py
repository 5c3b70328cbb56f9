"""Progress for long work (ingest, replay, sweeps, reports): shown on a terminal only.

Progress goes to stderr, and only when stderr is a terminal and ``quiet`` is false, so pipes,
CI logs and captured output stay clean. Updates are rate-limited and the line is cleared at the
end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``with Progress("replay", total=3) as p: p.update("h100")`` prints ``label: msg [i/n]``."""

    MIN_INTERVAL_S = 0.1

    def __init__(self, label: str, *, total: int | None = None, quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = not quiet and bool(isatty and isatty())
        self.done = 0
        self._t0 = time.monotonic()
        self._last = -1.0
        self._width = 0

    def update(self, message: str = "", *, advance: int = 1) -> None:
        self.done += advance
        if not self.enabled:
            return
        now = time.monotonic()
        final = self.total is not None and self.done >= self.total
        if not final and now - self._last < self.MIN_INTERVAL_S:
            return
        self._last = now
        count = f" [{self.done}/{self.total}]" if self.total else ""
        line = f"mtia-trace: {self.label}{count} {message} ({now - self._t0:.1f}s)".rstrip()
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def __call__(self, message: str) -> None:
        """A stage message without advancing the count (the ``progress`` callback of the library)."""
        self.update(message, advance=0)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
