"""Op-level what-ifs: ``--whatif SELECTOR:CHANGE`` edits costs before scheduling (DESIGN §11).

A what-if names a set of events and a change to their duration. The change is applied, all at
once over arrays, to what the scheduler consumes: the events' cost components and, on host
threads, the self time of the selected ops (the measured gaps *inside* an op are the op's own
work in a CPU trace). Nothing else moves: dependencies, Python gaps between ops, ready lags and
waits for peers come back out of the graph.

Selector: comma-separated terms, all of which must hold (``|`` separates alternatives):

- ``kind=gemm|embedding``      the event's kind (schema.KINDS)
- ``name=aten::mm``            name, shell glob (``*``, ``?``); ``name=/regex/`` searches
- ``rank=3``, ``rank=0-3``     rank (ranges and alternatives); ``step=2`` likewise
- ``stream=7``                 device stream; ``thread=1234`` host thread id
- ``track=dev:0:*``            the track string, glob
- ``scope=backward``           inside a user annotation whose name matches (device work:
                               launched from inside it)
- ``launched_by=cudaLaunch*``  device work launched by a host event whose name matches
- a bare term without ``=`` is a name glob; ``*`` (or ``all``) selects everything.

Change (after the last ``:``): ``x0.5`` (scale), ``-20%`` / ``+10%`` (percent), ``=120us``
(set), ``+5ms`` / ``-2ms`` (add; us, ms or s, clamped at zero).

What a change touches: a scale applies to the selected events, everything nested in them and
the device work they launch (so ``name=data_wait:x0.5`` halves the whole region, self time
included). A runtime call selected on its own (``kind=runtime``, ``name=cudaLaunchKernel``) is
its own cost only: the kernel it launches is other work (select it with ``launched_by=``); inside
a selected op, the op's launches come with it. A set or an add applies to each selected event's own duration: a leaf's or device
event's cost; a selected op with children has its inside scaled to the new duration (set), or
the time added to its trailing self time (add).

Example: rank 3's embedding backward 2x faster:
``--whatif 'rank=3,kind=embedding,scope=*backward*:x0.5'``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.errors import UsageError
from mtia_trace.schema import COMM_KINDS
from replay.costs import COMPONENTS
from replay.graph import EDGE_CODE, Graph

SELECTOR_KEYS = ("kind", "name", "rank", "step", "stream", "thread", "track", "scope",
                 "launched_by")
_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}
_WHATIF_HELP = ("expected SELECTOR:CHANGE, e.g. 'rank=3,kind=embedding:x0.5', "
                "'name=aten::mm:-20%', 'scope=data_wait:=0us', 'kind=gemm:+5ms'")


@dataclass(frozen=True)
class Change:
    """A change to a duration: ``op`` scale (value = factor), set or add (value in us)."""

    op: Literal["scale", "set", "add"]
    value: float

    def apply(self, d: np.ndarray) -> np.ndarray:
        if self.op == "scale":
            return d * self.value
        if self.op == "set":
            return np.full_like(d, self.value, dtype=np.float64)
        return np.maximum(d + self.value, 0.0)

    def __str__(self) -> str:
        if self.op == "scale":
            return f"x{self.value:g}"
        return f"{'=' if self.op == 'set' else '+' if self.value >= 0 else ''}{self.value:g}us"


@dataclass(frozen=True)
class WhatIf:
    """One ``SELECTOR:CHANGE``: the terms (key, alternatives) and the change."""

    text: str
    terms: tuple[tuple[str, tuple[str, ...]], ...]
    change: Change


def parse_change(text: str, whole: str) -> Change:
    t = text.strip().replace(" ", "")
    try:
        if t[:1] in "xX*":
            v = float(t[1:])
            if v < 0:
                raise ValueError
            return Change("scale", v)
        if t.endswith("%"):
            v = float(t[:-1])
            if v < -100:
                raise ValueError
            return Change("scale", 1.0 + v / 100.0)
        m = re.fullmatch(r"([=+-])([0-9.eE+-]+)(us|ms|s)", t)
        if m:
            v = float(m.group(2)) * _UNITS[m.group(3)]
            if m.group(1) == "=":
                if v < 0:
                    raise ValueError
                return Change("set", v)
            return Change("add", -v if m.group(1) == "-" else v)
    except ValueError:
        pass
    raise UsageError(f"--whatif {whole!r}: cannot read the change {text!r}; use x0.5, -20%, "
                     "=120us or +5ms (a factor >= 0, a percent >= -100, a time in us/ms/s)")


def parse_whatif(text: str) -> WhatIf:
    """``'rank=3,kind=embedding:x0.5'`` → `WhatIf` (one-line `UsageError` when malformed)."""
    sel, sep, chg = text.rpartition(":")
    if not sep or not sel.strip() or not chg.strip():
        raise UsageError(f"--whatif {text!r}: {_WHATIF_HELP}")
    change = parse_change(chg, text)
    terms: list[tuple[str, tuple[str, ...]]] = []
    if sel.strip() not in ("*", "all"):
        for raw in _split_terms(sel):
            key, eq, val = raw.partition("=")
            key, val = (key.strip(), val.strip()) if eq else ("name", raw.strip())
            if key not in SELECTOR_KEYS:
                raise UsageError(f"--whatif {text!r}: unknown selector {key!r}; use one of "
                                 f"{', '.join(SELECTOR_KEYS)}")
            alts = tuple(a for a in val.split("|") if a) if not val.startswith("/") else (val,)
            if not alts:
                raise UsageError(f"--whatif {text!r}: {key}= has no value; {_WHATIF_HELP}")
            if key in ("rank", "step", "stream", "thread"):
                for a in alts:
                    if not re.fullmatch(r"-?\d+(--?\d+)?", a):
                        raise UsageError(f"--whatif {text!r}: {key}={a!r} is not an integer or "
                                         f"a range like 0-3")
            if key in ("name", "scope", "track", "launched_by") and alts[0].startswith("/"):
                pat = alts[0].strip("/")
                try:
                    re.compile(pat)
                except re.error as exc:
                    raise UsageError(f"--whatif {text!r}: bad regex /{pat}/ ({exc}); "
                                     "write it as name=/REGEX/") from None
            terms.append((key, alts))
    return WhatIf(text=text, terms=tuple(terms), change=change)


def _split_terms(sel: str) -> list[str]:
    """Split on commas outside a /regex/."""
    out, cur, in_re = [], "", False
    for ch in sel:
        if ch == "/" and (cur.endswith("=") or in_re):
            in_re = not in_re
        if ch == "," and not in_re:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [t for t in (s.strip() for s in out) if t]


def parse_whatifs(items: list[str] | None) -> list[WhatIf]:
    return [parse_whatif(t) for t in items or []]


# ---- selection -----------------------------------------------------------------------------------

def encode(col: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A string column as (its distinct values, per row the index of its value, -1 null)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    enc = pc.dictionary_encode(arr)
    return enc.dictionary, enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)


def _match_strings(col: pa.ChunkedArray | pa.Array, alts: tuple[str, ...],
                   enc: tuple[pa.Array, np.ndarray] | None = None) -> np.ndarray:
    """Glob (or one /regex/) over a string column, matched once per distinct value (``enc``:
    the column's `encode`, when read already)."""
    if len(col) == 0:
        return np.zeros(0, dtype=bool)
    values, idx = enc if enc is not None else encode(col)
    if alts[0].startswith("/"):
        rx = alts[0].strip("/")
    else:
        rx = "|".join(f"(?:{glob_regex(a)})" for a in alts)
    hit = pc.match_substring_regex(values, rx).fill_null(False)
    hit_np = np.append(hit.to_numpy(zero_copy_only=False).astype(bool), False)
    return hit_np[idx]


def glob_regex(glob: str) -> str:
    """A shell glob as an anchored RE2 regex (``*``, ``?``, ``[...]``; everything else literal)."""
    out, i = ["^"], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and "]" in glob[i + 2:] or glob[i:i + 2] == "[]":
            j = glob.index("]", i + 2) if glob[i + 1:i + 2] in ("]", "!") else glob.index("]", i + 1)
            body = glob[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            neg = body.startswith("^")
            body = body[1:] if neg else body
            body = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
            out.append("[" + ("^" if neg else "") + body + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out) + "$"


def _match_ints(values: np.ndarray, alts: tuple[str, ...]) -> np.ndarray:
    m = np.zeros(len(values), dtype=bool)
    for a in alts:
        lo, dash, hi = a.partition("-") if not a.startswith("-") else (a, "", "")
        if dash:
            m |= (values >= int(lo)) & (values <= int(hi))
        else:
            m |= values == int(a)
    return m


def launcher(events: pa.Table, g: Graph) -> np.ndarray:
    """Per event: the host event that launched it (launch edges: runtime call → kernel, CPU
    collective enqueue → transfer), -1 for none."""
    out = np.full(g.n, -1, dtype=np.int64)
    m = g.etype == EDGE_CODE["launch"]
    out[g.dst_pt[m] // 2] = g.src_pt[m] // 2
    return out


@dataclass
class TraceIndex:
    """What selecting reads of a trace (`select`, `nested`), read once for callers that
    select many times."""

    parent: np.ndarray     # per event: its parent row, 0 where it has none (see has_parent)
    has_parent: np.ndarray
    levels: int            # the most nesting levels to follow
    runtime: np.ndarray    # per event: a runtime call
    launcher: np.ndarray   # per event: `launcher`
    strings: dict[str, tuple[pa.Array, np.ndarray]]  # `encode` of string columns, as read

    def encoded(self, events: pa.Table, col: str) -> tuple[pa.Array, np.ndarray]:
        if col not in self.strings:
            self.strings[col] = encode(events.column(col))
        return self.strings[col]


def trace_index(events: pa.Table, g: Graph) -> TraceIndex:
    parent = events.column("parent_id").to_numpy()
    has_p = parent >= 0
    return TraceIndex(parent=np.where(has_p, parent, 0), has_parent=has_p,
                      levels=int(events.column("depth").to_numpy().max(initial=0)) + 1,
                      runtime=events.column("kind").to_numpy(zero_copy_only=False) == "runtime",
                      launcher=launcher(events, g), strings={})


def nested(events: pa.Table, g: Graph, seed: np.ndarray,
           index: TraceIndex | None = None) -> np.ndarray:
    """``seed`` plus everything nested in it (host) and the work launched from there. A runtime
    call in ``seed`` whose parent is not selected launches nothing selected: a launch call's own
    cost is not its kernel's (``launched_by=`` selects those). ``index``: `trace_index` of the
    trace, when read already."""
    t = index if index is not None else trace_index(events, g)
    m = seed.copy()
    has_p, p = t.has_parent, t.parent
    for _ in range(t.levels):
        nxt = m | (has_p & m[p])
        if np.array_equal(nxt, m):
            break
        m = nxt
    own_only = t.runtime & ~(has_p & m[p])
    lau = t.launcher
    has_l = lau >= 0
    li = np.where(has_l, lau, 0)
    m |= has_l & m[li] & ~own_only[li]
    return m


def select(events: pa.Table, g: Graph, w: WhatIf, index: TraceIndex | None = None) -> np.ndarray:
    """Boolean mask of the events the selector names (``index``: `trace_index`, when read)."""

    def enc(col: str) -> tuple[pa.Array, np.ndarray] | None:
        return index.encoded(events, col) if index is not None else None

    n = events.num_rows
    m = np.ones(n, dtype=bool)
    for key, alts in w.terms:
        if key in ("kind", "name", "track"):
            m &= _match_strings(events.column(key), alts, enc(key))
        elif key in ("rank", "step", "stream"):
            m &= _match_ints(events.column(key).to_numpy(), alts)
        elif key == "thread":
            tid = pc.extract_regex(events.column("track"), r"^host:[^:]*:(?P<tid>-?\d+)$")
            tids = pc.struct_field(tid, [0]).to_numpy(zero_copy_only=False)
            tnum = np.array([int(t) if t is not None else -(1 << 62) for t in tids],
                            dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
            m &= _match_ints(tnum, alts)
        elif key == "scope":
            ann = _match_strings(events.column("name"), alts, enc("name"))
            ann &= (events.column("kind").to_numpy(zero_copy_only=False) == "annotation")
            ann &= ~events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
            m &= nested(events, g, ann, index) & ~ann
        elif key == "launched_by":
            hit = _match_strings(events.column("name"), alts, enc("name"))
            lau = index.launcher if index is not None else launcher(events, g)
            m &= (lau >= 0) & hit[np.where(lau >= 0, lau, 0)]
    return m


# ---- the edit ------------------------------------------------------------------------------------

@dataclass
class ChainOwners:
    """Per chain position of a host track: the innermost event open over the gap before it
    (-1 none), and whether the gap is a wait (a cross-track edge lands there: its length is a
    return latency, not work)."""

    owner: np.ndarray
    wait: np.ndarray
    host_gap: np.ndarray  # positions whose gap the scheduler uses (host tracks, not leaf ends)


def chain_owners(events: pa.Table, g: Graph) -> ChainOwners:
    order = g.order
    npos = len(order)
    parent = events.column("parent_id").to_numpy()
    prev = np.empty(npos, dtype=np.int64)
    prev[1:] = order[:-1]
    prev[0] = 0
    owner = np.where(prev % 2 == 0, prev // 2, parent[prev // 2])
    starts = g.track_ptr[:-1][g.track_ptr[:-1] < npos]
    owner[starts] = -1
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    host_gap = ~dev_pos & ~g.leaf_end
    host_gap[starts] = False
    pos = np.empty(2 * g.n, dtype=np.int64)
    pos[order] = np.arange(npos)
    wait = np.zeros(npos, dtype=bool)
    if len(g.dst_pt):
        wait[pos[g.dst_pt]] = True
    owner[~host_gap] = -1
    return ChainOwners(owner=owner, wait=wait & host_gap, host_gap=host_gap)


def leaf_mask(events: pa.Table, g: Graph) -> np.ndarray:
    """Events whose own duration the scheduler uses: leaves of host chains and stream work."""
    leaf = np.zeros(g.n, dtype=bool)
    leaf[g.order[g.leaf_end] // 2] = True
    dev_pos = np.repeat(g.track_is_device, np.diff(g.track_ptr))
    leaf[g.order[dev_pos] // 2] = True
    return leaf


def total_cost(comps: dict[str, np.ndarray], ids: np.ndarray | None = None) -> np.ndarray:
    """Sum of the cost components per event (of ``ids`` when given)."""
    parts = [comps[c] if ids is None else comps[c][ids] for c in COMPONENTS]
    out = np.zeros_like(parts[0], dtype=np.float64)
    for part in parts:
        out = out + part
    return out


@dataclass
class Edited:
    """Costs and chain gaps after what-ifs, ready to schedule; ``notes`` per what-if."""

    graph: Graph
    comps: dict[str, np.ndarray]
    notes: list[dict[str, object]]


def _main_component(events: pa.Table) -> np.ndarray:
    """Index into COMPONENTS that a zero-cost event's new time goes to."""
    kind = events.column("kind").to_numpy(zero_copy_only=False).astype(str)
    is_dev = events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    out = np.full(len(kind), COMPONENTS.index("host"), dtype=np.int64)
    out[is_dev] = COMPONENTS.index("compute")
    out[np.isin(kind, COMM_KINDS)] = COMPONENTS.index("collective")
    return out


def set_durations(events: pa.Table, comps: dict[str, np.ndarray], ids: np.ndarray,
                  new: np.ndarray) -> dict[str, np.ndarray]:
    """Costs of ``ids`` set to ``new`` (us), split like their current components."""
    out = {c: v.copy() for c, v in comps.items()}
    if not len(ids):
        return out
    tot = total_cost(comps, ids)
    pos = tot > 0
    k = np.where(pos, new / np.where(pos, tot, 1.0), 0.0)
    for c in COMPONENTS:
        out[c][ids] = comps[c][ids] * k
    z = ids[~pos]
    if len(z):
        main = _main_component(events)[z]
        for j, c in enumerate(COMPONENTS):
            mj = main == j
            out[c][z[mj]] = new[~pos][mj]
    return out


def apply_whatifs(events: pa.Table, g: Graph, comps: dict[str, np.ndarray],
                  whatifs: list[WhatIf], *, strict: bool = True,
                  owners: ChainOwners | None = None, leaf: np.ndarray | None = None) -> Edited:
    """Apply ``whatifs`` in order to costs ``comps`` (per component, per event) and to the host
    chain gaps of ``g``. ``strict``: a what-if that selects nothing is an error (a typo).
    ``owners`` and ``leaf`` (`chain_owners`, `leaf_mask` of ``events`` and ``g``) are computed
    when not given; callers making many predictions pass them once."""
    comps = {c: np.asarray(v, dtype=np.float64).copy() for c, v in comps.items()}
    if not whatifs:
        return Edited(g, comps, [])
    own = owners if owners is not None else chain_owners(events, g)
    leaf = leaf if leaf is not None else leaf_mask(events, g)
    gap = g.gap.astype(np.float64, copy=True)
    mdur = events.column("dur_us").to_numpy()
    notes: list[dict[str, object]] = []
    for w in whatifs:
        sel = select(events, g, w)
        if strict and not sel.any():
            raise UsageError(f"--whatif {w.text!r}: selects no event; check names and kinds "
                             "with `mtia-trace inspect TRACE` (names are case-sensitive globs)")
        before = float(sum(comps[c][sel & leaf].sum() for c in COMPONENTS))
        ch = w.change
        if ch.op == "scale":
            k = np.where(nested(events, g, sel), ch.value, 1.0)
        else:
            k = np.ones(g.n)
            cont = sel & ~leaf
            if ch.op == "set" and cont.any():
                ratio = np.where(mdur > 0, ch.value / np.where(mdur > 0, mdur, 1.0), 0.0)
                kk = np.where(cont, ratio, 1.0)
                # the inside of each selected container scales with it (outermost wins)
                k = _spread(events, g, kk, cont)
            ids = np.flatnonzero(sel & leaf)
            tot = total_cost(comps, ids)
            comps = set_durations(events, comps, ids, ch.apply(tot))
            if ch.op == "add" and cont.any():
                _add_trailing(g, own, gap, np.flatnonzero(cont), ch.value)
        if (k != 1.0).any():
            comps = scale_costs(comps, gap, k, leaf, own)
        after = float(sum(comps[c][sel & leaf].sum() for c in COMPONENTS))
        notes.append({"whatif": w.text, "change": str(ch), "events": int(sel.sum()),
                      "busy_before_us": round(before, 3), "busy_after_us": round(after, 3)})
    return Edited(dataclasses.replace(g, gap=gap), comps, notes)


def scale_costs(comps: dict[str, np.ndarray], gap: np.ndarray, k: np.ndarray,
                leaf: np.ndarray, own: ChainOwners) -> dict[str, np.ndarray]:
    """Each event's costs (where the scheduler uses them: ``leaf``) and the host self time it
    owns scaled by ``k`` (per event): new costs returned, chain gaps ``gap`` scaled in place."""
    kl = np.where(leaf, k, 1.0)
    out = {c: comps[c] * kl for c in COMPONENTS}
    o = own.owner
    scal = own.host_gap & ~own.wait & (o >= 0)
    gap[scal] *= k[o[scal]]
    return out


def _spread(events: pa.Table, g: Graph, k: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Per event: the factor of its outermost selected ancestor-or-self (1 elsewhere)."""
    parent = events.column("parent_id").to_numpy()
    out = np.where(seed, k, 1.0)
    has = seed.copy()
    hp = parent >= 0
    p = np.where(hp, parent, 0)
    for _ in range(int(events.column("depth").to_numpy().max(initial=0)) + 1):
        take = hp & has[p]
        nxt_has = has | take
        nxt = np.where(take, out[p], out)
        if np.array_equal(nxt_has, has) and np.array_equal(nxt, out):
            break
        has, out = nxt_has, nxt
    lau = launcher(events, g)
    hl = (lau >= 0)
    li = np.where(hl, lau, 0)
    out = np.where(hl & has[li], out[li], out)
    return out


def _add_trailing(g: Graph, own: ChainOwners, gap: np.ndarray, ids: np.ndarray,
                  delta: float) -> None:
    """Add ``delta`` us to the gap right before each event's end point (its trailing self
    time), clamped at zero."""
    pos = np.empty(2 * g.n, dtype=np.int64)
    pos[g.order] = np.arange(len(g.order))
    p = pos[2 * ids + 1]
    ok = own.host_gap[p]
    gap[p[ok]] = np.maximum(gap[p[ok]] + delta, 0.0)


__all__ = ["WhatIf", "Change", "parse_whatif", "parse_whatifs", "select", "apply_whatifs",
           "chain_owners", "leaf_mask", "launcher", "nested", "trace_index", "TraceIndex", "set_durations", "Edited", "SELECTOR_KEYS",
           "scale_costs"]
