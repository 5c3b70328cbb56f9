"""Where a thread waits for a CPU collective's transfer (``sync`` edges into its chain).

With a CPU backend (gloo) the op on the calling thread (``c10d::allreduce_``) only enqueues;
a worker thread runs the transfer, and the calling thread blocks in ``work.wait()``, which the
trace does not record: the wait is a gap of the calling thread's chain. Which gap:

- *synchronous* (``dist.all_reduce(t)``): the thread runs no op between the enqueue and the
  transfer's end; it waits at its first point after the transfer's end (not a leaf's end).
- *asynchronous* (``async_op=True``, DDP's reducer): the thread runs on (the rest of backward)
  while the transfer runs, and waits where the work object is waited on. Known places
  (`WAIT_CONSUMERS`: DDP's finalize copies each bucket's result into the gradients right
  after waiting on it) take the wait: the first such op starting at or after the transfer's
  end. Without one, the first point after the transfer's end is the wait (a guess: the thread
  may have been busy there).

A wait returns some latency after the transfer ends (``r``): where the transfer ended inside
the gap before the wait point (the thread sat in that gap, waiting), ``r`` is the time from the
transfer's end to the point, the gap keeps only ``r`` and the wait comes back out of the graph.
Where the transfer ended before that gap began (the thread was busy in ops, and its wait
returned at once), nothing was waited: ``r`` = 0 and the gap (the thread's own time) stays.
"""

from __future__ import annotations

import numpy as np

from replay.graph.chains import Chains
from replay.graph.collectives import Collectives
from replay.graph.events import EventArrays

#: Ops a thread runs right after waiting on an asynchronous collective's work object, by name.
#: DDP's reducer waits on each bucket's all-reduce in its finalize, then copies the bucket into
#: the gradients (torch/csrc/distributed/c10d/reducer.cpp, ``Reducer::finalize_backward``).
WAIT_CONSUMERS: tuple[str, ...] = ("torch.distributed.ddp.reducer::copy_bucket_to_grad",)
#: Ops between the wait and its consumer: the reducer takes views of the bucket's gradients
#: (``aten::as_strided``) right after waiting on it, before copying it out.
WAIT_LEAD_IN: tuple[str, ...] = ("aten::as_strided",)


def collective_waits(ev: EventArrays, coll: Collectives, ch: Chains, consumer: np.ndarray,
                     lead_in: np.ndarray, parent: np.ndarray, step_mark: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(transfer event ids, the waiting positions, their return latencies in us, whether the
    wait was seen (the gap before the position holds the transfer's end: that gap keeps only
    the return latency), how many waits went to a `WAIT_CONSUMERS` op) for every enqueued CPU
    transfer that has a wait
    (module docstring). ``consumer``: per event, a `WAIT_CONSUMERS` op; ``lead_in``: a
    `WAIT_LEAD_IN` op; ``parent``: each
    event's enclosing event (-1 none); ``step_mark``: ``ProfilerStep#`` annotations (a consumer
    takes the waits of collectives enqueued inside its own enclosing region, such as DDP's
    ``backward``, not of the whole step)."""
    enq_src, enq_dst = coll.enq_src, coll.enq_dst
    pos_of = np.empty(2 * ev.n, dtype=np.int64)
    pos_of[ch.order] = np.arange(len(ch.order))
    etr = ev.tr_of[enq_src]
    w_src: list[np.ndarray] = []
    w_k: list[np.ndarray] = []
    n_cons = 0
    for t in np.unique(etr).tolist():  # enqueuing threads: one per rank
        a, b = int(ch.track_ptr[t]), int(ch.track_ptr[t + 1])
        ks = a + 1 + np.flatnonzero(~ch.leaf_end[a + 1:b])
        sel = np.flatnonzero(etr == t)
        done = ev.end_k[enq_dst[sel]]
        # the first candidate point after the enqueue, and the first at or after the transfer
        after_enq = np.searchsorted(ks, pos_of[2 * enq_src[sel] + 1], side="right")
        j = np.maximum(np.searchsorted(ch.pkey[ch.order[ks]], done, side="left"), after_enq)
        ok = j < len(ks)
        atc = np.zeros(len(sel), dtype=bool)  # waited on at a consumer
        # asynchronous: the thread ran an op after the enqueue and before the transfer ended,
        # or the transfer ended before its enqueue returned
        busy = ok & ((j > after_enq) | (done < ev.end_k[enq_src[sel]]))
        ps = ch.order[ks]
        cons = ks[(ps % 2 == 0) & consumer[ps // 2]]
        if len(cons) and busy.any():
            lead = _lead_in(ev, ch, cons, lead_in, a)
            c = np.searchsorted(ch.pkey[ch.order[cons]], done[busy], side="left")
            has = c < len(cons)
            bi = np.flatnonzero(busy)[has]
            # the consumer's region must enclose the enqueue
            reg = parent[ch.order[cons[c[has]]] // 2]
            e = enq_src[sel[bi]]
            inside = (reg >= 0) & ~step_mark[np.maximum(reg, 0)]
            r = np.maximum(reg, 0)
            inside &= (ev.ts_k[r] <= ev.ts_k[e]) & (ev.end_k[e] <= ev.end_k[r])
            has[has] = inside
            bi = bi[inside]
            # the wait precedes the consumer's lead-in, unless the transfer ended inside it
            first = np.maximum(np.searchsorted(ks, lead[c[has]], side="left"), j[bi])
            j[bi] = np.minimum(first, np.searchsorted(ks, cons[c[has]], side="left"))
            atc[bi] = True
        if len(cons):
            kk = _in_order(ev, ch, cons, _lead_in(ev, ch, cons, lead_in, a), parent, step_mark,
                           enq_src[sel])
            by = kk >= 0
            j[by] = np.searchsorted(ks, kk[by], side="left")
            ok |= by
            atc |= by
        n_cons += int((atc & ok).sum())
        w_src.append(enq_dst[sel[ok]])
        w_k.append(ks[j[ok]])
    wsrc = np.concatenate(w_src) if w_src else np.zeros(0, dtype=np.int64)
    wk = np.concatenate(w_k) if w_k else np.zeros(0, dtype=np.int64)
    # a wait is seen where the transfer ended inside the gap before the point: the thread sat
    # there until it returned; otherwise it was busy and the wait returned at once (lag 0)
    # a transfer whose range closed after the point that waited on it (its completion was
    # signalled first, the worker thread descheduled before closing the range): the edge keeps
    # that (negative) lag and the gap stays the thread's own
    late = ev.end[wsrc] > ch.tpos[wk]
    seen = (ch.tpos[wk] - ch.gap[wk] <= ev.end[wsrc]) & ~late
    lag = np.where(seen, np.clip(ch.tpos[wk] - ev.end[wsrc], 0.0, None),
                   np.where(late, ch.tpos[wk] - ev.end[wsrc], 0.0))
    return wsrc, wk, lag, seen, n_cons


def _lead_in(ev: EventArrays, ch: Chains, cons: np.ndarray, lead_in: np.ndarray,
             track_start: int) -> np.ndarray:
    """Per consumer start position: the first position of the run of `WAIT_LEAD_IN` leaves at
    its depth that directly precede it; the consumer itself without one."""
    out = cons.copy()
    for i, c in enumerate(cons.tolist()):  # consumers: a few per step
        d = ev.depth[ch.order[c] // 2]
        k = c
        while k - 2 > track_start and ch.leaf_end[k - 1]:
            e = ch.order[k - 1] // 2
            if ev.depth[e] != d or not lead_in[e]:
                break
            k -= 2
        out[i] = k
    return out


def _in_order(ev: EventArrays, ch: Chains, cons: np.ndarray, lead: np.ndarray,
              parent: np.ndarray, step_mark: np.ndarray, enq: np.ndarray) -> np.ndarray:
    """Per enqueue: the position where it is waited on when DDP's finalize takes the buckets in
    order, -1 where that does not apply. The reducer's finalize waits on bucket k, then copies
    it out (a run of `WAIT_LEAD_IN` views and `WAIT_CONSUMERS` copies per bucket), bucket by
    bucket in the order the buckets were enqueued (reducer.cpp, ``finalize_backward``): where
    a region (the consumers' enclosing event, not a ``ProfilerStep#``) holds as many such runs
    as enqueues, the k-th enqueue in it is waited on at the start of the k-th run, whenever its
    transfer's range closed."""
    out = np.full(len(enq), -1, dtype=np.int64)
    cev = ch.order[cons] // 2
    reg = parent[cev]
    # a run starts at a consumer with views before it (its lead-in), or at a region's first
    first = np.ones(len(cons), dtype=bool)
    first[1:] = reg[1:] != reg[:-1]
    starts = first | (lead != cons)
    for r in np.unique(reg[(reg >= 0)]).tolist():  # regions: one per step
        if step_mark[r]:
            continue
        runs = lead[(reg == r) & starts]
        inside = np.flatnonzero((ev.ts_k[r] <= ev.ts_k[enq]) & (ev.end_k[enq] <= ev.end_k[r]))
        if len(runs) != len(inside) or not len(inside):
            continue
        inside = inside[np.argsort(ev.ts_k[enq[inside]], kind="stable")]
        out[inside] = runs
    return out
