"""Where each embedding shard lives and which collectives a step needs (TorchRec semantics).

Per sharding (HARDWARE.md 1j):
- ``tw``: a table per rank (balanced by lookups x dim); KJT lengths/values all-to-all, pooled
  all-to-all forward, its transpose backward.
- ``cw``: tables split into column shards placed like tables; collectives as ``tw``.
- ``auto``: a planner's choice, as TorchRec's and HugeCTR's planners make it: each table's cost
  is its lookups x dim (the bytes its kernels move), the heaviest tables are split column-wise
  (2, 4, ... shards of at least `MIN_SHARD_DIM` columns) and the shards placed greedily on the
  least-loaded rank, keeping the split that leaves the smallest maximum per-rank load
  (`balanced_shards`); collectives as ``tw``. Beyond one node it plans hosts the same way and
  splits each host's shards by rows over the host's ranks, with ``twrw``'s collectives (as
  HugeCTR's hierarchical planner places tables per node). ``tw`` stays the naive plan.
- ``rw``: every table split into ``ranks`` row blocks; ids bucketized by block (Zipf skew moves
  them to the first blocks); pooled reduce-scatter forward, all-gather backward.
- ``twrw``: tables per host, rows split over the host's ranks; intra-host reduce-scatter then
  cross-host all-to-all forward, the reverse (all-to-all, intra-host all-gather) backward.
- ``dp``: tables replicated; no input/output distribution; embedding-gradient AllReduce.
All quantities are element counts per rank for one step (arrays of shape ``(ranks,)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mtia_trace.errors import UsageError
from mtia_trace.synth.model import DTYPES, SHARDINGS, Model

IDX_DTYPE = ("long int", "Long", 8)   # KJT values (ids)
LEN_DTYPE = ("int", "Int", 4)         # KJT lengths


@dataclass
class Groups:
    """Process groups of one kind: ``gid[r]`` is rank r's group; ``members[g]`` its ranks."""

    kind: str
    gid: np.ndarray
    members: list[np.ndarray]
    names: list[str]
    desc: str

    @property
    def size(self) -> int:
        return len(self.members[0])


@dataclass
class Collective:
    """One collective of a step: sizes per rank; ``matrix[i, j]`` = elements rank i sends to j."""

    label: str
    op: str           # Collective name as record_param_comms writes it
    c10d: str         # the c10d op that issues it
    dtype: str        # record_param_comms dtype (Float, Long, Int, ...)
    elem_bytes: int
    groups: Groups
    in_nelems: np.ndarray
    out_nelems: np.ndarray
    matrix: np.ndarray | None = None   # all-to-all only, (ranks, group size)


#: Narrowest column shard the ``auto`` planner cuts (FBGEMM's TBE needs dims in multiples of 4;
#: TorchRec's column-wise sharder cuts shards of a set minimum width); assumed.
MIN_SHARD_DIM = 16


@dataclass
class ShardPlan:
    ranks: int
    local_batch: int
    #: embedding work per rank
    tbe_idx: np.ndarray          # ids looked up
    tbe_gather: np.ndarray       # elements gathered (ids x dim)
    tbe_out: np.ndarray          # pooled output elements
    tbe_weights: np.ndarray      # weight elements held
    tbe_feats: np.ndarray        # features (tables or shards) held
    tbe_dim: np.ndarray          # sum of dims of the features held
    tbe_samples: np.ndarray      # samples each feature is looked up for
    fwd_input: list[Collective] = field(default_factory=list)
    fwd_output: list[Collective] = field(default_factory=list)
    bwd_output: list[Collective] = field(default_factory=list)
    emb_grad: list[Collective] = field(default_factory=list)


def world_groups(ranks: int) -> Groups:
    return Groups("world", np.zeros(ranks, np.int64), [np.arange(ranks)], ["0"], "default_pg")


def host_groups(ranks: int, per_host: int) -> tuple[Groups, Groups]:
    hosts = ranks // per_host
    r = np.arange(ranks)
    intra = Groups("intra", r // per_host, [np.arange(h * per_host, (h + 1) * per_host)
                                             for h in range(hosts)],
                   [str(1 + h) for h in range(hosts)], "twrw_intra_host")
    cross = Groups("cross", r % per_host, [np.arange(l, ranks, per_host) for l in range(per_host)],
                   [str(1 + hosts + l) for l in range(per_host)], "twrw_cross_host")
    return intra, cross


def split_counts(total: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Integer split of ``total[t]`` over blocks by ``share[t, k]`` (largest remainder)."""
    raw = total[:, None] * share
    base = np.floor(raw).astype(np.int64)
    rem = (total - base.sum(axis=1)).astype(np.int64)
    order = np.argsort(-(raw - base), axis=1, kind="stable")
    rank_of = np.empty_like(order)
    np.put_along_axis(rank_of, order, np.arange(share.shape[1])[None, :].repeat(len(total), 0), 1)
    return base + (rank_of < rem[:, None])


def block_shares(rows: np.ndarray, blocks: int, zipf: float) -> np.ndarray:
    """Fraction of a table's lookups that fall in each of ``blocks`` row blocks."""
    size = -(-rows // blocks)
    edges = np.minimum(size[:, None] * np.arange(blocks + 1)[None, :], rows[:, None]).astype(float)
    if zipf == 0:
        mass = edges
    elif zipf == 1:
        mass = np.log((edges + 0.5) / 0.5)
    else:
        mass = ((edges + 0.5) ** (1 - zipf) - 0.5 ** (1 - zipf)) / (1 - zipf)
    return np.diff(mass, axis=1) / mass[:, -1:]


def assign(cost: np.ndarray, bins: int) -> np.ndarray:
    """Greedy longest-processing-time placement of items onto ``bins``; returns bin per item."""
    load = np.zeros(bins)
    out = np.empty(len(cost), np.int64)
    for i in sorted(range(len(cost)), key=lambda i: (-cost[i], i)):
        b = int(np.argmin(load))
        out[i] = b
        load[b] += cost[i]
    return out


def _place(cost: np.ndarray, table: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy placement of shards (heaviest first) on the least-loaded rank that holds no other
    shard of the same table; (rank per shard, load per rank)."""
    load = np.zeros(bins)
    out = np.empty(len(cost), np.int64)
    held: list[set[int]] = [set() for _ in range(bins)]
    for i in sorted(range(len(cost)), key=lambda i: (-cost[i], i)):
        order = np.lexsort((np.arange(bins), load))
        b = next((int(b) for b in order if int(table[i]) not in held[b]), int(order[0]))
        out[i] = b
        load[b] += cost[i]
        held[b].add(int(table[i]))
    return out, load


def balanced_shards(pool: np.ndarray, dims: np.ndarray, ranks: int, col_bytes: float,
                    id_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``auto`` plan: column shards per table and the rank of every shard.

    A shard's cost is the bytes its lookups move in one step, forward and backward:
    ``pool x (columns x col_bytes + id_bytes)`` (every column shard of a table reads all of its
    ids). Starting from whole tables, each round places the shards greedily (`_place`) and then
    splits the costliest shard that can still be split in two (twice the shards, at most
    ``ranks``, each at least `MIN_SHARD_DIM` columns wide and the dim divisible). The round
    with the smallest maximum per-rank cost wins (the fewest splits among equals).
    """
    count = np.ones(len(pool), np.int64)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for _ in range(4 * len(pool) + 8):
        table = np.repeat(np.arange(len(pool)), count)
        per = pool * (dims / count * col_bytes + id_bytes)
        owner, load = _place(per[table], table, ranks)
        if len(table) >= ranks and (best is None or load.max() < best[0] * (1 - 1e-9)):
            best = (float(load.max()), count.copy(), owner)
        can = ((count * 2 <= ranks) & (dims % (count * 2) == 0)
               & (dims // (count * 2) >= MIN_SHARD_DIM))
        if not can.any():
            break
        count[int(np.argmax(np.where(can, per, -1.0)))] *= 2
    if best is None:
        raise UsageError(f"--sharding auto: {len(pool)} tables cannot be cut into {ranks} column"
                         f" shards of at least {MIN_SHARD_DIM} columns; use rw, twrw or dp")
    return best[1], best[2]


def local_batch(batch: int, ranks: int) -> int:
    """Each rank's share of the global batch (it must split evenly)."""
    if batch % ranks:
        raise UsageError(f"--batch {batch} is not divisible by --ranks {ranks}; the global batch"
                         " is split evenly over ranks")
    return batch // ranks


def plan(model: Model, ranks: int, sharding: str, batch: int, ranks_per_node: int,
         zipf: float = 0.0, train: bool = True) -> ShardPlan:
    """The embedding placement and distribution collectives of one step."""
    b = local_batch(batch, ranks)
    dims, rows, pool = model.dims, model.rows, model.pooling
    n_t = np.rint(b * pool).astype(np.int64)      # ids per table per rank-local batch
    t_count = len(dims)
    w = world_groups(ranks)
    fb, fdt = model.elem_bytes, _coll_dtype(model)
    # ``auto`` beyond one node plans per host, as HugeCTR's hier_auto does, and splits each
    # host's shards by rows over its ranks (table-row-wise)
    hier = sharding == "auto" and ranks > min(ranks_per_node, ranks)
    if sharding in ("tw", "cw", "auto") and not hier:
        if sharding == "tw":
            if ranks > t_count:
                raise UsageError(f"--sharding tw: --ranks {ranks} exceeds the {t_count} tables;"
                                 " use auto, rw, cw, twrw or dp, or fewer ranks")
            f_table, f_dim = np.arange(t_count), dims
        elif sharding == "cw":
            c = _cw_shards(dims, ranks, t_count)
            f_table, f_dim = np.repeat(np.arange(t_count), c), np.repeat(dims // c, c)
        else:
            c, owner = balanced_shards(pool, dims, ranks, *_lookup_bytes(model, train))
            f_table, f_dim = np.repeat(np.arange(t_count), c), np.repeat(dims // c, c)
        if sharding != "auto":
            owner = assign(pool[f_table] * f_dim + 1e-12 * rows[f_table], ranks)
        onehot = np.zeros((ranks, len(f_table)), np.int64)
        onehot[owner, np.arange(len(f_table))] = 1
        feats = onehot.sum(1)
        d_r = onehot @ f_dim
        ids_r = onehot @ n_t[f_table]
        p = ShardPlan(ranks, b, ids_r * ranks, (onehot @ (n_t[f_table] * f_dim)) * ranks,
                      batch * d_r, onehot @ (rows[f_table] * f_dim), feats, d_r,
                      np.full(ranks, batch))
        p.fwd_input = _kjt(w, np.tile(b * feats, (ranks, 1)), np.tile(ids_r, (ranks, 1)))
        pooled = np.tile((b * d_r)[:, None], (1, ranks))
        p.fwd_output = [_a2a("pooled_embs", w, pooled, fdt, fb)]
        p.bwd_output = [_a2a("pooled_grads", w, pooled.T.copy(), fdt, fb)]
    elif sharding == "rw":
        cnt = split_counts(n_t, block_shares(rows, ranks, zipf))     # (T, ranks)
        ids_r = cnt.sum(0)
        blk = -(-rows // ranks)
        held = np.clip(rows[:, None] - blk[:, None] * np.arange(ranks)[None, :], 0, blk[:, None])
        p = ShardPlan(ranks, b, ids_r * ranks, (dims @ cnt) * ranks,
                      np.full(ranks, batch * int(dims.sum())), dims @ held,
                      np.full(ranks, t_count), np.full(ranks, int(dims.sum())),
                      np.full(ranks, batch))
        p.fwd_input = _kjt(w, np.full((ranks, ranks), b * t_count), np.tile(ids_r, (ranks, 1)))
        d = int(dims.sum())
        p.fwd_output = [_coll("pooled_embs", "_reduce_scatter_base", "c10d::_reduce_scatter_base_",
                              w, np.full(ranks, batch * d), np.full(ranks, b * d), fdt, fb)]
        p.bwd_output = [_coll("pooled_grads", "_allgather_base", "c10d::_allgather_base_",
                              w, np.full(ranks, b * d), np.full(ranks, batch * d), fdt, fb)]
    elif sharding == "twrw" or hier:
        per = min(ranks_per_node, ranks)
        if ranks % per:
            raise UsageError(f"--sharding {sharding}: --ranks {ranks} is not a multiple of the"
                             f" {per} ranks per node of the source hardware; use a multiple")
        hosts = ranks // per
        if hier:
            # the planner over hosts, then every host's shards split by rows over its ranks
            c, host_of = balanced_shards(pool, dims, hosts, *_lookup_bytes(model, train))
            f_table = np.repeat(np.arange(t_count), c)
            f_dim = np.repeat(dims // c, c)
        else:
            if hosts > t_count:
                raise UsageError(f"--sharding twrw: {hosts} hosts exceed the {t_count} tables;"
                                 " use auto, rw or dp, or fewer ranks")
            f_table, f_dim = np.arange(t_count), dims
            host_of = assign(pool * dims + 1e-12 * rows, hosts)
        cnt = split_counts(n_t, block_shares(rows, per, zipf))[f_table]   # (F, per)
        r = np.arange(ranks)
        h_r, l_r = r // per, r % per
        mine = host_of[None, :] == h_r[:, None]                       # (ranks, F)
        ids_r = (mine * cnt[:, l_r].T).sum(1)
        blk = -(-rows // per)
        held = np.clip(rows[:, None] - blk[:, None] * np.arange(per)[None, :], 0,
                       blk[:, None])[f_table]
        d_h = np.bincount(host_of, weights=f_dim, minlength=hosts).astype(np.int64)
        f_h = np.bincount(host_of, minlength=hosts)
        p = ShardPlan(ranks, b, ids_r * ranks,
                      (mine * (f_dim[:, None] * cnt)[:, l_r].T).sum(1) * ranks,
                      batch * d_h[h_r], (mine * (f_dim[:, None] * held)[:, l_r].T).sum(1),
                      f_h[h_r], d_h[h_r], np.full(ranks, batch))
        p.fwd_input = _kjt(w, np.tile(b * f_h[h_r], (ranks, 1)), np.tile(ids_r, (ranks, 1)))
        intra, cross = host_groups(ranks, per)
        d_all = int(dims.sum())
        rs = _coll("pooled_embs_intra", "_reduce_scatter_base", "c10d::_reduce_scatter_base_",
                   intra, batch * d_h[h_r], batch // per * d_h[h_r], fdt, fb)
        ag = _coll("pooled_grads_intra", "_allgather_base", "c10d::_allgather_base_",
                   intra, batch // per * d_h[h_r], batch * d_h[h_r], fdt, fb)
        fwd_x = np.tile((b * d_h[h_r])[:, None], (1, hosts))          # (ranks, hosts)
        p.fwd_output = [rs] + ([_a2a("pooled_embs_cross", cross, fwd_x, fdt, fb,
                                     recv=b * np.tile(d_h, (ranks, 1)))] if hosts > 1 else [])
        p.bwd_output = ([_a2a("pooled_grads_cross", cross, b * np.tile(d_h, (ranks, 1)), fdt, fb,
                              recv=fwd_x)] if hosts > 1 else []) + [ag]
        assert d_h.sum() == d_all
    elif sharding == "dp":
        p = ShardPlan(ranks, b, np.full(ranks, n_t.sum()), np.full(ranks, int(n_t @ dims)),
                      np.full(ranks, b * int(dims.sum())), np.full(ranks, model.embedding_params),
                      np.full(ranks, t_count), np.full(ranks, int(dims.sum())), np.full(ranks, b))
        if train:
            p.emb_grad = [_coll("embedding_grads", "allreduce", "c10d::allreduce_", w,
                                np.full(ranks, model.embedding_params),
                                np.full(ranks, model.embedding_params), fdt, fb)]
    else:
        raise UsageError(f"--sharding {sharding!r} is unknown; allowed: {', '.join(SHARDINGS)}")
    if ranks == 1:
        p.fwd_input, p.fwd_output, p.bwd_output, p.emb_grad = [], [], [], []
    return p


def _lookup_bytes(model: Model, train: bool) -> tuple[float, float]:
    """(bytes per lookup per column, bytes per lookup) the TBE kernels move (workload.py): a
    row read forward, read and written back backward; the id read forward and backward with
    its optimizer state."""
    se = DTYPES[model.table_dtype][0]
    return (3.0 if train else 1.0) * se, float(IDX_DTYPE[2] * (3 if train else 1))


def _coll_dtype(model: Model) -> str:
    return DTYPES[model.dtype][1]


def _cw_shards(dims: np.ndarray, ranks: int, tables: int) -> np.ndarray:
    need = -(-ranks // tables)
    out = np.empty(len(dims), np.int64)
    for i, d in enumerate(dims.tolist()):
        c = next((c for c in range(need, d + 1) if d % c == 0), None)
        if c is None:
            raise UsageError(f"--sharding cw: table {i} (dim {d}) cannot be split into {need}"
                             f" column shards to cover --ranks {ranks}; use rw, twrw or dp")
        out[i] = c
    return out


def _coll(label: str, op: str, c10d: str, g: Groups, n_in: np.ndarray, n_out: np.ndarray,
          dtype: str, eb: int) -> Collective:
    return Collective(label, op, c10d, dtype, eb, g, np.asarray(n_in, np.int64),
                      np.asarray(n_out, np.int64))


def _a2a(label: str, g: Groups, send: np.ndarray, dtype: str, eb: int,
         recv: np.ndarray | None = None) -> Collective:
    """All-to-all where ``send[r, k]`` goes to the k-th member of r's group."""
    send = np.asarray(send, np.int64)
    if recv is None:
        # what r receives from its k-th peer = what that peer sends to r
        recv = send[np.stack(g.members)[g.gid], _position(g)[:, None]]
    return Collective(label, "all_to_allv", "c10d::alltoall_base_", dtype, eb, g,
                      send.sum(1), np.asarray(recv, np.int64).sum(1), send)


def _position(g: Groups) -> np.ndarray:
    pos = np.empty(len(g.gid), np.int64)
    for m in g.members:
        pos[m] = np.arange(len(m))
    return pos


def _kjt(w: Groups, lengths: np.ndarray, ids: np.ndarray) -> list[Collective]:
    """KJT input distribution: lengths then values all-to-all; ``x[i, j]`` sent by i to j."""
    return [_a2a("kjt_lengths", w, lengths, LEN_DTYPE[1], LEN_DTYPE[2]),
            _a2a("kjt_values", w, ids, IDX_DTYPE[1], IDX_DTYPE[2])]
