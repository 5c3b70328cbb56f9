"""Collective costs over arrays: alpha-beta(-gamma) per algorithm and topology.

Notation (HARDWARE.md 2.4): p ranks in the group, L = min(p, ranks_per_node) ranks per node (or
rack), N = ceil(p / L) nodes; n is the AllReduce buffer, S the total buffer of reduce-scatter /
all-gather / all-to-all (nccl-tests convention). Bandwidths are per rank and direction, times
the link efficiency. Each step costs a latency alpha; each message posted to a NIC costs a post
(doorbell, plus a host proxy overhead on host-driven stacks) which is returned separately as
``post_us`` and attributed to host time. Reductions run at the collective's reduction
throughput, pipelined with the transfer (the slower of the two bounds the time).

Placement: global rank r sits on node (rack) r // ranks_per_node of the target. When the event
records its group's ranks (``pg_ranks``, e.g. "[0, 8, 16, 24]"), L is the number of group ranks
on the event's own node and N the number of nodes the group spans, so a strided cross-node group
is costed on the NICs even when it is small; when the list is absent or truncated ("..."), the
group is taken as contiguous (node-major), the way process groups are usually built.

Link sharing: every collective is costed at its rank's full link bandwidth divided by
``share`` (the number of collectives the rank's pool lets run at once under
``comm.link_sharing = "split"``; 1 under the default ``"fifo"``, where the pool admits one at a
time), so concurrent collectives never exceed the links' aggregate bandwidth.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.hardware.spec import HardwareSpec

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "p2p",
       "barrier", "unknown")


def normalize_op(name: str | None) -> str:
    """Map a recorded collective name (allreduce_, _reduce_scatter_base, alltoall_base, ...)."""
    s = (name or "").lower().replace("_", "").replace(" ", "")
    for key, op in (("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
                    ("allgather", "all_gather"), ("alltoall", "all_to_all"),
                    ("broadcast", "broadcast"), ("barrier", "barrier"), ("reduce", "reduce"),
                    ("send", "p2p"), ("recv", "p2p"), ("p2p", "p2p")):
        if key in s:
            return op
    return "unknown"


def op_codes(coll_op: pa.ChunkedArray) -> np.ndarray:
    """Index into `OPS` per event (unique names normalised once)."""
    enc = pc.dictionary_encode(pc.fill_null(coll_op.cast(pa.string()), "").combine_chunks())
    lut = np.array([OPS.index(normalize_op(d)) for d in enc.dictionary.to_pylist()] or [0])
    return lut[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]


_INT = re.compile(r"-?\d+")


def parse_ranks(text: str | None) -> list[int] | None:
    """Ranks of a recorded group ("[0, 1, 2, 3]"); None when absent or truncated ("...")."""
    if not text or "..." in text or "\u2026" in text:
        return None
    ranks = [int(x) for x in _INT.findall(text)]
    return ranks or None


def placement(pg_ranks: pa.ChunkedArray | pa.Array, rank: np.ndarray,
              ranks_per_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event (p, L, N) from its group's rank list; zeros where the list is unknown.

    p: ranks in the list; L: those on the event's own node (rank // ranks_per_node); N: nodes
    the group spans. Unique lists are parsed once.
    """
    arr = pg_ranks if isinstance(pg_ranks, pa.ChunkedArray) else pa.chunked_array([pg_ranks])
    enc = pc.dictionary_encode(pc.fill_null(arr.cast(pa.string()), "").combine_chunks())
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    p, L, N = (np.zeros(len(rank)) for _ in range(3))
    own = rank // ranks_per_node
    for d, text in enumerate(enc.dictionary.to_pylist()):
        ranks = parse_ranks(text)
        m = idx == d
        if ranks is None or not m.any():
            continue
        nodes = np.array(sorted(set(ranks)), dtype=np.int64) // ranks_per_node
        uniq, counts = np.unique(nodes, return_counts=True)
        per = dict(zip(uniq.tolist(), counts.tolist()))
        p[m] = len(nodes)
        N[m] = len(uniq)
        # a rank outside its recorded group (should not happen) counts as a node of its own
        mine = np.unique(own[m])
        L[m] = np.array([per.get(int(o), 1) for o in mine])[np.searchsorted(mine, own[m])]
    return p, L, N


@dataclass
class Link:
    """Per-rank link parameters, B in bytes/us."""

    bw: float
    alpha: float
    post: float


@dataclass
class CollectiveCost:
    """Per event: transfer (incl. latency), post cost, and what crossed a NIC (for retries)."""

    collective_us: np.ndarray
    post_us: np.ndarray
    nic_bytes: np.ndarray
    nic_messages: np.ndarray
    nic_bw: np.ndarray  # bytes/us of the NIC path the event used
    algorithm: np.ndarray  # per event: 0 flat ring/direct, 1 tree, 2 hierarchical


def links(spec: HardwareSpec) -> tuple[Link, Link]:
    """(intra-node, inter-node) link parameters of a spec."""
    doorbell = float(spec.value("comm.doorbell_us"))
    proxy = float(spec.value("comm.proxy_overhead_us"))
    via_nic = bool(spec.value("network.intra_node_via_nic"))
    intra = Link(float(spec.value("network.intra_node_GBps")) * 1e3
                 * float(spec.value("comm.intra_efficiency")),
                 float(spec.value("network.latency_us")),
                 (doorbell + proxy) if via_nic else 0.0)
    inter = Link(float(spec.value("network.inter_node_GBps")) * 1e3
                 * float(spec.value("comm.inter_efficiency")),
                 float(spec.value("network.inter_latency_us")), doorbell + proxy)
    return intra, inter


def reduction_bw(spec: HardwareSpec) -> float:
    """Reduction throughput (bytes/us) available to one collective."""
    if spec.value("comm.path") == "offloaded":
        engines = int(spec.value("comm.message_engines"))
        used = min(int(spec.value("comm.engines_per_collective")), engines)
        return float(spec.value("comm.engine_reduction_GBps")) * 1e3 * max(used, 1)
    return float(spec.value("comm.reduction_GBps")) * 1e3


def collective_costs(spec: HardwareSpec, op: np.ndarray, bytes_in: np.ndarray,
                     bytes_out: np.ndarray, group: np.ndarray, *, local: np.ndarray | None = None,
                     nodes: np.ndarray | None = None, share: int = 1) -> CollectiveCost:
    """Cost every collective at once. ``op`` holds `OPS` indices; arrays are per event.

    ``local`` / ``nodes`` (L, N per event from `placement`; 0 = unknown, contiguous assumed)
    and ``share`` (concurrent collectives splitting the links) are optional.
    """
    intra, inter = links(spec)
    intra.bw /= max(share, 1)
    inter.bw /= max(share, 1)
    via_nic = bool(spec.value("network.intra_node_via_nic"))
    base = float(spec.value("comm.base_latency_us"))
    red = reduction_bw(spec)
    algo_name = str(spec.value("comm.algorithm"))
    rpn = int(spec.value("network.ranks_per_node"))

    p = np.maximum(group.astype(np.float64), 1.0)
    L = np.minimum(p, rpn)
    N = np.ceil(p / L)
    if local is not None and nodes is not None:
        known = (local > 0) & (nodes > 0)
        L = np.where(known, np.minimum(local, p), L)
        N = np.where(known, nodes, N)
    multi = N > 1
    if algo_name == "auto":
        algo = np.where(multi, 2, 0)
    else:
        algo = np.full(len(p), {"ring": 0, "tree": 1, "hierarchical": 2}[algo_name])
        algo = np.where((algo == 2) & ~multi, 0, algo)  # one node: hierarchical is a ring
    n = np.maximum(bytes_in, bytes_out)
    S = np.where(op == OPS.index("reduce_scatter"), bytes_in,
                 np.where(op == OPS.index("all_gather"), bytes_out, n))

    # flat algorithms use the slowest link of the group: NVLink/in-rack on one node, else NIC
    fb = np.where(multi, inter.bw, intra.bw)
    fa = np.where(multi, inter.alpha, intra.alpha)
    fpost = np.where(multi, inter.post, intra.post)

    def flat(steps: np.ndarray, wire: np.ndarray, reduced: np.ndarray):
        t = np.maximum(wire / fb, reduced / red)
        over_nic = multi | via_nic
        return (steps * fa + t, steps * fpost, np.where(over_nic, wire, 0.0),
                np.where(over_nic, steps, 0.0))

    def hier(steps_i, wire_i, steps_o, wire_o, reduced):
        t = np.maximum(wire_i / intra.bw + wire_o / inter.bw, reduced / red)
        lat = steps_i * intra.alpha + steps_o * inter.alpha
        post = steps_i * intra.post + steps_o * inter.post
        nic = wire_o + (wire_i if via_nic else 0.0)
        msgs = steps_o + (steps_i if via_nic else 0.0)
        return lat + t, post, nic, msgs

    z = np.zeros(len(p))
    frac = (p - 1) / p
    fi, fo = (L - 1) / L, (N - 1) / N
    log2p = np.ceil(np.log2(p))
    cases = {
        # ring AllReduce: 2(p-1) steps, 2(p-1)/p n on the wire, (p-1)/p n reduced
        "all_reduce": (flat(2 * (p - 1), 2 * frac * n, frac * n),
                       flat(2 * log2p, 2 * n, frac * n),
                       hier(2 * (L - 1), 2 * fi * n, 2 * (N - 1), 2 * fo * n / L,
                            fi * n + fo * n / L)),
        "reduce_scatter": (flat(p - 1, frac * S, frac * S), None,
                           hier(L - 1, fi * S, N - 1, fo * S / L, fi * S + fo * S / L)),
        "all_gather": (flat(p - 1, frac * S, z), None,
                       hier(L - 1, fi * S, N - 1, fo * S / L, z)),
        "broadcast": (flat(p - 1, n, z), None, hier(L - 1, n, N - 1, n, z)),
        "reduce": (flat(p - 1, n, n), None, hier(L - 1, n, N - 1, n, n)),
        "p2p": None, "barrier": None, "unknown": None, "all_to_all": None,
    }
    coll, post, nic, msgs = z.copy(), z.copy(), z.copy(), z.copy()
    for name, variants in cases.items():
        if variants is None:
            continue
        mask = op == OPS.index(name)
        if not mask.any():
            continue
        ring, tree, hierarchical = variants
        for code, v in ((0, ring), (1, tree or ring), (2, hierarchical)):
            m = mask & (algo == code)
            coll[m], post[m], nic[m], msgs[m] = v[0][m], v[1][m], v[2][m], v[3][m]

    # direct all-to-all: (p-1) pairwise steps; node-local and off-node parts move concurrently
    m = op == OPS.index("all_to_all")
    if m.any():
        wi, wo = (L - 1) / p * S, (p - L) / p * S
        t = np.maximum(wi / intra.bw, wo / inter.bw)
        lat = (L - 1) * intra.alpha + (p - L) * inter.alpha
        pst = (L - 1) * intra.post + (p - L) * inter.post
        coll[m], post[m] = (lat + t)[m], pst[m]
        nic[m] = (wo + (wi if via_nic else 0.0))[m]
        msgs[m] = ((p - L) + ((L - 1) if via_nic else 0.0))[m]
        algo = np.where(m, 0, algo)
    # send/recv: one message to a peer, taken as node-local
    m = op == OPS.index("p2p")
    if m.any():
        coll[m] = (intra.alpha + n / intra.bw)[m]
        post[m] = intra.post
        nic[m] = n[m] if via_nic else 0.0
        msgs[m] = 1.0 if via_nic else 0.0
    # barrier / unrecognised: latency of a tree of zero-byte steps
    m = np.isin(op, (OPS.index("barrier"), OPS.index("unknown")))
    if m.any():
        coll[m] = (log2p * fa)[m]
        post[m] = (log2p * fpost)[m]

    local = p <= 1
    coll = np.where(local, 0.0, coll + base)
    post = np.where(local, 0.0, post)
    nic_bw = np.where(multi, inter.bw, intra.bw)
    return CollectiveCost(coll, post, np.where(local, 0.0, nic), np.where(local, 0.0, msgs),
                          nic_bw, algo)
