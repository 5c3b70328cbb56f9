"""One meaning per column name: the line every report prints under a table that uses it."""

from __future__ import annotations

from collections.abc import Iterable

#: Column name -> what it holds, in one line. Every table in a report is followed by the lines
#: of the columns it shows; the analyzers' SQL and docs use the same words.
GLOSSARY: dict[str, str] = {
    "critical_us": "time on the critical path (what the step waited for; sums to the step)",
    "busy_us": "time the work ran, overlapped with other work or not",
    "unoverlapped_us": "communication time with no compute running on the same rank",
    "unoverlapped_pct": "unoverlapped_us as a share of busy_us",
    "transfer_us": "time moving a collective's data (the collective cost component)",
    "post_us": "host-side time posting a collective (launch, doorbell, proxy)",
    "step_us": "the rank's replayed step wall time (mean over its steps)",
    "peer_wait_us": "time a ready rank waited for the last peer to arrive at a collective",
    "queue_us": "time a ready event waited for a busy resource (message engines, links)",
    "retry_us": "retransmission time after packet loss",
    "idle_us": "wall time with nothing running on the rank's timelines (never exceeds the step)",
    "window_us": "the rank's summed step wall time",
    "span_us": "end of the last minus start of the first event of the row",
    "lead_us": "how long after the first rank the last rank arrived",
    "skew_us": "last minus first arrival at a collective",
    "fetch_us": "memory-bound time (HBM, embedding gathers, copies, DMA)",
    "at_us": "start relative to the rank's step start",
    "total_us": "replayed step wall time",
    "measured_us": "step wall time measured in the trace",
    "overlap_us": "time compute and communication ran at once",
}

#: The components' meanings in the attribution tables (critical-path time per rank-step).
COMPONENTS = "components are critical-path µs per rank-step; they sum to the step time"


def legend(columns: Iterable[str]) -> str:
    """``"`critical_us`: ...; `busy_us`: ..."`` for the glossary columns among ``columns``."""
    seen = [c for c in dict.fromkeys(columns) if c in GLOSSARY]
    return "; ".join(f"`{c}`: {GLOSSARY[c]}" for c in seen)
