"""Collective costs over arrays: NCCL's tuning model (algorithms x protocols, the fastest wins).

One model for every target, structured like NCCL's tuner (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``): each (algorithm, protocol) candidate has a
latency ``lat`` (a base latency plus per-step hardware latencies by link class) and a bandwidth
``algbw``; its time is ``lat + bytes / algbw`` and the cheapest candidate per message is chosen.
Targets differ only through named spec values (link bandwidths, per-step latencies by protocol,
protocol caps, NVSwitch reduction, post cost, reduction throughput); no target has a protocol or
algorithm the machinery withholds from another.

Notation: p ranks in the group, L of them on the event's node (rack), N nodes; ``bytes`` is the
size nccl-tests prints: the AllReduce / Broadcast buffer, the *whole* buffer of ReduceScatter /
AllGather, the send buffer of AllToAll. Bandwidths are per rank and direction (bytes/us),
times the link efficiency. NCCL's "bus bandwidth" of a ring is the per-rank link bandwidth;
``algbw = busbw x ratio`` with ratio p / nsteps for ring and NVLS (nsteps = 2(p-1) AllReduce,
p-1 ReduceScatter/AllGather, p Broadcast) and 0.5 for tree and CollNet, as in tuning.cc.

Algorithms:

- ``ring``: NCCL's ring. On one node it runs at the in-node bandwidth; across nodes each
  channel's ring leaves every node once, so the node's NICs (one per rank, up to ``channels``
  of them) carry it: ``min(B_intra, min(L, channels) x B_nic)``. Latency
  ``base + (nsteps - nInter) x max(intra step, post floor) + nInter x inter step``, nInter =
  2(N-1) for AllReduce, N-1 for ReduceScatter/AllGather; the post floor (``comm.post_us``, x3
  for Simple) applies across nodes only: NCCL's ``max(latency, netOverhead)``, a floor, not an
  addition. Multi-node Simple AllReduce latency x ``comm.ring_plateau`` once each rank's share
  per channel is >= 64 B (tuning.cc "plateau effect of ring").
- ``tree`` (AllReduce): ``busbw = min(0.92 B_ring, channels x tree cap)``, LL at 1/3.8 of it
  (capped at the LL maximum), LL128 at 7/9 (one node) or 120/128 (capped per channel), algbw =
  0.5 busbw x NCCL's tree correction factor by size; latency
  ``base + 2(steps_in x intra + levels_out x inter)``, the steps by the tree's shape
  (``comm.tree_shape``): ``chain``, NCCL's (``ncclTopoTuneModel`` in ``src/graph/tuning.cc``,
  the same in v2.18.5 and master), a chain of p // N - 1 steps in a node (7 on an 8-GPU node)
  under a double binary tree of floor(log2 N) levels across nodes (1 on 2 and 3 nodes, 2 on
  4-7), so a tree is not monotone in the rack size (a 40-rank group in one rack walks a 39-step
  chain, over 3 racks of 16 a 12-step one and one network level); ``binary``, a binary tree
  over the group's ranks placed node by node: ceil(log2 p) levels, ceil(log2 N) of them across
  nodes (ceil(log2 L) + ceil(log2 N) >= ceil(log2 LN), so a group in one large rack is never
  slower than over smaller racks). Per-node-count caps are taken non-increasing in N, and
  LL128's tree factor is NCCL's one-node 7/9 everywhere (NCCL: 120/128 across nodes), so
  spreading a group over more nodes never raises its bandwidth.
- ``nvls`` / ``nvls_tree`` (AllReduce; NVLS also ReduceScatter/AllGather on one node), only
  where the spec has NVSwitch reduction (``comm.nvls_efficiency`` > 0), Simple only: NVLS
  channels = min(L, 32) pulling from the switch, the per-channel NVLink bandwidth taken to
  NCCL's SM90 search step at or below ``B_intra / channels`` (search.cc), times the NVLS
  efficiency and (channels-1)/channels, x2 for AllReduce (two pipelined operations) or x(L-1)/L;
  NVLS-tree is further capped by the per-channel NIC step (x2 on two nodes) and the NVLS-tree
  per-channel cap. Latency: the NVLS step (+ 2 log2 N inter steps for the tree). With
  ``comm.nvls_placement = "chunked"`` (NCCL < 2.20) an NVLS AllReduce below 8 MB is cut into
  16 KB chunks per head, nHeads (L) chunks per channel, so it runs on
  ``ceil(bytes / (L x 16 KB))`` of NCCL's 16 NVLS channels, at that share of the bandwidth;
  NCCL 2.20 spreads the message over all channels (``balanced``).
- NVLS across nodes needs CollNet in NCCL and is not modelled (NVLS-tree is).
- ``collnet`` (AllReduce, where ``comm.collnet`` is set: in-network reduction such as IB SHARP):
  CollNet chain, ``algbw = 0.5 x B_ring``, latency ``2(L-1) intra + inter``.
- ``hierarchical`` (across nodes; only when ``comm.algorithm`` names it, as NCCL's tuner never
  runs it): in-node ReduceScatter + cross-node ring on the 1/L shard
  over each rank's own NIC + in-node AllGather, phases in sequence.
- ``direct`` (AllToAll, send/recv): every peer progressed at once over its own channels, so the
  latency is one step of the slowest link class crossed (not one per peer) and the in-node and
  off-node parts move concurrently (a protocol cap bounds them together); each NIC message costs a post (``comm.post_us``, serial on the
  posting agent: the GPU's proxy thread or MTIA's message engine), returned as ``post_us``.

Protocols (every algorithm except NVLS/CollNet takes all three): ``simple`` at the link
bandwidth; ``ll`` at half of it, capped at ``comm.ll_max*`` (a ring on NCCL < 2.21,
``comm.ring_ll_share = "quarter"``: at 1/4 of it for AllReduce, Reduce and across nodes, 1/3
for the other one-node collectives, tuning.cc at v2.18.5 / v2.20.5); ``ll128`` at 0.92 of it
(120 of 128 bytes carry data), capped at ``channels x comm.ll128_channel_GBps``. Each has its own base and
per-step latencies (``comm.*_base_*_us``, ``network.*_{ll,ll128,simple}_us``).

Channels at run time: ring, tree and CollNet run a small message on fewer of the
``comm.channels`` channels, as NCCL's enqueue does (``src/enqueue.cc``, channel tuning: drop a
channel while bytes < channels x ``comm.channel_{protocol}_bytes``, NCCL's threads x bytes per
thread; x the ranks for ring LL), at that share of the bandwidth
(``bw / nChannels x nChannels``, tuning.cc up to NCCL 2.21; `_run_channels`). The candidates are
compared at that bandwidth, so the choice is the fastest as the message runs (NCCL's tuner
compares at full channels and drops them afterwards; the two differ only near a crossover).
As in NCCL, time is therefore not monotone in size just below a channel step.

Reductions run at the collective's reduction throughput (GPU SMs, MTIA message engines),
pipelined with the transfer (the slower bound wins); switch reductions (NVLS, CollNet) need none.

Placement: global rank r sits on node (rack) r // ranks_per_node of the target. When the event
records its group's ranks (``pg_ranks``, e.g. "[0, 8, 16, 24]"), L is the number of group ranks
on the event's own node and N the number of nodes the group spans; when the list is absent or
truncated ("..."), the group is taken as contiguous (node-major).

Link sharing: bandwidths are divided by ``share`` (collectives the rank's pool runs at once
under ``comm.link_sharing = "split"``; 1 under ``"fifo"``), so concurrent collectives never
exceed the links' aggregate bandwidth.
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
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical", "direct")
PROTOCOLS = ("ll", "ll128", "simple")

# NCCL constants that are part of the algorithm rather than the hardware (tuning.cc, search.cc)
_LL_FRACTION = 0.5            # LL: 8-byte stores carry 4 data bytes
_LL128_FRACTION = 0.92        # LL128: 120 of 128 bytes carry data
_TREE_FRACTION = 0.92         # tree AllReduce busbw refinement
_TREE_LL_DIVISOR = 3.8        # tree LL
_NVLS_MAX_ARITY = 32          # NCCL_MAX_NVLS_ARITY (device.h)
#: NCCL < 2.20 NVLS placement (``comm.nvls_placement = "chunked"``): NCCL_NVLS_NCHANNELS
#: default (src/transport/nvls.cc) and the chunk enqueue.cc takes below 8 MB (16 KB per head)
_NVLS_CHANNELS = 16
_NVLS_SMALL_CHUNK = 16 << 10
_PLATEAU_MIN_BYTES = 64       # ring Simple plateau: bytes per channel per rank
#: bytes a CollNet channel takes before NCCL runs another: NCCL_MAX_NTHREADS 640 (device.h) x
#: 512 B per thread (tuning.cc threadThresholds); the other algorithms' are spec values
#: (``comm.channel_*_bytes``)
_COLLNET_CHANNEL_BYTES = 640 * 512
#: per-channel bandwidth steps of NCCL's SM90 graph search (search.cc sm90SpeedArrayIntra/Inter)
_SPEEDS_INTRA = np.array([60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0]) * 1e3
_SPEEDS_INTER = np.array([48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                          3.0, 2.4, 1.2, 0.24, 0.12]) * 1e3
#: tree AllReduce bandwidth correction by log2(bytes / 64), per protocol (tuning.cc)
_TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9]])


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
    if not pa.types.is_dictionary(arr.type):  # the events table stores them encoded already
        arr = pa.chunked_array([pc.dictionary_encode(arr.cast(pa.string()).combine_chunks())])
    enc = arr.combine_chunks()
    idx = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    p, L, N = (np.zeros(len(rank)) for _ in range(3))
    own = rank // ranks_per_node
    o = np.argsort(idx, kind="stable")  # rows grouped by list: one pass, however many lists
    cut = np.searchsorted(idx[o], np.arange(len(enc.dictionary) + 1))
    for d, text in enumerate(enc.dictionary.to_pylist()):
        ranks = parse_ranks(text)
        m = o[cut[d]:cut[d + 1]]
        if ranks is None or not len(m):
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
class Tuning:
    """A spec's collective parameters in model units (bytes/us, us); one per target."""

    b_intra: float            # per-rank in-node / in-rack bandwidth, efficiency applied
    b_nic: float              # per-rank NIC / cross-rack bandwidth, efficiency applied
    channels: int
    channel_bytes: dict[str, float]       # protocol -> bytes a channel takes (ring LL: x ranks)
    base: dict[tuple[str, str], float]    # (ring|tree, protocol) -> us
    intra: dict[tuple[str, str], float]   # per-step latency in a node
    inter: dict[tuple[str, str], float]   # per-step latency across nodes
    ll_max: tuple[float, float, float]    # LL bandwidth cap on 1, 2, >2 nodes
    ll128_channel: float
    tree_channel: tuple[float, float, float]
    tree_ll128_channel: tuple[float, float, float]
    nvls_efficiency: float
    nvls_us: float
    nvls_tree_inter_us: float
    nvls_tree_channel: tuple[float, float]  # 2 nodes, >2 nodes
    nvls_chunked: bool        # NCCL < 2.20 NVLS placement (comm.nvls_placement = "chunked")
    ring_ll_quarter: bool     # NCCL < 2.21 ring LL share (comm.ring_ll_share = "quarter")
    tree_chain: bool          # NCCL's in-node chain (comm.tree_shape = "chain"), else binary
    collnet: bool
    collnet_intra_us: float
    collnet_inter_us: float
    post_us: float
    plateau: float
    fill: float               # chunk rounds of pipeline fill not overlapped (comm.fill_chunks)
    fill_chunk: float         # bytes per channel per peer in one round (comm.fill_chunk_bytes)
    reduction: float          # bytes/us
    via_nic: bool
    algorithm: str
    protocol: str

    @classmethod
    def of(cls, spec: HardwareSpec) -> Tuning:
        v = spec.value

        def f(key: str) -> float:
            return float(v(key))  # type: ignore[arg-type]

        def opt(key: str) -> float:  # NVLS / CollNet keys: absent where the hardware has none
            return float(spec.get(key, 0.0))  # type: ignore[arg-type]

        def per(prefix: str, suffix: str = "_us") -> dict[tuple[str, str], float]:
            return {(a, p): f(prefix.format(a=a) + f"_{p}{suffix}")
                    for a in ("ring", "tree") for p in PROTOCOLS}

        def gb(key: str) -> float:
            return f(key) * 1e3

        def caps(*keys: str) -> tuple[float, ...]:
            # per-node-count caps taken non-increasing in the node count, so spreading a group
            # over more nodes never raises its bandwidth (NCCL's Hopper tree cap is 38.7 GB/s on
            # one node and 41.4 on two)
            return tuple(np.minimum.accumulate([gb(k) for k in keys]).tolist())

        return cls(
            b_intra=gb("network.intra_node_GBps") * f("comm.intra_efficiency"),
            b_nic=gb("network.inter_node_GBps") * f("comm.inter_efficiency"),
            channels=max(int(v("comm.channels")), 1),  # type: ignore[call-overload]
            channel_bytes={p: f(f"comm.channel_{p}_bytes") for p in PROTOCOLS},
            base=per("comm.{a}_base"), intra=per("network.intra_{a}"),
            inter=per("network.inter_{a}"),
            ll_max=caps("comm.ll_max_1node_GBps", "comm.ll_max_2node_GBps",
                        "comm.ll_max_GBps"),  # type: ignore[arg-type]
            ll128_channel=gb("comm.ll128_channel_GBps"),
            tree_channel=caps("comm.tree_channel_1node_GBps", "comm.tree_channel_2node_GBps",
                              "comm.tree_channel_GBps"),  # type: ignore[arg-type]
            tree_ll128_channel=caps("comm.tree_ll128_channel_1node_GBps",
                                    "comm.tree_ll128_channel_2node_GBps",
                                    "comm.tree_ll128_channel_GBps"),  # type: ignore[arg-type]
            nvls_efficiency=opt("comm.nvls_efficiency"),
            nvls_us=opt("network.nvls_us"),
            nvls_tree_inter_us=opt("network.nvls_tree_inter_us"),
            nvls_tree_channel=(opt("comm.nvls_tree_channel_2node_GBps") * 1e3,
                               opt("comm.nvls_tree_channel_GBps") * 1e3),
            nvls_chunked=spec.get("comm.nvls_placement", "balanced") == "chunked",
            ring_ll_quarter=spec.get("comm.ring_ll_share", "half") == "quarter",
            tree_chain=v("comm.tree_shape") == "chain",
            collnet=bool(spec.get("comm.collnet", False)),
            collnet_intra_us=opt("network.collnet_intra_us"),
            collnet_inter_us=opt("network.collnet_inter_us"),
            post_us=f("comm.post_us"), plateau=f("comm.ring_plateau"),
            fill=f("comm.fill_chunks"), fill_chunk=f("comm.fill_chunk_bytes"),
            reduction=reduction_bw(spec), via_nic=bool(v("network.intra_node_via_nic")),
            algorithm=str(v("comm.algorithm")), protocol=str(v("comm.protocol")),
        )


def reduction_bw(spec: HardwareSpec) -> float:
    """Reduction throughput (bytes/us) available to one collective."""
    if spec.value("comm.path") == "offloaded":
        engines = int(spec.value("comm.message_engines"))  # type: ignore[call-overload]
        used = min(int(spec.value("comm.engines_per_collective")), engines)  # type: ignore[call-overload]
        return float(spec.value("comm.engine_reduction_GBps")) * 1e3 * used  # type: ignore[arg-type]
    return float(spec.value("comm.reduction_GBps")) * 1e3  # type: ignore[arg-type]


@dataclass
class CollectiveCost:
    """Per event: transfer (incl. latency), post cost, what crossed a NIC (for retries), and the
    (algorithm, protocol) chosen (indices into `ALGORITHMS`, `PROTOCOLS`)."""

    collective_us: np.ndarray
    post_us: np.ndarray
    nic_bytes: np.ndarray
    nic_messages: np.ndarray
    nic_bw: np.ndarray  # bytes/us of the NIC path the event used
    algorithm: np.ndarray
    protocol: np.ndarray
    #: the chosen candidate's latency part and transfer part (the latter with the pipeline fill)
    latency_us: np.ndarray | None = None
    transfer_us: np.ndarray | None = None


def _proto_bw(t: Tuning, b: np.ndarray, proto: str, idx: np.ndarray) -> np.ndarray:
    """A link bandwidth as a protocol moves data over it (ring refinements of tuning.cc)."""
    if proto == "ll":
        return np.minimum(np.take(t.ll_max, idx), _LL_FRACTION * b)
    if proto == "ll128":
        return np.minimum(_LL128_FRACTION * b, t.channels * t.ll128_channel)
    return b


def _run_channels(t: Tuning, size: np.ndarray, per_channel: float | np.ndarray) -> np.ndarray:
    """The share of the ``comm.channels`` a message runs on: NCCL's enqueue drops channels
    while ``bytes < channels x per_channel`` (enqueue.cc channel tuning) and scales the
    bandwidth with them (``bw / comm->nChannels x nChannels``, tuning.cc up to 2.21)."""
    nc = np.clip(np.floor(size / per_channel), 1.0, float(t.channels))
    return nc / t.channels


def _step_down(x: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The largest NCCL search step <= x (the smallest step when x is below all of them)."""
    asc = steps[::-1]
    i = np.searchsorted(asc, x, side="right") - 1
    return asc[np.clip(i, 0, len(asc) - 1)]


def _log2i(x: np.ndarray) -> np.ndarray:
    """floor(log2 x), NCCL's ``log2i`` (src/include/utils.h); 0 below 2."""
    return np.floor(np.log2(np.maximum(x, 1.0)))


def _log2c(x: np.ndarray) -> np.ndarray:
    """ceil(log2 x): the levels of a binary tree over x ranks; 0 below 2."""
    return np.ceil(np.log2(np.maximum(x, 1.0)))


def _tree_steps(chain: bool, p: np.ndarray, N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-step latencies a tree AllReduce takes each way: (in-node steps, levels across nodes).
    ``chain`` (NCCL's tuner, tuning.cc ncclTopoTuneModel): p // N - 1 chain steps in a node and
    log2i(N) levels across. Binary: ceil(log2 p) levels over the group, ceil(log2 N) across."""
    if chain:
        return np.maximum(np.floor(p / np.maximum(N, 1.0)) - 1.0, 0.0), _log2i(N)
    levels_o = _log2c(N)
    return np.maximum(_log2c(p) - levels_o, 0.0), levels_o


def collective_costs(spec: HardwareSpec, op: np.ndarray, bytes_in: np.ndarray,
                     bytes_out: np.ndarray, group: np.ndarray, *, local: np.ndarray | None = None,
                     nodes: np.ndarray | None = None, share: int = 1) -> CollectiveCost:
    """Cost every collective at once. ``op`` holds `OPS` indices; arrays are per event.

    ``local`` / ``nodes`` (L, N per event from `placement`; 0 = unknown, contiguous assumed)
    and ``share`` (concurrent collectives splitting the links) are optional.
    """
    t = Tuning.of(spec)
    rpn = int(spec.value("network.ranks_per_node"))  # type: ignore[call-overload]
    p = np.maximum(np.asarray(group, dtype=np.float64), 1.0)
    L = np.minimum(p, rpn)
    N = np.ceil(p / L)
    if local is not None and nodes is not None:
        known = (local > 0) & (nodes > 0)
        L = np.where(known, np.minimum(local, p), L)
        N = np.where(known, nodes, N)
    bytes_in = np.asarray(bytes_in, dtype=np.float64)
    bytes_out = np.asarray(bytes_out, dtype=np.float64)
    n = np.maximum(bytes_in, bytes_out)
    size = np.where(op == OPS.index("reduce_scatter"), bytes_in,
                    np.where(op == OPS.index("all_gather"), bytes_out, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        costs = _costs(t, op, size, p, L, N, max(int(share), 1))
    single = p <= 1
    for a in ("collective_us", "post_us", "nic_bytes", "nic_messages"):
        setattr(costs, a, np.where(single, 0.0, getattr(costs, a)))
    return costs


def _costs(t: Tuning, op: np.ndarray, size: np.ndarray, p: np.ndarray, L: np.ndarray,
           N: np.ndarray, share: int) -> CollectiveCost:
    k = len(p)
    is_ = {name: op == OPS.index(name) for name in OPS}
    ar = is_["all_reduce"] | is_["barrier"] | is_["unknown"]
    rsag = is_["reduce_scatter"] | is_["all_gather"]
    chain = is_["broadcast"] | is_["reduce"]
    direct = is_["all_to_all"] | is_["p2p"]
    size = np.where(is_["barrier"] | is_["unknown"], 0.0, size)
    multi = N > 1
    idx = np.where(N <= 1, 0, np.where(N <= 2, 1, 2)).astype(np.int64)
    bi_tuned = np.full(k, t.b_intra / share)
    bo = np.full(k, t.b_nic / share)
    fi, fo = (L - 1) / L, (N - 1) / N
    nsteps = np.where(ar, 2 * (p - 1), np.where(rsag, p - 1, p))
    n_inter = np.where(multi, np.where(ar, 2 * (N - 1), np.where(rsag, N - 1, 0)), 0)
    reduced = np.where(ar | is_["reduce_scatter"], (p - 1) / p * size,
                       np.where(is_["reduce"], size, 0.0))
    t_red = reduced / t.reduction
    # what crosses a NIC per rank, for retransmissions (each rank's share of the node's traffic)
    wire_o = np.where(ar, 2 * fo * size / L, np.where(rsag | chain, fo * size / L, 0.0))
    wire_i = np.where(ar, 2 * fi * size, np.where(rsag, fi * size, np.where(chain, size, 0.0)))
    nic_b = np.where(multi, wire_o, 0.0) + (wire_i if t.via_nic else 0.0)
    nic_m = n_inter + (np.where(L > 1, nsteps - n_inter, 0) if t.via_nic else 0)
    inf = np.full(k, np.inf)
    # direct: one NIC message per off-node peer (and per in-node peer where those use the NIC)
    msgs = np.where(is_["p2p"], np.where(multi | t.via_nic, 1.0, 0.0),
                    (p - L) + ((L - 1) if t.via_nic else 0.0))

    zero = np.zeros(k)
    log_size = _log2i(np.maximum(size, 1.0) / 64.0).astype(np.int64)
    log_size = np.where(size >= 64, log_size, -1)
    tree_in, tree_out = _tree_steps(t.tree_chain, p, N)

    def candidates(slow_group: np.ndarray | float = 1.0, slow_node: np.ndarray | float = 1.0,
                   slow_one: np.ndarray | float = 1.0) -> list[tuple[str, str, np.ndarray,
                                                                     np.ndarray, np.ndarray,
                                                                     np.ndarray]]:
        """Every (algorithm, protocol) candidate, the in-node links at 1 / ``slow_*`` of their
        rate: ``slow_group`` for the algorithms that split a message over the group (ring,
        hierarchical, direct), ``slow_node`` for NVLS (of the rate of the channels NCCL's
        search gives it), ``slow_one`` for trees and CollNet (`_as_run`)."""
        bi = bi_tuned / slow_group
        # (algorithm, protocol, applies, latency, transfer, post)
        cands: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        b_ring = np.where(multi, np.minimum(bi, np.minimum(L, t.channels) * bo), bi)
        bi_one = bi_tuned / slow_one
        b_ring_one = np.where(multi, np.minimum(bi_one, np.minimum(L, t.channels) * bo), bi_one)
        for proto in PROTOCOLS:
            floor = np.where(multi, t.post_us * (3.0 if proto == "simple" else 1.0), 0.0)
            li = np.maximum(t.intra[("ring", proto)], floor)
            lo = np.where(L <= 1, t.inter[("tree", proto)], t.inter[("ring", proto)])
            # ring
            bw = _proto_bw(t, b_ring, proto, idx)
            if proto == "ll" and t.ring_ll_quarter:  # NCCL < 2.21 (comm.ring_ll_share)
                share = np.where(ar | is_["reduce"] | multi, 0.25, 1.0 / 3.0)
                bw = np.minimum(np.take(t.ll_max, idx), share * b_ring)
            algbw = bw * np.where(ar | rsag, p / np.maximum(nsteps, 1), 1.0)
            step = np.where(multi & chain, lo, li)
            lat = np.where(chain, t.base[("ring", proto)] + nsteps * step,
                           t.base[("ring", proto)] + (nsteps - n_inter) * li + n_inter * lo)
            if proto == "simple":
                plateau = multi & ar & (size / (t.channels * p) >= _PLATEAU_MIN_BYTES)
                lat = np.where(plateau, lat * t.plateau, lat)
            ok = ~direct
            algbw = algbw * _run_channels(t, size, t.channel_bytes[proto] * (p if proto == "ll" else 1))
            cands.append(("ring", proto, ok, lat, np.maximum(size / algbw, t_red), zero))
            # tree (AllReduce)
            bus = np.minimum(_TREE_FRACTION * b_ring_one,
                             t.channels * np.take(t.tree_channel, idx))
            if proto == "ll":
                bus = np.minimum(bus / _TREE_LL_DIVISOR, np.take(t.ll_max, idx))
            elif proto == "ll128":
                # NCCL: 7/9 on one node, 120/128 across nodes; the one-node factor bounds both here
                # so that spreading over more nodes never raises the bandwidth
                bus = np.minimum(bus * 7.0 / 9.0, t.channels * np.take(t.tree_ll128_channel, idx))
            corr = np.where((log_size >= 0) & (log_size < 23),
                            _TREE_CORRECTION[PROTOCOLS.index(proto)][np.clip(log_size, 0, 23)], 1.0)
            algbw = 0.5 * bus * corr * _run_channels(t, size, t.channel_bytes[proto])
            lat = t.base[("tree", proto)] + 2 * (tree_in * t.intra[("tree", proto)]
                                                 + tree_out * t.inter[("tree", proto)])
            cands.append(("tree", proto, ar, lat, np.maximum(size / algbw, t_red), zero))
            # hierarchical: in-node RS + cross-node ring on the 1/L shard + in-node AG
            hi, ho = _proto_bw(t, bi, proto, idx), _proto_bw(t, bo, proto, idx)
            wire = np.where(ar, 2 * fi * size / hi + 2 * fo * size / L / ho,
                            np.where(rsag, fi * size / hi + fo * size / L / ho,
                                     size / hi + size / ho))
            steps_i = np.where(ar, 2 * (L - 1), np.where(rsag, L - 1, L))
            steps_o = np.where(ar, 2 * (N - 1), np.where(rsag, N - 1, N))
            lat = t.base[("ring", proto)] + steps_i * li + steps_o * lo
            ok = multi & ~direct
            cands.append(("hierarchical", proto, ok, lat, np.maximum(wire, t_red), zero))
            # direct: all peers at once; in-node and off-node parts concurrently
            wi, wo = (L - 1) / p * size, (p - L) / p * size
            # the protocol's own rate cap (LL, LL128) bounds both link classes together
            cap = _proto_bw(t, np.full(k, np.inf), proto, idx)
            wire = np.maximum(np.maximum(wi / hi, wo / ho), (wi + wo) / cap)
            lat = t.base[("ring", proto)] + np.maximum(np.where(L > 1, t.intra[("ring", proto)], 0.0),
                                                       np.where(multi, t.inter[("ring", proto)], 0.0))
            p2p_t = np.where(multi, t.inter[("ring", proto)] + size / ho,
                             t.intra[("ring", proto)] + size / hi)
            p2p_lat = np.where(multi, t.inter[("ring", proto)], t.intra[("ring", proto)])
            lat = np.where(is_["p2p"], p2p_lat, lat)
            wire = np.where(is_["p2p"], p2p_t - p2p_lat, wire)
            cands.append(("direct", proto, direct, lat, wire, msgs * t.post_us))

        # NVLS / NVLS-tree: NVSwitch reduction, Simple only
        if t.nvls_efficiency > 0:
            ch = np.minimum(L, _NVLS_MAX_ARITY)
            per_ch = _step_down(bi_tuned / ch, _SPEEDS_INTRA)
            intra = per_ch * t.nvls_efficiency * (ch - 1) / ch * np.where(ar, 2.0, fi) / slow_node
            bus1 = ch * intra
            algbw = bus1 * p / np.maximum(nsteps, 1)
            if t.nvls_chunked:  # NCCL < 2.20: only the channels the 16 KB chunks reach work
                busy = np.clip(np.ceil(size / (np.maximum(L, 1) * _NVLS_SMALL_CHUNK)), 1,
                               _NVLS_CHANNELS)
                algbw = np.where(ar, algbw * busy / _NVLS_CHANNELS, algbw)
            ok = (ar | rsag) & ~multi & (L > 1)
            cands.append(("nvls", "simple", ok, np.full(k, t.nvls_us), size / algbw, zero))
            nic_ch = _step_down(np.minimum(L, t.channels) * bo / ch, _SPEEDS_INTER)
            inter = nic_ch * np.where(N <= 2, 2.0, 1.0)
            cap = np.where(N <= 2, t.nvls_tree_channel[0], t.nvls_tree_channel[1])
            bus = ch * np.minimum(np.minimum(intra, inter), cap)
            algbw = bus * p / np.maximum(nsteps, 1)
            lat = t.nvls_us + 2 * _log2i(N) * t.nvls_tree_inter_us
            ok = ar & multi & (L > 1)
            cands.append(("nvls_tree", "simple", ok, lat, size / algbw, zero))
        if t.collnet:
            algbw = 0.5 * b_ring_one * _run_channels(t, size, _COLLNET_CHANNEL_BYTES)
            lat = 2 * (L - 1) * t.collnet_intra_us + t.collnet_inter_us
            ok = ar & multi
            cands.append(("collnet", "simple", ok, lat, size / algbw, zero))
        return cands

    cands = _as_run(t, candidates, size, p, L)
    # auto: NCCL's algorithms; hierarchical only when named (no NCCL-style tuner runs it).
    # A named algorithm or protocol that does not apply to an event (a tree for an all-gather,
    # LL for NVLS) leaves that event to auto.
    ar_ = np.arange(k)
    applies = np.stack([c[2] for c in cands])
    lats = np.stack([np.where(c[2], c[3], inf) for c in cands])
    wires = np.stack([np.where(c[2], c[4], inf) for c in cands])
    trans = lats + wires
    posts = np.stack([c[5] for c in cands])
    total = trans + posts
    auto = np.array([c[0] != "hierarchical" for c in cands])
    named = np.array([(t.algorithm == c[0] or c[0] == "direct"
                       or (t.algorithm == "auto" and c[0] != "hierarchical"))
                      and t.protocol in ("auto", c[1]) for c in cands])

    def pick(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tt = np.where(mask[:, None], total, np.inf)
        b = np.argmin(tt, axis=0)
        return b, np.isfinite(tt[b, ar_])

    best, ok_best = pick(named)
    alt, _ = pick(auto)
    row = np.where(ok_best, best, alt)
    ai = np.array([ALGORITHMS.index(c[0]) for c in cands], dtype=np.int64)[row]
    pi = np.array([PROTOCOLS.index(c[1]) for c in cands], dtype=np.int64)[row]
    found = applies[row, ar_]
    lat_c = np.where(found, lats[row, ar_], 0.0)
    wire_c = np.where(found, wires[row, ar_], 0.0)
    coll = lat_c + wire_c
    post = posts[row, ar_]
    nic_b = np.where(direct, np.where(is_["p2p"], np.where(multi | t.via_nic, size, 0.0),
                                      (p - L) / p * size
                                      + ((L - 1) / p * size if t.via_nic else 0.0)), nic_b)
    nic_m = np.where(direct, msgs, nic_m)
    nic_bw = np.where(multi, bo, bi_tuned)
    return CollectiveCost(coll, post, nic_b, nic_m.astype(np.float64), nic_bw, ai, pi, lat_c,
                          wire_c)


def _as_run(t: Tuning, candidates, size: np.ndarray, p: np.ndarray,  # type: ignore[no-untyped-def]
            L: np.ndarray) -> list:
    """Every candidate as it runs, with the pipeline fill (`comm.fill_chunks`, calibrated).

    A channel moves its data in chunks of at most ``comm.fill_chunk_bytes`` per peer. Until it
    holds more than one such round, a step's synchronisation and the next step's transfer do
    not overlap, and the in-node (NVLink-class) links run at ``1 / (1 + share)`` of their rate,
    ``share = fill / (1 + rounds)``, ``rounds = size / (peers x channels x chunk)``, with peers
    the ranks the message is split over (ring, direct and hierarchical: the group; NVLS: the
    node's ranks; tree and CollNet: one, as each channel's share flows down the chain whole).
    The share fades as the pipeline streams. Each candidate is re-costed with the slower in-node
    links through the same formulas, so where a NIC stays the bottleneck nothing changes, and
    more bandwidth never makes a collective slower (nor a larger rack, but for a tree of
    ``comm.tree_shape = "chain"``, as NCCL counts it); the fastest candidate as it runs is
    chosen (with ``fill`` 0: NCCL's tuning model alone)."""
    if t.fill <= 0:
        return candidates()

    def slow(peers: np.ndarray) -> np.ndarray:
        return 1.0 + t.fill / (1.0 + size / (peers * t.channels * t.fill_chunk))

    return candidates(slow(p), slow(np.minimum(L, _NVLS_MAX_ARITY)), slow(np.ones(len(p))))


def busbw_factor(op: str, p: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor."""
    if op == "all_reduce":
        return 2.0 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0


@dataclass
class TableRow:
    """One row of an nccl-tests style table (`nccl_tests_rows`)."""

    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    protocol: str
    #: what sets ``time_us``: "collective" (the device-side cost) or "launch" (the host thread
    #: issuing the collective on its GPUs, nccl-tests' ``-g``)
    bound: str = "collective"


def nccl_tests_rows(spec: HardwareSpec, op: str, ranks: int, sizes: list[int],
                    gpus_per_thread: int = 1) -> list[TableRow]:
    """Predicted nccl-tests rows for ``op`` over ``ranks`` contiguous ranks (node-major, the
    spec's ``network.ranks_per_node`` per node): size as nccl-tests prints it (the whole buffer
    for all_gather / reduce_scatter), algbw = size / time, busbw = algbw x `busbw_factor`.

    ``gpus_per_thread`` is nccl-tests' ``-g``: one host thread launches each iteration's
    collective on that many GPUs in turn, while the GPUs run the previous iteration, so an
    iteration takes at least ``gpus_per_thread x comm.group_launch_us`` (nccl-tests times
    back-to-back iterations; the per-GPU cost of a grouped launch from one thread, calibrated). With one GPU per process (``mpirun ... -g 1``) a launch is far
    below any collective's time and the bound never applies."""
    if op not in OPS:
        raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")
    if gpus_per_thread < 1:
        raise ValueError(f"gpus_per_thread {gpus_per_thread}: must be >= 1")
    k = len(sizes)
    b = np.asarray(sizes, dtype=np.float64)
    c = collective_costs(spec, np.full(k, OPS.index(op)), b, b, np.full(k, ranks))
    device = c.collective_us + c.post_us
    launch = gpus_per_thread * float(spec.value("comm.group_launch_us"))  # type: ignore[arg-type]
    t = np.maximum(device, launch)
    algbw = np.divide(b, t * 1e3, out=np.zeros(k), where=t > 0)
    f = busbw_factor(op, ranks)
    return [TableRow(int(s), float(ti), float(a), float(a * f), ALGORITHMS[ai], PROTOCOLS[pi],
                     "launch" if launch > di else "collective")
            for s, ti, di, a, ai, pi in zip(sizes, t, device, algbw, c.algorithm, c.protocol)]


#: spec keys the collective model reads beyond the per-protocol latencies (for `hw show --vs`)
_MODEL_KEYS = ("network.ranks_per_node", "network.intra_node_GBps", "network.inter_node_GBps",
               "network.intra_node_via_nic", "comm.intra_efficiency", "comm.inter_efficiency",
               "comm.post_us", "comm.channels", "comm.channel_ll_bytes",
               "comm.channel_ll128_bytes", "comm.channel_simple_bytes", "comm.path", "comm.reduction_GBps",
               "comm.fill_chunks", "comm.fill_chunk_bytes", "comm.group_launch_us",
               "comm.message_engines", "comm.engines_per_collective",
               "comm.engine_reduction_GBps", "comm.nvls_efficiency", "comm.nvls_placement",
               "comm.ring_ll_share", "comm.tree_shape",
               "comm.collnet",
               "comm.link_sharing")


def collective_differences(a: HardwareSpec, b: HardwareSpec) -> list[tuple[str, object, object,
                                                                         str]]:
    """(key, value in a, value in b, a's confidence) for every collective-model value that
    differs between two specs: what drives a comparison of their collectives (the rest of the
    machinery is shared). Per-protocol latencies and caps are compared key by key."""
    keys = [k for k in dict.fromkeys([*a.keys(), *b.keys()])
            if k.startswith(("network.", "comm."))
            and (k in _MODEL_KEYS or k.endswith(("_us", "_GBps", "_plateau")))]
    out: list[tuple[str, object, object, str]] = []
    for k in keys:
        va, vb = a.get(k), b.get(k)
        if va != vb:
            out.append((k, "-" if va is None else va, "-" if vb is None else vb,
                        a.confidence(k) if va is not None else "absent"))
    return out
