"""The events columns each part of a one-run report reads from ``RunData.events``.

A report of a stored run holds only their union (`REPORT`): 23 of the events table's 45 columns
(the analyzers' are read for them, `analyzers.EVENT_COLUMNS`, and dropped once they ran). A
column missing here is a ``KeyError`` in the report, not a different number.
"""

from __future__ import annotations

from mtia_trace.schema import ATTRIBUTION, REPLAYED_EVENTS_SCHEMA

#: What the findings read from critical events (`headline._critical`).
CRITICAL: tuple[str, ...] = ("name", "kind", "is_device", "coll_op", "pg", "critical",
                             "critical_us", *(f"{c}_us" for c in ATTRIBUTION))
#: What the measured device busy time reads (`headline._measured_busy`): measured times.
MEASURED_BUSY: tuple[str, ...] = ("rank", "step", "kind", "is_device", "ts_us", "dur_us")
#: What the timelines draw (`figures._timeline_events`).
TIMELINE: tuple[str, ...] = ("rank", "step", "ph", "kind", "track", "is_device", "depth",
                             "start_us", "end_us", "name", "critical")
#: Everything a report reads from the events table, in the table's order (``idle_us`` is a
#: steps column only).
REPORT: tuple[str, ...] = tuple(c for c in REPLAYED_EVENTS_SCHEMA.names
                                if c in {*CRITICAL, *MEASURED_BUSY, *TIMELINE})
