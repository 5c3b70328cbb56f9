"""Reports people read and CI gates on: one run (`report`), two runs (`compare`), Perfetto export.

A report is built once as a list of document blocks (`document.py`) and rendered to Markdown,
self-contained HTML or JSON; the numbers come from `headline.py` and the run's tables.
"""

from __future__ import annotations

from analyzers.report.run_data import RunData, load_run, run_from_result

__all__ = ["RunData", "load_run", "run_from_result"]
