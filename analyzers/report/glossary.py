"""One meaning per word: the line every report prints under a table that uses a column, and
the words of the attribution (docs/concepts.md's glossary is generated from `TERMS`).

Every analyzer's ``*_us`` / ``*_pct`` column and every JSON key of a report is one of these
words (tests/test_glossary.py checks it); a word never means two things (``fetch`` is the
memory-bound part of an event's cost, so a stream busy with copies says ``copy``, not
``memory``; a place in a sorted list says ``place``, not ``rank``, which is a process).
"""

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
    "overlap_us": "time non-communication work and communication ran at once",
    "kernel_us": "stream time of device kernels other than collectives and copies (embedding "
                 "gathers included: they are kernels, though much of their cost is fetch)",
    "collective_us": "collective (and point-to-point) transfer time",
    "copy_us": "stream time of copies and memsets (memcpy, memset, DMA requests)",
    "compute_us": "arithmetic-bound time of device work (the compute cost component)",
    "host_us": "host-thread time on the critical path (ops, Python, launch and sync latency)",
    "unexplained_us": "critical-path time no dependency and no modelled cost accounts for",
    "critical_place": "the op's place when sorted by critical_us (1 = most)",
    "busy_place": "the op's place when sorted by busy_us (1 = most)",
    "times_last": "collectives of the run where this rank arrived last",
}

#: The words of the attribution and of the device view, one meaning each. The component words
#: name the parts a step's critical path splits into (they add up to the step).
TERMS: dict[str, str] = {
    "compute": "the arithmetic-bound part of device work's cost (roofline: FLOPs / peak)",
    "fetch": "the memory-bound part of any event's cost: HBM traffic, embedding gathers, copies, "
             "DMA (roofline excess of bytes / bandwidth over the compute time)",
    "collective": "moving a collective's or point-to-point transfer's data",
    "peer_wait": "a ready rank waiting for the last peer to arrive at a collective",
    "queue": "ready work waiting for a busy resource (message engines, links, a full device "
             "queue)",
    "retry": "retransmissions after packet loss",
    "host": "host threads on the critical path: ops' own time, Python between ops, launch and "
            "sync latency",
    "idle": "nothing running on the rank's timelines",
    "unexplained": "critical-path time no dependency and no modelled cost accounts for",
    "kernel": "a device kernel that is neither a collective nor a copy (the device view: time "
              "a stream ran it, whatever bound its cost)",
    "copy": "a memcpy, memset or DMA request on a device stream",
    "busy": "time work ran, overlapped with other work or not",
    "critical": "time on the critical path: what the step waited for; sums to the step",
    "rank": "a process of the distributed job (never a position in a sorted list: that is "
            "'place')",
    "place": "a position in a sorted list (1 = most)",
}

#: The components' meanings in the attribution tables (critical-path time per rank-step).
COMPONENTS = "components are critical-path µs per rank-step; they sum to the step time"


def legend(columns: Iterable[str]) -> str:
    """``"`critical_us`: ...; `busy_us`: ..."`` for the glossary columns among ``columns``."""
    seen = [c for c in dict.fromkeys(columns) if c in GLOSSARY]
    return "; ".join(f"`{c}`: {GLOSSARY[c]}" for c in seen)
