"""The contract between hardware models and the scheduler.

A cost model prices every event of the canonical table at once (numpy arrays, no per-event
Python). The scheduler only sees `EventCosts`: a duration per event split into components, and an
optional resource pool each event must hold while it runs (message engines, NIC channels); the
time an event waits for its pool is recorded as queueing, not as part of its duration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import COMM_KINDS, FETCH_KINDS

#: Costing-input column keeping each event's measured duration (``dur_us`` there is corrected:
#: a collective's transfer part, a synchronize call's return latency), for models that need the
#: measured schedule (e.g. where compute overlapped communication in the trace).
MEASURED_DUR = "measured_dur_us"

#: The per-event cost components; they sum to `EventCosts.dur_us`.
COMPONENTS: tuple[str, ...] = ("compute", "fetch", "collective", "retry", "host")
#: Column of the costing input (`replay.pipeline.costing_input`) that keeps each event's measured
#: duration (``dur_us`` there is corrected: transfer parts, return latencies).
MEASURED_DUR = "measured_dur_us"


@dataclass
class EventCosts:
    """Per-event durations (us) and their split. Arrays are indexed by event_id."""

    compute_us: np.ndarray
    fetch_us: np.ndarray
    collective_us: np.ndarray
    retry_us: np.ndarray
    host_us: np.ndarray
    #: pool index each event occupies while running, -1 for none
    resource: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    #: units per pool (e.g. 16 message engines); indexed by pool id
    resource_capacity: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))
    #: what-if knobs and assumptions the model used, for the run's metadata and report
    notes: dict[str, object] = field(default_factory=dict)
    #: per-event interference of communication with compute on a schedule: an object with
    #: ``apply(compute, fetch, ready, start, end) -> (compute, fetch)``
    #: (`replay.hardware.interference.Interference`); None: the scalar `overlap_slowdown`
    interference: object | None = None

    @property
    def dur_us(self) -> np.ndarray:
        return self.compute_us + self.fetch_us + self.collective_us + self.retry_us + self.host_us

    def __post_init__(self) -> None:
        n = len(self.compute_us)
        if len(self.resource) == 0:
            self.resource = np.full(n, -1, dtype=np.int32)
        for name in COMPONENTS:
            arr = getattr(self, f"{name}_us")
            assert len(arr) == n, f"{name}_us has {len(arr)} values for {n} events"
            assert (arr >= 0).all(), f"{name}_us has negative values"


class CostModel(Protocol):
    """What the scheduler needs from a target machine."""

    name: str

    def cost(self, events: pa.Table) -> EventCosts:
        """Price every event of the canonical table."""
        ...

    def overlap_slowdown(self) -> float:
        """Fractional slowdown of compute that overlaps communication on the same rank
        (0.0 when communication is offloaded and does not interfere)."""
        ...


def device_waits(events: pa.Table) -> np.ndarray:
    """Device sync markers (kind ``sync`` on a device: ``cuda_sync`` Stream Wait Event and the
    host-wait markers, MTIA ``event_wait`` / ``event_record``). They are not work: their measured
    duration is either a host API call (CUDA) or the wait itself (MTIA), and the graph produces the
    wait from the dependency, so they cost nothing."""
    kind = events.column("kind")
    m = pc.equal(kind, "sync").fill_null(False)
    m = pc.and_(m, events.column("is_device").fill_null(False))
    return m.to_numpy(zero_copy_only=False).astype(bool)


def split_by_kind(events: pa.Table, dur_us: np.ndarray) -> EventCosts:
    """Assign each event's whole duration to the component its kind implies; device sync markers
    (`device_waits`) get none: waiting is not a cost, the graph produces it."""
    kind = events.column("kind").to_numpy(zero_copy_only=False).astype(str)
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False)
    n = len(kind)
    zeros = lambda: np.zeros(n, dtype=np.float64)  # noqa: E731
    c = EventCosts(zeros(), zeros(), zeros(), zeros(), zeros())
    comm = np.isin(kind, COMM_KINDS)
    fetch = np.isin(kind, FETCH_KINDS)
    host = ~is_dev & ~comm & ~fetch
    comp = ~(comm | fetch | host | device_waits(events))
    c.collective_us[comm] = dur_us[comm]
    c.fetch_us[fetch] = dur_us[fetch]
    c.host_us[host] = dur_us[host]
    c.compute_us[comp] = dur_us[comp]
    return c


class AsMeasured:
    """Every event keeps its measured duration: the fidelity check of graph and scheduler.

    ``source_launch_us``: the launch latency of the hardware the trace was measured on, when
    known; the part of a device ready lag beyond it is counted as unexplained (without it, the
    whole lag is)."""

    name = "as-measured"

    def __init__(self, source_launch_us: float | None = None) -> None:
        self.source_launch_us = source_launch_us

    def launch_latencies(self, events: pa.Table) -> tuple[float | None, float | None]:
        return self.source_launch_us, None

    def cost(self, events: pa.Table) -> EventCosts:
        dur = events.column("dur_us").to_numpy().astype(np.float64, copy=True)
        costs = split_by_kind(events, dur)
        costs.notes["costing"] = "as-measured"
        return costs

    def overlap_slowdown(self) -> float:
        return 0.0
