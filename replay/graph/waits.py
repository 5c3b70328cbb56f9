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


def collective_waits(ev: EventArrays, coll: Collectives, ch: Chains, consumer: np.ndarray,
                     parent: np.ndarray, step_mark: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(transfer event ids, the waiting positions, their return latencies in us, whether the
    wait was seen (the gap before the position holds the transfer's end: that gap keeps only
    the return latency), how many waits went to a `WAIT_CONSUMERS` op) for every enqueued CPU
    transfer that has a wait
    (module docstring). ``consumer``: per event, a `WAIT_CONSUMERS` op; ``parent``: each
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
        # asynchronous: the thread ran an op after the enqueue and before the transfer ended,
        # or the transfer ended before its enqueue returned
        busy = ok & ((j > after_enq) | (done < ev.end_k[enq_src[sel]]))
        ps = ch.order[ks]
        cons = ks[(ps % 2 == 0) & consumer[ps // 2]]
        if len(cons) and busy.any():
            lead = _lead_in(ev, ch, cons, a)
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
            n_cons += len(bi)
        w_src.append(enq_dst[sel[ok]])
        w_k.append(ks[j[ok]])
    wsrc = np.concatenate(w_src) if w_src else np.zeros(0, dtype=np.int64)
    wk = np.concatenate(w_k) if w_k else np.zeros(0, dtype=np.int64)
    # a wait is seen where the transfer ended inside the gap before the point: the thread sat
    # there until it returned; otherwise it was busy and the wait returned at once (lag 0)
    seen = ch.tpos[wk] - ch.gap[wk] <= ev.end[wsrc]
    lag = np.where(seen, np.clip(ch.tpos[wk] - ev.end[wsrc], 0.0, None), 0.0)
    return wsrc, wk, lag, seen, n_cons


def _lead_in(ev: EventArrays, ch: Chains, cons: np.ndarray, track_start: int) -> np.ndarray:
    """Per consumer start position: the first position of the run of leaf ops at its depth
    that directly precede it (DDP's finalize takes views of a bucket, ``aten::as_strided``,
    right after waiting on it and before copying it out); the consumer itself without one."""
    out = cons.copy()
    for i, c in enumerate(cons.tolist()):  # consumers: a few per step
        d = ev.depth[ch.order[c] // 2]
        k = c
        while (k - 2 > track_start and ch.leaf_end[k - 1]
               and ev.depth[ch.order[k - 1] // 2] == d):
            k -= 2
        out[i] = k
    return out
