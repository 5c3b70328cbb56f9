"""Device contention (``contention`` edges): a kernel that waits for the compute units a kernel
of another stream of its device holds.

Streams of one device share its compute units. A kernel launched while a long kernel of another
stream fills the device does not start when its own inputs are done but when that kernel drains:
its measured ready lag (start − latest end of its inputs, launch included) is a wait on that
kernel, not launch latency, and it shrinks when that kernel does. No flow event records it.

The rule, per kernel (device work of a compute kind, or a collective: NCCL kernels need compute
units to start too) whose ready lag is at least `MIN_WAIT_US`: if a kernel of another stream of
the same rank and device (compute kinds only: a collective takes few units, a copy none) ran
through at least the second half of its wait (started by then) and ended within ``[start −
slack, start + tail]``, tail = min(`TAIL_US`, half the lag), it was waiting for that kernel:
that kernel's end → its start is a ``contention`` edge. A device that runs one job at a time,
its queue holding jobs of several streams, makes a kernel wait behind several kernels in turn,
the last of which may start late in the wait: a kernel that ended in that window also counts
when the device was busy with other streams' compute kernels from the waiting kernel's ready
time until that kernel started (`busy_periods`: a kernel ran at the ready time, and each next
one started at most the slack after every one before it ended) — the kernel that ended last,
freeing the device, is the one waited for. The nearest such end is taken. A kernel that starts
before the other ends (by at most the tail) started while the other's last blocks drained: the
edge starts it that *share* of the other's duration before the other's end
(`Graph.contention_tail`, applied by the scheduler to the costed duration), so as measured it
starts where it did and a faster blocker starts it earlier.

The slack is how long after a kernel ends the device starts the next work it already holds,
measured per rank and device (`dispatch_slack`): the median (`GAP_QUANTILE`) of the gaps
between a compute kernel's end and the start of the next work on its own stream whose latest
recorded input is that kernel (launched before the kernel ended, or with no launch recorded:
back to back), gaps of `MIN_WAIT_US` or more left out (by this rule's threshold those are waits,
not dispatch). In HTA's traces an A100 or V100 starts queued work 1-3 us (median) after a kernel
ends; the MTIA inference device ~5 us after a short job and ~33 us after a long one (median
33.4 us), on its own stream as on another. `SLACK_US` is the floor, and the slack of a device
with fewer than `MIN_PAIRS` such gaps. Limits: a wait on several kernels at once is taken as a
wait on the nearest; a wait behind several kernels in turn is found only when the device was
busy from the ready time on, each handover within the slack (a longer one breaks the busy period,
as on the MTIA device a 44.6 us handover does; of its 95 back-to-back gaps on one stream 92 are
at most 35.9 us, the others 45, 47 and 56 us), and only the last kernel is an edge: a faster
earlier one frees the device earlier only through the waits the rule finds between them; on a
device running several streams' kernels at once a busy device is not proof of a wait for units,
and a long lag that ends as a kernel of such a busy period ends is taken as one; a kernel whose
wait the trace records otherwise (an event no flow links) and that happens to start as another
stream's kernel ends is taken as contention; a wait that starts later after the blocker's end
than the device's median gap is missed (on the MTIA device 43-45 us after a job, past 92 of its
95 gaps: the median is kept); the thresholds are assumed.
"""

from __future__ import annotations

import numpy as np

from mtia_trace import keys
from replay.graph.events import EventArrays

#: Shortest ready lag taken as a possible wait for compute units, us (assumed: an order of
#: magnitude above a kernel launch latency, ~5-10 us on current GPUs).
MIN_WAIT_US = 100.0
#: How long before the other kernel's end the waiting one may start, us (assumed: the other
#: kernel's last wave of blocks frees units before it ends; measured on a real A100 trace:
#: 1-69 us before).
TAIL_US = 100.0
#: How long after the other kernel's end the waiting one may start, at least, us (assumed: about
#: a kernel-to-kernel gap on one stream); the floor of the measured slack (`dispatch_slack`) and
#: the slack of a device whose trace shows too few back-to-back gaps.
SLACK_US = 20.0
#: Back-to-back gaps a device needs for its measured slack to replace `SLACK_US` (assumed: enough
#: that the median is not set by one or two gaps).
MIN_PAIRS = 10
#: Quantile of a device's back-to-back gaps taken as its slack (assumed: the median, "about a
#: kernel-to-kernel gap"; a higher quantile takes the gaps that are not dispatch: in a sampled
#: trace (HTA's ``trace_filter``, A100) a stream's gaps span kernels left out, median 13 us but
#: 90th percentile 65 us).
GAP_QUANTILE = 0.5
#: Candidate ends each kernel looks through (ends sorted; a window of ``tail + slack`` us holds
#: few).
_LOOK = 64


def dispatch_slack(ev: EventArrays, ready_lag: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Per event: the slack of its rank and device, us (`GAP_QUANTILE` of the device's
    back-to-back gaps after a compute kernel, at least `SLACK_US`; `SLACK_US` with fewer than
    `MIN_PAIRS` gaps). ``prev``: each event's predecessor on its stream, -1 none;
    ``ready_lag``: measured ready lag over its other inputs."""
    slack = np.full(ev.n, SLACK_US)
    nxt = np.flatnonzero(ev.is_dev & ~ev.dev_marker & (prev >= 0))
    k = prev[nxt]
    gap = ev.ts[nxt] - ev.end[k] if len(nxt) else np.zeros(0)
    # the kernel is the follower's latest input (its ready lag is the whole gap): back to back
    b2b = (ev.is_kernel[k] & ~ev.dev_marker[k] & (gap >= 0.0) & (gap < MIN_WAIT_US)
           & (ready_lag[nxt] >= gap - 1e-6))
    nxt, gap = nxt[b2b], gap[b2b]
    if len(nxt) >= MIN_PAIRS:
        gk, ek = keys.joint_codes((ev.rank[nxt], ev.device[nxt]), (ev.rank, ev.device))
        for g in np.unique(gk):
            gg = gap[gk == g]
            if len(gg) >= MIN_PAIRS:
                slack[ek == g] = max(SLACK_US, float(np.quantile(gg, GAP_QUANTILE)))
    return slack


def busy_periods(ev: EventArrays, kernels: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """Per event: the id of the busy period of its rank and device it belongs to (-1 for events
    not in ``kernels``). A busy period is a run of ``kernels`` of one rank and device (any stream)
    each starting at most the device's ``slack`` (per event) after every one before it ended."""
    period = np.full(ev.n, -1, dtype=np.int64)
    if not len(kernels):
        return period
    g, _ = keys.joint_codes((ev.rank[kernels], ev.device[kernels]),
                            (ev.rank[kernels], ev.device[kernels]))
    o = np.lexsort((ev.ts[kernels], g))
    k, g = kernels[o], g[o]
    t0 = float(min(ev.ts[k].min(), ev.end[k].min()))
    span = float(max(ev.ts[k].max(), ev.end[k].max()) - t0) + float(slack[k].max()) + 1.0
    # the latest end so far, per device (offset by a monotone key per device: a running maximum
    # over the devices back to back never carries one device's ends into the next)
    run_end = np.maximum.accumulate(g * span + (ev.end[k] - t0))
    new = np.ones(len(k), dtype=bool)
    new[1:] = ((g[1:] != g[:-1])
               | (g[1:] * span + (ev.ts[k[1:]] - t0) > run_end[:-1] + slack[k[1:]]))
    period[k] = np.cumsum(new) - 1
    return period


def _period_at(ev: EventArrays, kernels: np.ndarray, period: np.ndarray, who: np.ndarray,
               t: np.ndarray) -> np.ndarray:
    """Per ``who``: the busy period of its rank and device that a kernel of ``kernels`` running
    at ``t`` (started at or before, ended after) belongs to; -1 when none ran then."""
    out = np.full(len(who), -1, dtype=np.int64)
    if not len(who) or not len(kernels):
        return out
    kg, wg = keys.joint_codes((ev.rank[kernels], ev.device[kernels]),
                              (ev.rank[who], ev.device[who]))
    o = np.lexsort((ev.ts[kernels], kg))
    k, kg = kernels[o], kg[o]
    t0 = float(min(ev.ts[k].min(), t.min()))
    span = float(max(ev.end[k].max(), t.max()) - t0) + 1.0
    run_end = np.maximum.accumulate(kg * span + (ev.end[k] - t0))
    # the last kernel of the device started at or before t: its period is busy at t when some
    # kernel so far in that device's order ends after t
    i = np.searchsorted(kg * span + (ev.ts[k] - t0), wg * span + (t - t0), side="right") - 1
    ic = np.maximum(i, 0)
    hit = (i >= 0) & (kg[ic] == wg) & (run_end[ic] > wg * span + (t - t0))
    out[hit] = period[k[ic[hit]]]
    return out


def contention_edges(ev: EventArrays, ready_lag: np.ndarray, prev: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, object]]:
    """(src, dst, tail) of the ``contention`` edges (event ids: the kernel waited for → the
    waiting kernel; ``tail``: how long before the source's measured end the waiting kernel
    started, us, 0 when after), and notes. ``ready_lag``: each event's measured ready lag over
    its other inputs; ``prev``: each event's predecessor on its stream, -1 none."""
    empty = np.zeros(0, dtype=np.int64)
    is_kernel = ev.is_kernel
    waiting = np.flatnonzero((is_kernel | (ev.is_dev & ev.is_comm)) & ~ev.dev_marker
                             & (ready_lag >= MIN_WAIT_US))
    blockers = np.flatnonzero(is_kernel & ~ev.dev_marker)
    notes: dict[str, object] = {"contention_waits": 0, "contention_waited_us": 0.0}
    if not len(waiting) or not len(blockers):
        return empty, empty, np.zeros(0), notes
    slack = dispatch_slack(ev, ready_lag, prev)
    bk, wk = keys.joint_codes((ev.rank[blockers], ev.device[blockers]),
                              (ev.rank[waiting], ev.device[waiting]))
    # blockers by (device, end): one ascending array of ends per device, devices back to back
    o = np.lexsort((ev.end[blockers], bk))
    blockers, bk = blockers[o], bk[o]
    b_end = ev.end[blockers]
    w_ts, lag = ev.ts[waiting], ready_lag[waiting]
    ready = w_ts - lag
    tail = np.minimum(TAIL_US, 0.5 * lag)
    lo_end, hi_end = w_ts - slack[waiting], w_ts + tail
    grp_lo = np.searchsorted(bk, wk, side="left")
    grp_hi = np.searchsorted(bk, wk, side="right")
    # first blocker of the waiting kernel's device ending at or after lo_end: per device the
    # ends ascend, so search the device's slice (offset by a monotone key per device)
    span = float(b_end.max() - b_end.min()) + 1.0 if len(b_end) else 1.0
    flat = bk * span + (b_end - b_end.min())
    cur = np.searchsorted(flat, wk * span + (lo_end - b_end.min()), side="left")
    cur = np.maximum(cur, grp_lo)
    period = busy_periods(ev, blockers, slack)
    # the busy period the device was in when the waiting kernel became ready (-1: idle then)
    at_ready = _period_at(ev, blockers, period, waiting, ready)
    best = np.full(len(waiting), -1, dtype=np.int64)
    best_d = np.full(len(waiting), np.inf)
    for _ in range(_LOOK):
        live = cur < grp_hi
        if not live.any():
            break
        c = np.minimum(cur, len(blockers) - 1)
        b = blockers[c]
        live &= b_end[c] <= hi_end
        # it ran through the second half of the wait, or the device was busy with other
        # streams' compute work from the waiting kernel's ready time until it started
        through = (ev.ts[b] <= ready + 0.5 * lag) | (
            (at_ready >= 0) & (period[b] == at_ready) & (ev.ts[b] < w_ts))
        ok = live & (ev.stream[b] != ev.stream[waiting]) & through & (b != waiting)
        d = np.abs(b_end[c] - w_ts)
        better = ok & (d < best_d)
        best[better], best_d[better] = b[better], d[better]
        cur = np.where(live, cur + 1, grp_hi)
    hit = best >= 0
    src, dst = best[hit], waiting[hit]
    t = np.clip(ev.end[src] - ev.ts[dst], 0.0, None)
    notes["contention_waits"] = int(hit.sum())
    notes["contention_waited_us"] = float(lag[hit].sum())
    return src, dst, t, notes
