"""Validation of a replay against the trace it came from (`mtia-trace validate`).

Two replays of the same graph, both as measured (every event keeps its measured duration):

- the default one keeps every measured gap and lag, so its step error checks that the graph and
  the scheduler reproduce the trace (a consistency check: 0 by construction where every lag is
  kept);
- the strict one replaces every measured gap and lag the model claims to predict by the modelled
  value (`replay.pipeline.modelled_lags` with ``strict``): a device event's ready lag becomes
  the source's launch latency (0 when the source is unknown), a lag that starts a transfer on a
  CPU collective worker thread becomes 0 (the enqueue is its dependency). What it keeps as
  measured is listed in `KEPT_MEASURED`: host gaps between and inside host ops (Python, data
  loading), whose time is counted as ``unexplained_us`` where it lies outside every op.

Besides step ends, both replays are judged on the schedule inside the step: the start of every
device event (kernels, copies, memsets, collectives) replayed against measured, summarized as
the median and 90th percentile of |replayed - measured| as a share of the mean measured step.
Device events the graph cannot place (no launching call in the trace) are counted per trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from replay.costs import AsMeasured
from replay.graph import MAX_READY_LAG_US, Graph, build_graph
from replay.run import replay_events

#: What a strict replay keeps as measured: the model has no value for these.
KEPT_MEASURED = (
    "host gaps between and inside host ops (Python, data loading; counted as unexplained_us "
    "where outside every op)",
    "the return latency of host synchronize calls (device end -> call return, at most its "
    "measured duration)",
    "work durations (as-measured costing)",
    "the ready lag of device work with no launching call in the trace (launched before the "
    "capture window, or a sampled trace), counted as unexplained_us",
)

#: Device event kinds whose start the device-schedule error measures (not sync markers).
DEVICE_WORK_KINDS = ("gemm", "conv", "attention", "embedding", "elementwise", "reduction",
                     "memcpy", "memset", "collective", "p2p", "optimizer", "other")


@dataclass(frozen=True)
class StartError:
    """|replayed - measured| start of device events: quantiles in us and as shares of the step."""

    events: int
    median_us: float
    p90_us: float
    mean_step_us: float

    @property
    def median(self) -> float:
        return self.median_us / self.mean_step_us if self.mean_step_us > 0 else 0.0

    @property
    def p90(self) -> float:
        return self.p90_us / self.mean_step_us if self.mean_step_us > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"events": self.events, "median_us": self.median_us, "p90_us": self.p90_us,
                "median": self.median, "p90": self.p90}


@dataclass(frozen=True)
class Validation:
    """What `validate` reports for one trace."""

    steps: pa.Table            # rank, step, measured_us, replayed_us, error, strict_error,
                               # unexplained_us
    device_start: StartError   # default replay
    strict_device_start: StartError
    unexplained_fraction: float
    launch_latency_us: float | None
    source: str | None
    notes: dict[str, object] = field(default_factory=dict)

    def _col(self, name: str) -> np.ndarray:
        return self.steps.column(name).to_numpy()

    @property
    def error(self) -> np.ndarray:
        return self._col("error")

    @property
    def strict_error(self) -> np.ndarray:
        return self._col("strict_error")

    def worst(self, strict: bool = False) -> float:
        e = self.strict_error if strict else self.error
        return float(np.abs(e).max()) if len(e) else 0.0

    def checked(self, strict: bool = False) -> dict[str, float]:
        """The figures `--max-error` gates: the worst step error and the device-start p90 (of
        the strict replay with ``strict``)."""
        d = self.strict_device_start if strict else self.device_start
        return {"step": self.worst(strict), "device_start_p90": d.p90}

    def passed(self, limit: float, strict: bool = False) -> bool:
        return all(v <= limit for v in self.checked(strict).values())

    def unreproducible(self) -> dict[str, float]:
        """What the trace does not let the graph reproduce (empty when nothing): device events
        without a launching call, and device starts more than `MAX_READY_LAG_US` after every
        input the graph knows (their lag is kept and counted as unexplained, not re-timed)."""
        out: dict[str, float] = {}
        for k in ("device_events_without_launch", "device_starts_unexplained",
                  "device_starts_unexplained_us"):
            v = self.notes.get(k, 0)
            if isinstance(v, int | float) and v:
                out[k] = float(v)
        return out

    def gaps(self) -> list[str]:
        """One line per thing the graph cannot reproduce from this trace."""
        u = self.unreproducible()
        lines = []
        n = int(u.get("device_events_without_launch", 0))
        if n:
            lines.append(f"{n:,} device events have no launching call in the trace (launched "
                         "before the capture window, or a sampled or filtered trace): their "
                         "starts follow only their stream, the measured lag after it kept (by "
                         "the strict replay too) and counted as unexplained")
        n = int(u.get("device_starts_unexplained", 0))
        if n:
            lines.append(f"{n:,} device events start more than {MAX_READY_LAG_US:g} us after "
                         "every input the graph knows (a dependency the trace does not record: "
                         f"{u['device_starts_unexplained_us'] / 1e3:,.1f} ms in all, kept and "
                         "counted as unexplained; the strict replay drops it)")
        return lines

    def as_dict(self, limit: float, strict: bool = False) -> dict[str, object]:
        """The `--format json` document."""
        checked = self.strict_error if strict else self.error
        err, serr = self.error, self.strict_error
        cols = ("rank", "step", "measured_us", "replayed_us", "error", "strict_error",
                "unexplained_us")
        rows = [dict(zip(cols, r, strict=True)) | {"over_limit": bool(abs(c) > limit)}
                for r, c in zip(zip(*(self.steps.column(k).to_pylist() for k in cols)),
                                checked, strict=True)]
        u = self.unreproducible()
        return {
            "steps": rows, "median_abs_error": float(np.median(np.abs(err))),
            "worst_abs_error": self.worst(), "strict_median_abs_error":
            float(np.median(np.abs(serr))), "strict_worst_abs_error": self.worst(strict=True),
            "device_start": self.device_start.as_dict(),
            "strict_device_start": self.strict_device_start.as_dict(),
            "checked": "strict" if strict else "error", "max_error": limit,
            "passed": self.passed(limit, strict), "unexplained_fraction":
            self.unexplained_fraction,
            "device_events_without_launch": int(u.get("device_events_without_launch", 0)),
            "device_starts_unexplained": int(u.get("device_starts_unexplained", 0)),
            "strict_keeps_measured": list(KEPT_MEASURED),
        }


def _step_errors(steps: pa.Table) -> np.ndarray:
    meas = steps.column("measured_us").to_numpy()
    rep = steps.column("total_us").to_numpy()
    return np.where(meas > 0, (rep - meas) / np.where(meas > 0, meas, 1.0), 0.0)


def device_start_error(events: pa.Table, replayed: pa.Table, mean_step_us: float) -> StartError:
    """|replayed - measured| start over the device work events of ``events`` (in a step)."""
    kind = events.column("kind").to_numpy(zero_copy_only=False).astype(str)
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    step = events.column("step").to_numpy()
    m = is_dev & np.isin(kind, DEVICE_WORK_KINDS) & (step >= 0)
    if not m.any():
        return StartError(0, 0.0, 0.0, mean_step_us)
    d = np.abs(replayed.column("start_us").to_numpy()[m] - events.column("ts_us").to_numpy()[m])
    return StartError(int(m.sum()), float(np.median(d)), float(np.quantile(d, 0.9)),
                      mean_step_us)


def validate_events(events: pa.Table, launch_latency_us: float | None = None,
                    source: str | None = None, graph: Graph | None = None) -> Validation:
    """Replay ``events`` as measured, by default and strictly, and compare with the trace."""
    model = AsMeasured(source_launch_us=launch_latency_us)
    g = graph if graph is not None else build_graph(events)
    res = replay_events(events, model, graph=g)
    strict = replay_events(events, model, graph=g, strict=True)
    steps = res.steps
    meas = steps.column("measured_us").to_numpy()
    rep = steps.column("total_us").to_numpy()
    mean_step = float(np.mean(meas[meas > 0])) if (meas > 0).any() else 0.0
    unx = steps.column("unexplained_us").to_numpy()
    table = pa.table({
        "rank": steps.column("rank"), "step": steps.column("step"),
        "measured_us": pa.array(meas, pa.float64()), "replayed_us": pa.array(rep, pa.float64()),
        "error": pa.array(_step_errors(steps)),
        "strict_error": pa.array(_step_errors(strict.steps)),
        "unexplained_us": pa.array(unx, pa.float64()),
    })
    return Validation(
        steps=table,
        device_start=device_start_error(events, res.events, mean_step),
        strict_device_start=device_start_error(events, strict.events, mean_step),
        unexplained_fraction=float(unx.sum() / rep.sum()) if rep.sum() > 0 else 0.0,
        launch_latency_us=launch_latency_us, source=source, notes=dict(res.notes) | long_lags(g))


def long_lags(g: Graph) -> dict[str, float]:
    """Device (and worker-thread) starts more than `MAX_READY_LAG_US` after every input the
    graph knows: their count and their lag in all (us)."""
    far = g.ready_lag > MAX_READY_LAG_US
    return {"device_starts_unexplained": int(far.sum()),
            "device_starts_unexplained_us": float(g.ready_lag[far].sum())}
