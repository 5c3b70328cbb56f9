"""The causal diff of two traces of one program (DESIGN §11): what changed the step, and by how
much each part did.

1. *Match* events (`match_events`): collectives by identity (rank, process group, sequence
   number, name), whatever thread or stream ran them (a CPU backend's worker threads take
   collectives in no fixed order; where NEW issues other collectives, sequence numbers are
   first aligned by where each is enqueued: `_align_seqs`); everything else per rank, step (by
   position: the k-th step of
   BASE with the k-th of NEW) and track (host threads paired by the names they run, device
   streams by id), by name sequence: `difflib.SequenceMatcher` over name codes, so a few inserted
   or missing ops leave the rest matched. Identical sequences skip the matcher.
2. *Transplant* (`transplant`): BASE's graph — its dependencies, the gaps between ops (Python,
   data loading), ready lags and waits — replayed with NEW's durations of the matched *work*:
   leaf ops and device events (their costed durations: for a matched collective its transfer
   part, own end − last rank's arrival, so the waiting comes out of BASE's graph), and the self
   time of ops and user annotations with children (the measured gaps inside them, waits
   excluded), and a CPU collective's dispatch and return latencies (the enqueue reaching the
   backend's worker thread, the completion reaching the waiting thread), and when each rank
   began recording (its threads' first points and its stream-like tracks' earliest start:
   `_starts_new`). The gaps directly inside ``ProfilerStep#`` (the loop between regions, data
   loading outside any annotation), the dependencies, ready lags, waits for peers and synchronize calls'
   return latencies stay BASE's.
   Where NEW issues collectives BASE does not (another DDP bucket), the graph replayed is
   built over BASE's events plus NEW's unmatched ones, placed among BASE's where NEW has them
   (`with_new_only`): those get NEW's dependencies and durations. Where BASE issues
   collectives NEW does not, BASE's unmatched events take no time (`_drop_base_only`).
3. *Attribute* (`diff_traces`): groups (by default the outermost user annotation an event is in,
   below ``ProfilerStep#``) get NEW's durations one after the other (sequential scheme: groups
   in order of their busy-time change, largest first); each group's contribution is the step
   change its turn caused. The contributions add up exactly to predicted − replayed BASE.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.errors import UsageError
from replay.attribution import window_spans
from replay.counterfactual import (
    Prepared,
    _whole_steps,
    measured_step_times,
    prepare,
    sorted_codes,
)
from replay.graph import EDGE_CODE, Graph
from replay.whatif import launcher, set_durations, total_cost

#: Below this fraction of matched events two traces are taken for different programs.
MIN_MATCHED = 0.5
#: The attribution group of the events only NEW has (`with_new_only`).
NEW_ONLY_GROUP = "(events only NEW has)"
#: Attribution dimensions of `diff_traces`.
DIFF_GROUP_BY = ("scope", "kind", "name", "rank", "rank-scope")


@dataclass
class Matching:
    """Matched event ids (``base[i]`` ↔ ``new[i]``) and what stayed unmatched."""

    base: np.ndarray
    new: np.ndarray
    n_base: int
    n_new: int
    unmatched_base: Counter = field(default_factory=Counter)
    unmatched_new: Counter = field(default_factory=Counter)
    #: per NEW event: its collective sequence number as aligned to BASE's (`_align_seqs`; a
    #: collective only NEW issues gets one BASE does not use, the same on every rank), -1 none
    new_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def fraction(self) -> float:
        """Matched events over all events of both traces (1.0: every event has its partner)."""
        tot = self.n_base + self.n_new
        return 2.0 * len(self.base) / tot if tot else 1.0


def _step_ordinal(events: pa.Table) -> np.ndarray:
    """Per event: its step's position among its rank's steps (0, 1, ...), -1 outside steps."""
    rank = events.column("rank").to_numpy().astype(np.int64)
    step = events.column("step").to_numpy().astype(np.int64)
    out = np.full(len(step), -1, dtype=np.int64)
    ok = step >= 0
    if ok.any():
        r, st = rank[ok] - rank[ok].min(), step[ok]
        # (rank, step) as one key that sorts the same way
        u, inv = np.unique(r * (int(st.max()) + 1) + st, return_inverse=True)
        ur = u // (int(st.max()) + 1)
        first = np.searchsorted(ur, ur, side="left")
        out[ok] = (np.arange(len(u)) - first)[inv.reshape(-1)]
    return out


def _pair_tracks(tb: dict[str, Counter], tn: dict[str, Counter]) -> dict[str, str]:
    """BASE track → NEW track for one rank: device streams by id, host threads greedily by the
    overlap of the names they run (thread ids differ between runs)."""
    pairs: dict[str, str] = {}
    for t in tb:
        if t.startswith("dev:") and t in tn:
            pairs[t] = t
    rest_b = [t for t in tb if t not in pairs]
    rest_n = [t for t in tn if t not in pairs.values()]
    scores = []
    for b in rest_b:
        for n in rest_n:
            if b.startswith("dev:") != n.startswith("dev:"):
                continue
            s = sum((tb[b] & tn[n]).values())
            if s > 0:
                scores.append((s, b, n))
    scores.sort(key=lambda x: (-x[0], x[1], x[2]))
    used_n: set[str] = set()
    for s, b, n in scores:
        if b in pairs or n in used_n:
            continue
        pairs[b] = n
        used_n.add(n)
    return pairs


def match_events(base: pa.Table, new: pa.Table) -> Matching:
    """Match BASE and NEW events per rank, step and track by name sequence."""
    nb, nn = base.num_rows, new.num_rows
    names = pc.dictionary_encode(pa.concat_arrays([
        base.column("name").combine_chunks().cast(pa.string()),
        new.column("name").combine_chunks().cast(pa.string())]))
    code = names.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    cb, cn = code[:nb], code[nb:]
    dict_names = names.dictionary.to_pylist()
    sides = []
    for ev, c in ((base, cb), (new, cn)):
        rank = ev.column("rank").to_numpy().astype(np.int64)
        sides.append((rank, sorted_codes(ev.column("track")), _step_ordinal(ev), c))
    kb, kn = _coll_keys(base, cb), _coll_keys(new, cn)
    out_b: list[np.ndarray] = []
    out_n: list[np.ndarray] = []
    keyed_b, keyed_n = kb[:, 0] >= 0, kn[:, 0] >= 0
    # tracks as codes into their sorted names (one per side)
    (rb, (trb, tvb), sb, _), (rn, (trn, tvn), sn, _) = sides
    code_b = {t: i for i, t in enumerate(tvb.tolist())}
    code_n = {t: i for i, t in enumerate(tvn.tolist())}
    for r in sorted(set(rb.tolist()) | set(rn.tolist())):  # ranks: few
        ib = np.flatnonzero(rb == r)
        inn = np.flatnonzero(rn == r)
        tb = {tvb[t]: Counter(cb[ib[trb[ib] == t]].tolist()) for t in np.unique(trb[ib]).tolist()}
        tn = {tvn[t]: Counter(cn[inn[trn[inn] == t]].tolist())
              for t in np.unique(trn[inn]).tolist()}
        pairs = _pair_tracks(tb, tn)
        for t_b, t_n in pairs.items():  # tracks: few
            eb = ib[(trb[ib] == code_b[t_b]) & ~keyed_b[ib]]
            en = inn[(trn[inn] == code_n[t_n]) & ~keyed_n[inn]]
            for k in np.union1d(sb[eb], sn[en]).tolist():  # steps: few
                a = eb[sb[eb] == k]
                b = en[sn[en] == k]
                ia, ib2 = _match_seq(cb[a], cn[b])
                out_b.append(a[ia])
                out_n.append(b[ib2])
    # collectives: by identity, sequence numbers aligned by where each is enqueued (its
    # parent, as matched above) where the runs issue different ones
    part = np.full(nn, -1, dtype=np.int64)
    if out_b:
        part[np.concatenate(out_n)] = np.concatenate(out_b)
    _align_seqs(kb, kn, _coll_signature(base, cb, np.arange(nb)),
                _coll_signature(new, cn, np.where(part >= 0, part, nb + np.arange(nn))),
                base.column("ts_us").to_numpy(), new.column("ts_us").to_numpy())
    cmb, cmn = _join_keys(kb, kn)
    out_b.insert(0, cmb)
    out_n.insert(0, cmn)
    mb = np.concatenate(out_b)
    mn = np.concatenate(out_n)
    um_b: Counter = Counter(dict_names[c] for c in _unmatched(np.arange(nb), mb, cb))
    um_n: Counter = Counter(dict_names[c] for c in _unmatched(np.arange(nn), mn, cn))
    return Matching(base=mb, new=mn, n_base=nb, n_new=nn, unmatched_base=um_b,
                    unmatched_new=um_n, new_seq=kn[:, 2].copy())


def _coll_keys(ev: pa.Table, code: np.ndarray) -> np.ndarray:
    """Per event (rank, pg code, coll_seq, name code, occurrence) for collectives with a
    process group and sequence number; -1 rows for everything else."""
    n = ev.num_rows
    seq = ev.column("coll_seq").fill_null(-1).to_numpy().astype(np.int64)
    pg = ev.column("pg")
    ok = (seq >= 0) & pg.is_valid().to_numpy(zero_copy_only=False).astype(bool) & (code >= 0)
    out = np.full((n, 5), -1, dtype=np.int64)
    if not ok.any():
        return out
    pgs = pg.to_numpy(zero_copy_only=False)
    pg_code = np.zeros(n, dtype=np.int64)
    _, pg_code[ok] = np.unique(pgs[ok].astype(str), return_inverse=True)
    rank = ev.column("rank").to_numpy().astype(np.int64)
    k = np.stack([rank, pg_code, seq, code], axis=1)[ok]
    ids = np.flatnonzero(ok)
    o = np.lexsort((ids, k[:, 3], k[:, 2], k[:, 1], k[:, 0]))
    ks = k[o]
    new_grp = np.ones(len(ks), dtype=bool)
    new_grp[1:] = (ks[1:] != ks[:-1]).any(axis=1)
    start = np.maximum.accumulate(np.where(new_grp, np.arange(len(ks)), 0))
    occ = np.arange(len(ks)) - start
    out[ids[o], :4] = ks
    out[ids[o], 4] = occ
    return out


def _coll_signature(ev: pa.Table, code: np.ndarray, ident: np.ndarray) -> np.ndarray:
    """Per event: its name code and its parent's identity (``ident``: per event, BASE's id of
    it or of its partner, a number no BASE event has where none; -1 without a parent), as one
    int64: with the collective keys, what a collective is where the program issues it (a
    bucket all-reduce in a given autograd hook, the loss all-reduce in its region)."""
    parent = ev.column("parent_id").to_numpy().astype(np.int64)
    p = np.where(parent >= 0, ident[np.maximum(parent, 0)], -1)
    return (code << 32) + (p + 1)


def _align_seqs(kb: np.ndarray, kn: np.ndarray, sb: np.ndarray, sn: np.ndarray,
                tb: np.ndarray, tn: np.ndarray) -> None:
    """In place: NEW's collective sequence numbers renumbered to BASE's where the two runs
    issue different collectives (NEW's DDP has another bucket, so every later sequence number
    shifts). Per rank and process group, where the runs' sequences of collectives (by sequence
    number, the name of each one's first event) differ, each sequence number is signed by its
    first event (the enqueue: `_coll_signature`), the signed sequences are matched by
    `_match_seq`, and a NEW sequence number with no partner gets one BASE does not have (its
    own plus an offset past every number of either run: the same on every rank, so the
    instances of one NEW-only collective still match across ranks)."""
    ib, inn = np.flatnonzero(kb[:, 0] >= 0), np.flatnonzero(kn[:, 0] >= 0)
    if not len(ib) or not len(inn):
        return

    def seqs(k: np.ndarray, ids: np.ndarray, sig: np.ndarray, ts: np.ndarray, r: int, g: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = ids[(k[ids, 0] == r) & (k[ids, 1] == g)]
        m = m[np.lexsort((m, ts[m], k[m, 2]))]  # by sequence number, the first (enqueue) first
        first = np.ones(len(m), dtype=bool)
        first[1:] = k[m[1:], 2] != k[m[:-1], 2]
        return k[m[first], 2], sig[m[first]], k[m[first], 3]

    fresh = int(max(kb[:, 2].max(), kn[:, 2].max())) + 1
    for r, g in {(int(a), int(b)) for a, b in kb[ib, :2].tolist()}:  # (rank, group): few
        qb, gb_, nb_ = seqs(kb, ib, sb, tb, r, g)
        qn, gn_, nn_ = seqs(kn, inn, sn, tn, r, g)
        if np.array_equal(nb_, nn_) and np.array_equal(qb, qn):
            continue  # the same collectives under the same numbers
        ia, ja = _match_seq(gb_, gn_)
        to = qn + fresh
        to[ja] = qb[ia]
        sel = inn[(kn[inn, 0] == r) & (kn[inn, 1] == g)]
        kn[sel, 2] = to[np.searchsorted(qn, kn[sel, 2])]


def _join_keys(kb: np.ndarray, kn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Event ids of BASE and NEW whose collective keys are equal."""
    ib, inn = np.flatnonzero(kb[:, 0] >= 0), np.flatnonzero(kn[:, 0] >= 0)
    if not len(ib) or not len(inn):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    allk = np.concatenate([kb[ib], kn[inn]])
    _, inv = np.unique(allk, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    vb, vn = inv[:len(ib)], inv[len(ib):]
    common, pb, pn = np.intersect1d(vb, vn, return_indices=True)
    return ib[pb], inn[pn]


def _unmatched(ids: np.ndarray, matched: np.ndarray, code: np.ndarray) -> list[int]:
    left = ids[~np.isin(ids, matched)]
    return [c for c in code[left].tolist() if c >= 0]


def _match_seq(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of matched elements of two code sequences (longest matching blocks)."""
    if len(a) == len(b) and np.array_equal(a, b):
        i = np.arange(len(a))
        return i, i
    if not len(a) or not len(b):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # the common prefix and suffix match as they are; the matcher sees only the middle
    k = min(len(a), len(b))
    neq = np.flatnonzero(a[:k] != b[:k])
    pre = int(neq[0]) if len(neq) else k
    neq = np.flatnonzero(a[::-1][:k - pre] != b[::-1][:k - pre])
    suf = int(neq[0]) if len(neq) else k - pre
    ia = [np.arange(pre)]
    ib = [np.arange(pre)]
    ma, mb = a[pre:len(a) - suf], b[pre:len(b) - suf]
    if len(ma) and len(mb):
        sm = difflib.SequenceMatcher(None, ma.tolist(), mb.tolist(), autojunk=False)
        for blk in sm.get_matching_blocks():
            if blk.size:
                ia.append(pre + np.arange(blk.a, blk.a + blk.size))
                ib.append(pre + np.arange(blk.b, blk.b + blk.size))
    ia.append(np.arange(len(a) - suf, len(a)))
    ib.append(np.arange(len(b) - suf, len(b)))
    return np.concatenate(ia).astype(np.int64), np.concatenate(ib).astype(np.int64)


# ---- events only NEW has ------------------------------------------------------------------------

@dataclass
class Merged:
    """BASE's events plus NEW's unmatched ones (ids from BASE's count on): the events the
    prediction replays when NEW issues collectives BASE does not (`with_new_only`)."""

    events: pa.Table
    matching: Matching     # merged events ↔ NEW: BASE's pairs plus each added event's origin
    added: np.ndarray      # merged ids of the added events
    new_only_collectives: int


def new_only_collectives(new: pa.Table, m: Matching) -> np.ndarray:
    """NEW's collective events with no partner in BASE (another DDP bucket)."""
    seq = new.column("coll_seq").fill_null(-1).to_numpy().astype(np.int64)
    return (seq >= 0) & ~np.isin(np.arange(new.num_rows), m.new)


def with_new_only(base: pa.Table, new: pa.Table, m: Matching) -> Merged | None:
    """BASE's events plus every NEW event without a partner, where NEW issues collectives BASE
    does not (None otherwise: the prediction is BASE's graph as it is).

    NEW's extra collectives come with the host ops around them that BASE lacks too (the enqueue
    and the op it runs in, the copy that waits on it): all NEW's unmatched events are added, on
    the BASE track their NEW track is paired with (by the matched events it holds), in the BASE
    step at the same position, with NEW's links (parent, launcher) renumbered to the merged ids
    (to the partner where the linked event is matched), the collective sequence number aligned
    to BASE's (`Matching.new_seq`), and NEW's times mapped onto BASE's timeline: piecewise
    linear between the matched points (starts and ends) of the same track, in NEW's order, so
    an added event lies between the same matched neighbours as in NEW (the rank's matched
    points where its track has fewer than two). The graph built over these events then has
    NEW's dependencies for the added events (a transfer's enqueue, its wait, its worker pool)
    and BASE's elsewhere; their durations come from NEW in the transplant."""
    only = new_only_collectives(new, m)
    if not only.any():
        return None
    nb, nn = base.num_rows, new.num_rows
    add = np.setdiff1d(np.arange(nn), m.new)
    to_m = np.full(nn, -1, dtype=np.int64)
    to_m[m.new] = m.base
    to_m[add] = nb + np.arange(len(add))
    rb = base.column("rank").to_numpy().astype(np.int64)
    rn = new.column("rank").to_numpy().astype(np.int64)
    trb = base.column("track").to_numpy(zero_copy_only=False).astype(str)
    trn = new.column("track").to_numpy(zero_copy_only=False).astype(str)
    ts_b = base.column("ts_us").to_numpy()
    ts_n = new.column("ts_us").to_numpy()
    end_b = ts_b + base.column("dur_us").to_numpy()
    end_n = ts_n + new.column("dur_us").to_numpy()
    # NEW track -> BASE track: the one most of its matched events' partners run on
    pair = Counter(zip(trn[m.new].tolist(), trb[m.base].tolist()))
    track_of: dict[str, str] = {}
    for (t_n, t_b), _c in sorted(pair.items(), key=lambda kv: -kv[1]):
        track_of.setdefault(t_n, t_b)
    pid_of: dict[int, str] = {}
    for r, t in zip(rb.tolist(), trb.tolist()):
        parts = t.split(":")
        if len(parts) == 3 and parts[0] == "host" and parts[1].isdigit():
            pid_of.setdefault(r, parts[1])

    def unpaired(t: str, r: int) -> str:
        parts = t.split(":")
        if len(parts) == 3 and parts[0] == "host" and r in pid_of:
            return f"host:{pid_of[r]}:new-{parts[2]}"
        return t

    tracks = np.array([track_of.get(t, unpaired(t, r)) for t, r in
                       zip(trn[add].tolist(), rn[add].tolist())], dtype=object)
    # times: NEW's, mapped piecewise linearly through the matched points of the same track
    t_start, t_end = np.empty(len(add)), np.empty(len(add))
    for r in np.unique(rn[add]).tolist():
        on_r = m.new[rn[m.new] == r]
        for t in np.unique(trn[add][rn[add] == r]).tolist():
            knots = on_r[trn[on_r] == t]
            if len(knots) < 2:
                knots = on_r
            sel = np.flatnonzero((rn[add] == r) & (trn[add] == t))
            kb = m.base[np.isin(m.new, knots)] if len(knots) else np.zeros(0, np.int64)
            kn = m.new[np.isin(m.new, knots)] if len(knots) else np.zeros(0, np.int64)
            xs = np.concatenate([ts_n[kn], end_n[kn]])
            ys = np.concatenate([ts_b[kb], end_b[kb]])
            if not len(xs):
                t_start[sel], t_end[sel] = ts_n[add[sel]], end_n[add[sel]]
                continue
            o = np.lexsort((ys, xs))
            xs, ys = xs[o], np.maximum.accumulate(ys[o])

            def f(x: np.ndarray, xs: np.ndarray = xs, ys: np.ndarray = ys) -> np.ndarray:
                y = np.interp(x, xs, ys)
                # outside the knots: NEW's offsets from the first / last one
                y = np.where(x < xs[0], ys[0] + (x - xs[0]), y)
                return np.where(x > xs[-1], ys[-1] + (x - xs[-1]), y)

            t_start[sel] = f(ts_n[add[sel]])
            t_end[sel] = f(end_n[add[sel]])
    _place_transfers(base, new, m, add, tracks, t_start, t_end)
    # steps: the BASE step at the same position on the rank
    ord_n = _step_ordinal(new)[add]
    step_b = base.column("step").to_numpy().astype(np.int64)
    step = np.full(len(add), -1, dtype=np.int64)
    for r in np.unique(rn[add]).tolist():
        steps_r = np.unique(step_b[(rb == r) & (step_b >= 0)])
        sel = (rn[add] == r) & (ord_n >= 0) & (ord_n < len(steps_r))
        step[sel] = steps_r[ord_n[sel]]
    ext = new.take(pa.array(add))
    cols = {n: ext.column(n) for n in ext.column_names}

    def relink(col: str) -> pa.Array:
        v = ext.column(col).to_numpy().astype(np.int64)
        return pa.array(np.where(v >= 0, to_m[np.maximum(v, 0)], -1).astype(np.int64))

    def shift(col: str) -> pa.Array:
        off = max(int(pc.max(base.column(col)).as_py() or 0),
                  int(pc.max(new.column(col)).as_py() or 0)) + 1
        v = ext.column(col).to_numpy().astype(np.int64)
        return pa.array(np.where(v >= 0, v + off, -1).astype(np.int64))

    seq = m.new_seq[add] if len(m.new_seq) else ext.column("coll_seq").to_numpy()
    cols |= {"event_id": pa.array(nb + np.arange(len(add), dtype=np.int64)),
             "parent_id": relink("parent_id"), "launch_id": relink("launch_id"),
             "correlation": shift("correlation"), "external_id": shift("external_id"),
             "sync_corr": shift("sync_corr"),
             "track": pa.array(tracks.tolist(), type=pa.string()),
             "ts_us": pa.array(t_start), "dur_us": pa.array(np.maximum(t_end - t_start, 0.0)),
             "step": pa.array(step.astype(np.int32)),
             "coll_seq": pa.array(np.asarray(seq, dtype=np.int64))}
    ext = pa.table({n: cols[n].cast(base.schema.field(n).type) for n in base.column_names},
                   schema=base.schema)
    merged = pa.concat_tables([base, ext]).combine_chunks()
    # the canonical order (rank, track, start, longer first), ids renumbered to row positions
    _, tcode = np.unique(merged.column("track").to_numpy(zero_copy_only=False).astype(str),
                         return_inverse=True)
    o = np.lexsort((-merged.column("dur_us").to_numpy(), merged.column("ts_us").to_numpy(),
                    tcode.reshape(-1), merged.column("rank").to_numpy()))
    at = np.empty(len(o), dtype=np.int64)
    at[o] = np.arange(len(o))
    merged = merged.take(pa.array(o))
    relinked = {c: pa.array(np.where(v >= 0, at[np.maximum(v, 0)], -1))
                for c in ("parent_id", "launch_id")
                for v in [merged.column(c).to_numpy().astype(np.int64)]}
    relinked["event_id"] = pa.array(np.arange(len(o), dtype=np.int64))
    for c, v in relinked.items():
        merged = merged.set_column(merged.schema.get_field_index(c), merged.schema.field(c), v)
    added = at[nb + np.arange(len(add))]
    mm = Matching(base=np.concatenate([at[m.base], added]), new=np.concatenate([m.new, add]),
                  n_base=merged.num_rows, n_new=nn)
    return Merged(events=merged, matching=mm, added=added, new_only_collectives=int(only.sum()))


def _transfer_tracks(ev: pa.Table) -> np.ndarray:
    """Per event: it runs on a host thread holding only collectives (a CPU backend's worker
    thread: the transfers)."""
    tr = ev.column("track").to_numpy(zero_copy_only=False).astype(str)
    coll = ev.column("coll_seq").fill_null(-1).to_numpy() >= 0
    coll &= ~ev.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    u, inv = np.unique(tr, return_inverse=True)
    inv = inv.reshape(-1)
    only = np.bincount(inv, weights=coll, minlength=len(u)) == np.bincount(inv, minlength=len(u))
    return only[inv] & coll


def _enqueue_times(ev: pa.Table, seq: np.ndarray, ts: np.ndarray, worker: np.ndarray
                   ) -> dict[tuple[int, str, int], float]:
    """(rank, process group, sequence number) → when the collective was enqueued: the earliest
    start of its instances off the worker threads."""
    rank = ev.column("rank").to_numpy().astype(np.int64)
    pg = ev.column("pg").to_numpy(zero_copy_only=False)
    out: dict[tuple[int, str, int], float] = {}
    for i in np.flatnonzero((seq >= 0) & ~worker & ev.column("pg").is_valid().to_numpy(
            zero_copy_only=False)).tolist():
        k = (int(rank[i]), str(pg[i]), int(seq[i]))
        out[k] = min(out.get(k, np.inf), float(ts[i]))
    return out


def _place_transfers(base: pa.Table, new: pa.Table, m: Matching, add: np.ndarray,
                     tracks: np.ndarray, t_start: np.ndarray, t_end: np.ndarray) -> None:
    """In place: NEW's added transfers on worker threads, placed by their enqueue. A worker
    thread takes collectives in no fixed order, so its matched neighbours say little about
    where an added transfer goes: it starts NEW's delay after its enqueue (mapped onto BASE's
    timeline), on the BASE worker thread of its rank where it keeps the enqueue order (a
    thread runs its transfers in the order they were enqueued, the same on every rank:
    otherwise the ranks' collectives would wait on each other), moved into that order's slot
    where NEW's delay would break it."""
    wn = _transfer_tracks(new)
    todo = np.flatnonzero(wn[add])
    if not len(todo):
        return
    wb = _transfer_tracks(base)
    seq_b = base.column("coll_seq").fill_null(-1).to_numpy().astype(np.int64)
    seq_n = m.new_seq if len(m.new_seq) else new.column("coll_seq").fill_null(-1).to_numpy()
    ts_b, ts_n = base.column("ts_us").to_numpy(), new.column("ts_us").to_numpy()
    enq = _enqueue_times(base, seq_b, ts_b, wb)
    enq_n = _enqueue_times(new, seq_n, ts_n, wn)
    # the added enqueues, at their mapped times
    rank_n = new.column("rank").to_numpy().astype(np.int64)
    pg_n = new.column("pg").to_numpy(zero_copy_only=False)
    for j in np.flatnonzero(~wn[add] & (seq_n[add] >= 0)).tolist():
        i = add[j]
        k = (int(rank_n[i]), str(pg_n[i]), int(seq_n[i]))
        enq[k] = min(enq.get(k, np.inf), float(t_start[j]))
    # per BASE worker thread: its transfers' (start, enqueue time)
    rank_b = base.column("rank").to_numpy().astype(np.int64)
    pg_b = base.column("pg").to_numpy(zero_copy_only=False)
    tr_b = base.column("track").to_numpy(zero_copy_only=False).astype(str)
    on: dict[str, list[tuple[float, float]]] = {}
    for i in np.flatnonzero(wb).tolist():
        k = (int(rank_b[i]), str(pg_b[i]), int(seq_b[i]))
        on.setdefault(tr_b[i], []).append((float(ts_b[i]), enq.get(k, float(ts_b[i]))))
    rank_of = {str(t): int(rank_b[i]) for t, i in zip(tr_b[wb].tolist(),
                                                       np.flatnonzero(wb).tolist())}
    keyed = []
    for j in todo.tolist():
        i = add[j]
        k = (int(rank_n[i]), str(pg_n[i]), int(seq_n[i]))
        e = enq.get(k)
        if e is None or not np.isfinite(e) or k not in enq_n:
            continue
        keyed.append((e, j, e + float(ts_n[i] - enq_n[k])))
    for e, j, t in sorted(keyed):
        r = int(rank_n[add[j]])
        best: tuple[float, str, float] | None = None
        for trk in sorted(t_ for t_, rr in rank_of.items() if rr == r):
            lst = on.get(trk, [])
            lo = max((s for s, q in lst if q <= e), default=-np.inf)
            hi = min((s for s, q in lst if q > e), default=np.inf)
            if lo >= hi:
                continue
            at = min(max(t, np.nextafter(lo, np.inf)), np.nextafter(hi, -np.inf))
            if best is None or abs(at - t) < best[0]:
                best = (abs(at - t), trk, at)
        if best is None:
            continue
        _, trk, at = best
        dur = t_end[j] - t_start[j]
        tracks[j], t_start[j], t_end[j] = trk, at, at + dur
        on.setdefault(trk, []).append((at, e))


# ---- the transplant ------------------------------------------------------------------------------

@dataclass
class Transplant:
    """Per BASE event: NEW's work duration where it carries over (nan elsewhere), for leaf costs
    and for self time; the BASE side's values for comparison."""

    cost_new: np.ndarray    # per BASE event: NEW's costed duration (leaves), nan if kept
    self_new: np.ndarray    # per BASE event: NEW's self time (ops with children), nan if kept
    cost_base: np.ndarray
    self_base: np.ndarray
    #: per BASE event: NEW's return latency of the wait on this collective (nan if kept)
    ret_new: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: per BASE event: NEW's dispatch latency of a CPU collective's transfer (enqueue → worker
    #: thread start), nan if kept
    disp_new: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: per BASE chain position: NEW's gap between the same two points (both events matched and
    #: consecutive on NEW's chain, not a wait in NEW), nan where NEW has no such gap
    gap_new: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: per BASE event: a ``ProfilerStep#`` (its gaps take NEW's only where NEW has the same
    #: gap; the rest of its self time, the loop's unmatched gaps, stays BASE's)
    loop: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: per BASE point: NEW's time of a host thread's first point (where recording of that
    #: thread began, after the trace's start), nan where kept
    base_new: np.ndarray = field(default_factory=lambda: np.zeros(0))


def cpu_transfers(p: Prepared) -> np.ndarray:
    """Matched collective instances run by a host worker thread (a CPU backend's transfer)."""
    is_dev = p.events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    on_chain = np.zeros(p.graph.n, dtype=bool)
    dev_pos = np.repeat(p.graph.track_is_device, np.diff(p.graph.track_ptr))
    on_chain[p.graph.order[dev_pos] // 2] = True
    return on_chain & ~is_dev & np.isfinite(p.graph.transfer_us)


def wait_returns(p: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """Per event: the edge index of the wait that returns when this collective transfer ends
    (a sync edge from its end into a host thread's chain), -1 for none; and that edge's lag."""
    g = p.graph
    n = g.n
    edge = np.full(n, -1, dtype=np.int64)
    pos = np.empty(2 * n, dtype=np.int64)
    pos[g.order] = np.arange(len(g.order))
    m = (g.etype == EDGE_CODE["sync"]) & (g.src_pt % 2 == 1)
    if m.any():
        m &= p.owners.host_gap[pos[g.dst_pt]] & np.isfinite(g.transfer_us[g.src_pt // 2])
    idx = np.flatnonzero(m)
    edge[g.src_pt[idx] // 2] = idx
    lag = np.where(edge >= 0, g.lag[np.maximum(edge, 0)], np.nan)
    return edge, lag


def _self_time(p: Prepared) -> np.ndarray:
    o = p.owners.owner
    own = p.owners.host_gap & ~waits(p) & (o >= 0)
    return np.bincount(o[own], weights=p.graph.gap[own], minlength=p.graph.n)


def waits(p: Prepared) -> np.ndarray:
    """Per chain position: its gap is a wait's return latency (a cross-track edge lands there
    and the gap is no longer than that edge's lag). A wait that returned at once, the thread
    busy until just before (lag 0), leaves the thread's own time in the gap: not a wait."""
    g = p.graph
    lag_in = np.full(len(g.order), -np.inf)
    if len(g.dst_pt):
        pos = np.empty(2 * g.n, dtype=np.int64)
        pos[g.order] = np.arange(len(g.order))
        np.maximum.at(lag_in, pos[g.dst_pt], g.lag)
    return p.owners.wait & (g.gap <= lag_in + 1e-9)


def _carries(p: Prepared) -> np.ndarray:
    """Events whose duration is work NEW may carry over: not sync calls or sync markers."""
    kind = p.events.column("kind").to_numpy(zero_copy_only=False).astype(str)
    syncs = np.isfinite(p.graph.sync_lag) | (kind == "sync")
    return ~syncs


def transplant(pb: Prepared, pn: Prepared, m: Matching) -> Transplant:
    n = pb.graph.n
    cost_b = total_cost(pb.comps)
    cost_n = total_cost(pn.comps)
    self_b, self_n = _self_time(pb), _self_time(pn)
    kind_b = pb.events.column("kind").to_numpy(zero_copy_only=False).astype(str)
    ok = _carries(pb)[m.base] & _carries(pn)[m.new]
    # a collective's transfer part carries over only where both sides have one
    coll_b = np.isfinite(pb.graph.transfer_us)[m.base]
    coll_n = np.isfinite(pn.graph.transfer_us)[m.new]
    ok &= coll_b == coll_n
    bi, ni = m.base[ok], m.new[ok]
    leaf = pb.leaf[bi] & pn.leaf[ni]
    c_new = np.full(n, np.nan)
    c_new[bi[leaf]] = cost_n[ni[leaf]]
    # self time of ops and of user annotations (the named regions' own time); the gaps
    # directly in a ProfilerStep (the loop between regions, data loading) stay BASE's
    is_step = pc.starts_with(pb.events.column("name"), "ProfilerStep#").fill_null(False)
    is_step = is_step.to_numpy(zero_copy_only=False).astype(bool)
    op = (kind_b[bi] != "instant") & ~pb.leaf[bi]
    s_new = np.full(n, np.nan)
    s_new[bi[op]] = self_n[ni[op]]
    # a CPU collective's completion reaching the waiting thread (its return latency) is part of
    # the collective, not a wait for peers: it carries over with the transfer
    _, ret_b = wait_returns(pb)
    _, ret_n = wait_returns(pn)
    r_new = np.full(n, np.nan)
    both = np.isfinite(ret_b[bi]) & np.isfinite(ret_n[ni])
    r_new[bi[both]] = ret_n[ni[both]]
    # likewise its dispatch to the backend's worker thread
    d_new = np.full(n, np.nan)
    cpu = cpu_transfers(pb)[bi] & cpu_transfers(pn)[ni]
    d_new[bi[cpu]] = pn.graph.ready_lag[ni[cpu]]
    return Transplant(cost_new=c_new, self_new=s_new, cost_base=cost_b, self_base=self_b,
                      ret_new=r_new, disp_new=d_new, gap_new=_gaps_new(pb, pn, m),
                      loop=is_step, base_new=_starts_new(pb, pn, m))


def _drop_base_only(pb: Prepared, tp: Transplant, m: Matching) -> int:
    """In place: where BASE issues collectives NEW does not (NEW sends one DDP bucket fewer),
    BASE's events without a partner take no time in the prediction (NEW does not run them):
    leaves cost 0, ops keep no self time, transfers are dispatched and waited on with no
    latency. Returns how many BASE collective events have no partner (0: nothing done)."""
    seq = pb.events.column("coll_seq").fill_null(-1).to_numpy()
    um = np.ones(pb.graph.n, dtype=bool)
    um[m.base] = False
    k = int(((seq >= 0) & um).sum())
    if k:
        tp.cost_new[um & pb.leaf] = 0.0
        tp.self_new[um & ~pb.leaf] = 0.0
        tp.ret_new[um] = 0.0
        tp.disp_new[um] = 0.0
    return k


def _starts_new(pb: Prepared, pn: Prepared, m: Matching) -> np.ndarray:
    """Per BASE point: where NEW's partner of a host thread's first point lies after NEW's
    start, where that partner is its thread's first point too; nan elsewhere. When each rank
    began recording (the steps before the first recorded one, process start-up) is measured,
    like a gap: NEW's offsets replace BASE's."""
    gb, gn = pb.graph, pn.graph
    out = np.full(2 * gb.n, np.nan)
    if not len(m.base):
        return out

    def firsts(g: Graph) -> np.ndarray:
        tp = g.track_ptr[:-1]
        keep = (tp < g.track_ptr[1:]) & ~g.track_is_device
        return g.order[tp[keep]]

    fb, fn = firsts(gb), firsts(gn)
    new_of = np.full(gb.n, -1, dtype=np.int64)
    new_of[m.base] = m.new
    fb = fb[(fb % 2 == 0) & (new_of[fb // 2] >= 0)]
    partner = 2 * new_of[fb // 2]
    ok = np.isin(partner, fn) & np.isfinite(gb.base[fb])
    out[fb[ok]] = gn.base[partner[ok]]
    # stream-like tracks (devices, worker threads) start no earlier than their rank's first
    # event: NEW's rank start
    rb = pb.events.column("rank").to_numpy().astype(np.int64)
    rn = pn.events.column("rank").to_numpy().astype(np.int64)
    t_b = pb.events.column("ts_us").to_numpy() - gb.t0
    t_n = pn.events.column("ts_us").to_numpy() - gn.t0
    nr = int(max(rb.max(initial=-1), rn.max(initial=-1))) + 1
    s_b, s_n = np.full(nr, np.inf), np.full(nr, np.inf)
    np.minimum.at(s_b, rb, t_b)
    np.minimum.at(s_n, rn, t_n)
    tp = gb.track_ptr[:-1]
    keep = (tp < gb.track_ptr[1:]) & gb.track_is_device
    fd = gb.order[tp[keep]]
    r = rb[fd // 2]
    at = np.isfinite(s_n[r]) & (gb.base[fd] == s_b[r])
    out[fd[at]] = s_n[r[at]]
    return out


def _gaps_new(pb: Prepared, pn: Prepared, m: Matching) -> np.ndarray:
    """Per BASE chain position: NEW's measured gap between the NEW partners of the two points
    that bound it, where both are matched and consecutive on NEW's chain and NEW did not wait
    there (a cross-track edge lands on it); nan elsewhere. Self time moves where NEW spent it:
    a thread descheduled while an asynchronous collective ran loses that time in the same
    place, not spread over the op's other gaps (some of which lie after the wait)."""
    gb, gn = pb.graph, pn.graph
    npos = len(gb.order)
    out = np.full(npos, np.nan)
    if npos < 2 or not len(m.base):
        return out
    new_of = np.full(gb.n, -1, dtype=np.int64)
    new_of[m.base] = m.new
    pos_n = np.empty(2 * gn.n, dtype=np.int64)
    pos_n[gn.order] = np.arange(len(gn.order))
    starts_n = np.zeros(len(gn.order), dtype=bool)
    starts_n[gn.track_ptr[:-1][gn.track_ptr[:-1] < len(gn.order)]] = True
    p = gb.order[1:]
    q = gb.order[:-1]
    ok = (new_of[p // 2] >= 0) & (new_of[q // 2] >= 0)
    kn = np.where(ok, pos_n[2 * np.maximum(new_of[p // 2], 0) + p % 2], 0)
    qn = np.where(ok, pos_n[2 * np.maximum(new_of[q // 2], 0) + q % 2], 0)
    ok &= (kn == qn + 1) & ~starts_n[kn] & pn.owners.host_gap[kn] & ~waits(pn)[kn]
    k = np.flatnonzero(ok) + 1
    out[k] = gn.gap[kn[ok]]
    return out


def apply_transplant(pb: Prepared, tp: Transplant, mask: np.ndarray
                     ) -> tuple[object, dict[str, np.ndarray]]:
    """BASE's graph and costs with NEW's durations on the events in ``mask``."""
    lm = mask & np.isfinite(tp.cost_new)
    ids = np.flatnonzero(lm)
    comps = set_durations(pb.events, pb.comps, ids, tp.cost_new[ids])
    sm = mask & np.isfinite(tp.self_new)
    gap = pb.graph.gap.astype(np.float64, copy=True)
    o = pb.owners.owner
    own = pb.owners.host_gap & ~waits(pb) & (o >= 0)
    own &= sm[np.where(o >= 0, o, 0)]
    pos = np.flatnonzero(own)
    ev = o[pos]
    # gaps NEW has between the same two points take NEW's value; the rest of NEW's self time
    # scales the op's other gaps
    placed = np.isfinite(tp.gap_new[pos]) if len(tp.gap_new) else np.zeros(len(pos), dtype=bool)
    n_ev = pb.graph.n
    placed_new = np.bincount(ev[placed], weights=tp.gap_new[pos[placed]], minlength=n_ev)
    placed_base = np.bincount(ev[placed], weights=gap[pos[placed]], minlength=n_ev)
    rest_base = tp.self_base - placed_base
    rest_new = np.maximum(np.nan_to_num(tp.self_new) - placed_new, 0.0)
    rb = rest_base[ev]
    k = np.where(rb > 1e-9, rest_new[ev] / np.where(rb > 1e-9, rb, 1.0), 1.0)
    if len(tp.loop):
        k = np.where(tp.loop[ev], 1.0, k)
    gap[pos] = np.where(placed, tp.gap_new[pos] if len(tp.gap_new) else 0.0, gap[pos] * k)
    # ops with no self time in BASE but some in NEW: the time goes before their end point
    grow = np.flatnonzero(sm & (tp.self_base <= 0) & (tp.self_new > 0))
    if len(grow):
        ppos = np.empty(2 * pb.graph.n, dtype=np.int64)
        ppos[pb.graph.order] = np.arange(len(pb.graph.order))
        p_end = ppos[2 * grow + 1]
        okp = pb.owners.host_gap[p_end]
        gap[p_end[okp]] += tp.self_new[grow[okp]]
    g = pb.graph
    lag = g.lag
    rm = mask & np.isfinite(tp.ret_new)
    if rm.any():
        edge, _ = wait_returns(pb)
        ids = np.flatnonzero(rm & (edge >= 0))
        lag = lag.copy()
        lag[edge[ids]] = tp.ret_new[ids]
        ppos = np.empty(2 * g.n, dtype=np.int64)
        ppos[g.order] = np.arange(len(g.order))
        dpos = ppos[g.dst_pt[edge[ids]]]
        # a wait seen in BASE kept only its return latency as the gap: NEW's replaces it; an
        # unseen one (the thread was busy, lag 0) keeps the thread's own gap
        seen = gap[dpos] <= g.lag[edge[ids]] + 1e-9
        gap[dpos] = np.where(seen, tp.ret_new[ids], gap[dpos])
    ready_lag = g.ready_lag
    dm = np.flatnonzero(mask & np.isfinite(tp.disp_new))
    if len(dm):
        ready_lag = ready_lag.copy()
        ready_lag[dm] = tp.disp_new[dm]
        lag = lag.copy() if lag is g.lag else lag
        into = (g.etype == EDGE_CODE["launch"]) & np.isin(g.dst_pt, 2 * dm)
        lag[into] = ready_lag[g.dst_pt[into] // 2]
    base = g.base
    if len(tp.base_new):
        mine = np.isfinite(tp.base_new) & np.repeat(mask, 2)
        if mine.any():
            base = np.where(mine, tp.base_new, g.base)
    return dataclasses.replace(g, gap=gap, lag=lag, ready_lag=ready_lag, base=base), comps


# ---- groups and the diff -----------------------------------------------------------------------

def group_labels(p: Prepared, by: str) -> np.ndarray:
    """Per event: its attribution group under ``by`` (`DIFF_GROUP_BY`)."""
    ev = p.events
    names = ev.column("name").to_numpy(zero_copy_only=False).astype(object)
    rank = ev.column("rank").to_numpy()
    if by == "kind":
        return ev.column("kind").to_numpy(zero_copy_only=False).astype(object)
    if by == "name":
        return names
    if by == "rank":
        return np.array([f"rank {r}" for r in rank.tolist()], dtype=object)
    scope = outer_scope(p)
    if by == "rank-scope":
        return np.array([f"rank {r}: {s}" for r, s in zip(rank.tolist(), scope.tolist())],
                        dtype=object)
    return scope


def outer_scope(p: Prepared) -> np.ndarray:
    """Per event: the name of its outermost user annotation below ``ProfilerStep#`` (device work:
    its launcher's), ``(outside annotations)`` when none."""
    ev = p.events
    names = ev.column("name").to_numpy(zero_copy_only=False).astype(object)
    kind = ev.column("kind").to_numpy(zero_copy_only=False).astype(str)
    parent = ev.column("parent_id").to_numpy()
    is_step = pc.starts_with(ev.column("name"), "ProfilerStep#").fill_null(False).to_numpy(
        zero_copy_only=False).astype(bool)
    is_ann = (kind == "annotation") & ~is_step
    n = ev.num_rows
    scope = np.full(n, -1, dtype=np.int64)
    scope[is_ann] = np.flatnonzero(is_ann)
    cur = parent.copy()
    for _ in range(int(ev.column("depth").to_numpy().max(initial=0)) + 1):
        ok = cur >= 0
        if not ok.any():
            break
        c = np.where(ok, cur, 0)
        hit = ok & is_ann[c]
        scope[hit] = c[hit]   # keeps climbing: the outermost annotation wins
        cur = np.where(ok, parent[c], -1)
    lau = launcher(ev, p.graph)
    hl = (lau >= 0) & (scope < 0)
    scope[hl] = scope[lau[hl]]
    out = np.full(n, "(outside annotations)", dtype=object)
    out[scope >= 0] = names[scope[scope >= 0]]
    return out


@dataclass
class DiffResult:
    base_step_us: float
    new_step_us: float
    base_replayed_us: float
    predicted_step_us: float
    matched_fraction: float
    matched: int
    unmatched_base: Counter
    unmatched_new: Counter
    contributions: list[tuple[str, float]]
    scheme: str
    group_by: str
    notes: dict[str, object] = field(default_factory=dict)
    #: per step (the k-th step of BASE with the k-th of NEW; mean over ranks, us): measured
    #: BASE, measured NEW, predicted NEW
    base_steps: list[float] = field(default_factory=list)
    new_steps: list[float] = field(default_factory=list)
    predicted_steps: list[float] = field(default_factory=list)

    @property
    def error(self) -> float:
        return (self.predicted_step_us - self.new_step_us) / self.new_step_us \
            if self.new_step_us else 0.0

    @property
    def step_errors(self) -> list[float]:
        """Per step: (predicted NEW − measured NEW) / measured NEW."""
        return [(p - m) / m if m else 0.0 for p, m in zip(self.predicted_steps, self.new_steps)]

    @property
    def base_spread_us(self) -> float:
        """Step-to-step spread of measured BASE: the standard deviation over its steps."""
        return _spread(self.base_steps)

    @property
    def new_spread_us(self) -> float:
        return _spread(self.new_steps)

    @property
    def noise_us(self) -> float:
        """Two standard errors of the difference of the two runs' mean steps: a change of the
        mean smaller than this is within the measured step-to-step noise (about 95%)."""
        nb, nn = len(self.base_steps), len(self.new_steps)
        if nb < 2 or nn < 2:
            return 0.0
        return 2.0 * float(np.sqrt(self.base_spread_us ** 2 / nb + self.new_spread_us ** 2 / nn))

    @property
    def change_within_noise(self) -> bool:
        """The predicted change (predicted NEW − replayed BASE) is within `noise_us`."""
        return abs(self.predicted_step_us - self.base_replayed_us) <= self.noise_us

    def to_dict(self) -> dict[str, object]:
        return {
            "base_step_us": self.base_step_us, "new_step_us": self.new_step_us,
            "predicted_step_us": self.predicted_step_us, "error": self.error,
            "base_replayed_step_us": self.base_replayed_us,
            "predicted_change_us": self.predicted_step_us - self.base_replayed_us,
            "matched_fraction": self.matched_fraction, "matched_events": self.matched,
            "unmatched_base": dict(self.unmatched_base.most_common()),
            "unmatched_new": dict(self.unmatched_new.most_common()),
            "attribution": {"scheme": self.scheme, "group_by": self.group_by,
                            "sums_to": "predicted_step_us - base_replayed_step_us"},
            "contributions": [{"group": g, "delta_us": d} for g, d in self.contributions],
            "steps": [{"base_us": b, "new_us": n, "predicted_us": p, "error": e}
                      for b, n, p, e in zip(self.base_steps, self.new_steps,
                                            self.predicted_steps, self.step_errors)],
            "base_spread_us": self.base_spread_us, "new_spread_us": self.new_spread_us,
            "noise_us": self.noise_us, "change_within_noise": self.change_within_noise,
            "notes": self.notes,
        }


def _spread(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def per_step(events: pa.Table, g: Graph, times: np.ndarray) -> list[float]:
    """Mean over ranks of each whole step's time (``times``: per (rank, step) window, in the
    order of `window_times`), steps in order."""
    steps = window_spans(events, g).step
    steps = steps[_whole_steps(steps)]
    if len(steps) != len(times):
        return []
    u, inv = np.unique(steps, return_inverse=True)
    tot = np.bincount(inv, weights=times, minlength=len(u))
    cnt = np.bincount(inv, minlength=len(u))
    return (tot / np.maximum(cnt, 1)).tolist()


def check_same_program(base: pa.Table, new: pa.Table, m: Matching, labels: tuple[str, str]) -> None:
    rb = set(base.column("rank").to_numpy().tolist())
    rn = set(new.column("rank").to_numpy().tolist())
    if rb != rn:
        raise UsageError(f"{labels[1]}: ranks {sorted(rn)} differ from {labels[0]}'s {sorted(rb)}; "
                         "diff compares two traces of the same program and world size")
    if m.fraction < MIN_MATCHED:
        raise UsageError(
            f"{labels[1]}: only {m.fraction:.0%} of events match {labels[0]} by name sequence; "
            "these look like different programs: diff needs two traces of the same program "
            "(to compare runs of different traces, replay both and use `mtia-trace compare`)")


def diff_traces(base: pa.Table, new: pa.Table, *, group_by: str = "scope",
                labels: tuple[str, str] = ("BASE", "NEW"), max_groups: int = 16) -> DiffResult:
    """The causal diff of BASE and NEW (module docstring)."""
    m = match_events(base, new)
    check_same_program(base, new, m, labels)
    p_base, pn = prepare(base), prepare(new)
    base_meas = measured_step_times(base, p_base.graph)
    new_meas = measured_step_times(new, pn.graph)
    base_rep = p_base.step_mean()
    # where NEW issues collectives BASE does not, the prediction replays BASE's events plus
    # NEW's unmatched ones (their dependencies from NEW: `with_new_only`)
    mg = with_new_only(base, new, m)
    pb, mt = (p_base, m) if mg is None else (prepare(mg.events), mg.matching)
    added = np.zeros(pb.graph.n, dtype=bool)
    if mg is not None:
        added[mg.added] = True
    tp = transplant(pb, pn, mt)
    base_only = _drop_base_only(pb, tp, mt)
    # sequential attribution over groups, largest busy-time change first: the prediction with
    # everything transplanted and with each prefix of the groups, all in one pass
    lab = group_labels(pb, group_by)
    dc = np.nan_to_num(tp.cost_new - tp.cost_base) * pb.leaf
    ds = np.nan_to_num(tp.self_new - tp.self_base)
    delta = dc + ds
    touched = (np.isfinite(tp.cost_new) | np.isfinite(tp.self_new)) & ~added
    u, inv = np.unique(lab[touched].astype(str), return_inverse=True)
    dsum = np.bincount(inv, weights=np.abs(delta[touched]), minlength=len(u))
    order = np.argsort(-dsum, kind="stable")
    keep = [u[i] for i in order[:max_groups]]
    rest = [u[i] for i in order[max_groups:]]
    lab_s = lab.astype(str)
    # the events only NEW has come first (with NEW's durations: they have no others)
    steps = [(NEW_ONLY_GROUP, added)] if added.any() else []
    steps += [(g, np.isin(lab_s, [g])) for g in keep]
    if rest:
        steps.append((f"(other {len(rest)} groups)", np.isin(lab_s, rest)))
    full = np.ones(pb.graph.n, dtype=bool)
    masks: list[np.ndarray | None] = []
    mask = np.zeros(pb.graph.n, dtype=bool)
    for i, (_, gm) in enumerate(steps):
        mask = mask | gm
        masks.append(None if mask.all() or i == len(steps) - 1 else mask)
    todo = [full, *(mk for mk in masks if mk is not None)]
    times = iter(pb.step_times_many(
        (apply_transplant(pb, tp, mk) for mk in todo), len(todo)))  # type: ignore[misc]
    pred_times = next(times)
    predicted = float(pred_times.mean()) if len(pred_times) else 0.0
    steps_b = per_step(base, p_base.graph, base_meas)
    steps_n = per_step(new, pn.graph, new_meas)
    steps_p = per_step(pb.events, pb.graph, pred_times)
    k = min(len(steps_b), len(steps_n), len(steps_p))
    contributions: list[tuple[str, float]] = []
    prev = base_rep
    for (gname, _), mk in zip(steps, masks):
        if mk is None:
            cur = predicted
        else:
            t = next(times)
            cur = float(t.mean()) if len(t) else 0.0
        contributions.append((gname, cur - prev))
        prev = cur
    contributions.sort(key=lambda t: -abs(t[1]))
    notes: dict[str, object] = {"base_steps": int(len(base_meas)), "new_steps": int(len(new_meas)),
             "transplanted_costs": int(np.isfinite(tp.cost_new).sum()),
             "transplanted_self_times": int(np.isfinite(tp.self_new).sum())}
    if base_only:
        notes["base_only_collective_events"] = base_only
    if mg is not None:  # collectives only NEW issues (another DDP bucket), replayed
        notes["new_only_collective_events"] = mg.new_only_collectives
        notes["new_only_events_added"] = int(len(mg.added))
    return DiffResult(
        base_step_us=float(base_meas.mean()) if len(base_meas) else 0.0,
        new_step_us=float(new_meas.mean()) if len(new_meas) else 0.0,
        base_replayed_us=base_rep, predicted_step_us=predicted,
        matched_fraction=m.fraction, matched=int(len(m.base)),
        unmatched_base=m.unmatched_base, unmatched_new=m.unmatched_new,
        contributions=contributions, scheme="sequential", group_by=group_by, notes=notes,
        base_steps=steps_b, new_steps=steps_n,
        predicted_steps=steps_p[:k] if len(steps_n) == len(steps_b) else [])
