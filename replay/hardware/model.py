"""The hardware cost model: prices every event of the canonical table on a target spec.

Which events are priced:

- device work (kernels, copies, DMA): roofline from flops/bytes (mode ``roofline``) or the
  measured duration x target/source roofline ratio (mode ``scaled``, keeps the workload's
  measured inefficiency; needs the source hardware: given to the model, or tagged on the
  events by `replay.hardware.source` from ``--source-hw`` or the trace's deviceProperties).
  ``auto`` picks scaled when a source is known and device work was measured, else roofline;
  the notes say which and why. Work without flops/bytes keeps its measured time (x the
  target/source peak ratio of its kind when a source is known). In ``scaled`` mode, compute
  that overlapped communication in the measured trace first loses the source's own overlap
  slowdown (compute part / (1 + s_source x overlapped fraction)); the replay then applies the
  target's where the replayed schedule overlaps (notes: ``source_overlap_removed_us``).
- collectives and p2p: alpha-beta(-gamma) from their bytes (`collectives`) in every mode,
  ``scaled`` included: a measured collective is never carried over or scaled, so replaying a
  trace on the hardware it was measured on keeps its compute but re-costs its communication
  with the target's algorithms (e.g. hierarchical AllReduce, (p-1) alpha for a direct
  all-to-all; docs/hardware.md "The collective model"), posts and link pool; the step time then differs from an
  as-measured replay by however much those differ from what was measured. NIC posts are host
  time; with a loss rate, retransmissions are retry time (`retries`). Each priced collective
  holds one unit of its rank's pool; the scheduler records the wait as queueing. Link sharing
  (``comm.link_sharing``): ``fifo`` (default) admits one collective per rank at a time, each at
  the full link bandwidth; ``split`` admits as many as the message-engine slots (offloaded) or
  channel budget (on-compute) allow, each at 1/slots of the link bandwidth. Either way the
  rank's collectives never move more than its links carry.
- host events keep their measured durations; kernel-launch calls scale by the target/source
  launch overhead when a source is known.
- CPU-only traces (no device events): host ops stay host cost on every target (they keep their
  measured durations; the trace says nothing about how the target's device would run them);
  CPU collectives (gloo) are priced as collectives, so such a trace changes on a target only
  through launch and collective latencies (`CPU_ONLY_NOTE`, printed by ``replay`` and
  ``report``). A what-if can still change host ops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.errors import UsageError
from mtia_trace.schema import (
    COMM_KINDS,
    COMPUTE_KINDS,
    FETCH_KINDS,
    GEMM_KINDS,
    KINDS,
    MEMORY_KINDS,
    TABLE_BYTES_KEY,
)
from replay.costs import COMPONENTS, MEASURED_DUR, EventCosts
from replay.hardware import collectives as coll_mod
from replay.hardware import interference as inter_mod
from replay.hardware.compute import (
    element_bytes,
    is_embedding_backward,
    is_link_copy,
    kind_codes,
    kind_mask,
    peak_flop_per_us,
    roofline,
    zipf_hit_ratio,
)
from replay.hardware.retries import couple, retry_costs, rto_us
from replay.hardware.source import ADVICE, tagged_source
from replay.hardware.spec import (
    COLLNET_KEYS,
    NVLS_KEYS,
    PATH_KEYS,
    REQUIRED_KEYS,
    HardwareSpec,
    load_spec,
)

MODES = ("auto", "roofline", "scaled")
#: the pools of one rank a collective can hold, by `HardwareModel.pool_kind`
POOL_CLASSES = {"links": ("in-node links", "NICs"), "engines": ("message engines",)}


#: What a replay of a trace without device work on a target can change (run.json notes, the
#: replay's output and the report say it).
CPU_ONLY_NOTE = ("no device work in the trace: host ops keep their measured times on every "
                 "target, so it changes on a target only through launch and collective latencies")

def pool_class(pool_kind: str, group: np.ndarray, local: np.ndarray, nodes: np.ndarray,
               ranks_per_node: int) -> np.ndarray:
    """Index into ``POOL_CLASSES[pool_kind]`` of the pool each collective holds: its rank's
    message engines (``engines``: one pool), else the link class it crosses (``links``: the
    in-node links, or the NICs once the group spans nodes). ``local`` / ``nodes`` are
    `collectives.placement`'s (0 where the group's ranks are unknown: taken as contiguous)."""
    if len(POOL_CLASSES[pool_kind]) == 1:
        return np.zeros(len(group), dtype=np.int64)
    p = np.maximum(np.asarray(group, dtype=np.float64), 1.0)
    L, N = np.asarray(local), np.asarray(nodes)
    spans = np.where((L > 0) & (N > 0), N, np.ceil(p / np.minimum(p, ranks_per_node))) > 1
    return spans.astype(np.int64)


#: passes of the inverse that takes the source's interference out of measured work
_INVERSE_PASSES = 3
#: device work the model prices (computation by the roofline, copies by their links)
WORK_KINDS = (*COMPUTE_KINDS, *MEMORY_KINDS)


def _measured_split(kind: np.ndarray, is_dev: np.ndarray, dur: np.ndarray) -> EventCosts:
    """Measured durations split by kind, as `replay.costs.split_by_kind` does (on kind codes)."""
    z = np.zeros(len(dur))
    comm = kind_mask(kind, *COMM_KINDS)
    fetch = kind_mask(kind, *FETCH_KINDS)
    host = ~is_dev & ~comm & ~fetch
    comp = ~(comm | fetch | host)
    return EventCosts(np.where(comp, dur, z), np.where(fetch, dur, z), np.where(comm, dur, z),
                      z.copy(), np.where(host, dur, z))


def _np(events: pa.Table, name: str, dtype: type = np.float64) -> np.ndarray:
    return events.column(name).to_numpy().astype(dtype, copy=False)


class HardwareModel:
    """`replay.costs.CostModel` for one hardware spec."""

    def __init__(self, spec: HardwareSpec, mode: str = "auto", loss_rate: float = 0.0,
                 seed: int = 0, source: HardwareSpec | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"--mode {mode}: unknown costing mode; use one of {', '.join(MODES)}")
        if not 0.0 <= loss_rate < 1.0:
            raise UsageError(f"--loss-rate {loss_rate}: must be in [0, 1)")
        self.spec, self.mode, self.loss_rate, self.seed, self.source = (
            spec, mode, float(loss_rate), int(seed), source)
        self.name = spec.name

    @classmethod
    def create(cls, spec: HardwareSpec | str, mode: str = "auto", loss_rate: float = 0.0,
               seed: int = 0, source: HardwareSpec | str | None = None) -> HardwareModel:
        s = spec if isinstance(spec, HardwareSpec) else load_spec(spec)
        src = source if source is None or isinstance(source, HardwareSpec) else load_spec(source)
        return cls(s, mode, loss_rate, seed, src)

    def launch_latencies(self, events: pa.Table) -> tuple[float | None, float | None]:
        """(source, target) kernel launch latency, us: the specs' ``host.kernel_launch_us``
        (source None when the hardware the trace was measured on is unknown)."""
        source, _why = self._source(events)
        src = float(source.value("host.kernel_launch_us")) if source is not None else None
        return src, float(self.spec.value("host.kernel_launch_us"))

    def overlap_slowdown(self) -> float:
        """Summary figure: slowdown of a compute-bound many-wave kernel beside one collective
        (the replay applies the per-kernel model, `replay.hardware.interference`)."""
        return inter_mod.many_wave_slowdown(self.spec)

    def slots(self) -> int:
        """Collectives one rank's engines (offloaded) or channel budget (on-compute) can run."""
        if self.spec.value("comm.path") == "offloaded":
            return max(1, int(self.spec.value("comm.message_engines"))
                       // max(1, int(self.spec.value("comm.engines_per_collective"))))
        return max(1, int(self.spec.value("comm.concurrent_collectives")))

    def pool_kind(self) -> str:
        """``engines`` (offloaded: one pool of message engines per rank, both link classes) or
        ``links`` (in-node links and NICs are separate pools per rank)."""
        return "engines" if self.spec.value("comm.path") == "offloaded" else "links"

    def link_sharing(self) -> str:
        return str(self.spec.get("comm.link_sharing", "fifo"))

    def pool_capacity(self) -> int:
        """Collectives one rank runs at once: 1 under ``fifo`` link sharing (each is costed at
        the full link bandwidth, so they queue for the links), the slots under ``split`` (each
        then gets 1/slots of the link bandwidth)."""
        return self.slots() if self.link_sharing() == "split" else 1

    def used_keys(self) -> list[str]:
        keys = [*REQUIRED_KEYS, *PATH_KEYS[str(self.spec.value("comm.path"))]]
        keys += [k for k in ("loss.rto_us", "loss.ib_timeout", "loss.rto_model",
                             "loss.adaptive_rto_us", "comm.link_sharing", *NVLS_KEYS,
                             *COLLNET_KEYS)
                 if self.spec.get(k) is not None]
        return keys

    # -- pricing ---------------------------------------------------------------------------
    def _roofline(self, spec: HardwareSpec, kind, flops, brw, copy_bytes, dtype, link, shard,
                  backward):
        """Roofline of events with their rank's embedding shard (bytes, NaN: the spec's):
        compute, fetch and memory time and HBM demand (`compute.hbm_demand`)."""
        hit = _hit_by_shard(spec, shard)
        r = roofline(spec, kind, flops, brw, copy_bytes, peak_flop_per_us(spec, dtype), link, hit,
                     backward)
        return r.compute_us, r.fetch_us, r.memory_us, r.hbm_demand

    def _source(self, events: pa.Table) -> tuple[HardwareSpec | None, str]:
        """The source spec: the one given to the model, else the one tagged on the events."""
        if self.source is not None:
            return self.source, f"source {self.source.name} given"
        name, why = tagged_source(events)
        return (load_spec(name) if name else None), why

    def cost(self, events: pa.Table) -> EventCosts:
        n = events.num_rows
        spec = self.spec
        source, source_why = self._source(events)
        kind = kind_codes(events.column("kind"))
        is_dev = events.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
        dur = _np(events, "dur_us")
        flops = np.nan_to_num(_np(events, "flops"))
        br, bw = np.nan_to_num(_np(events, "bytes_read")), np.nan_to_num(_np(events, "bytes_written"))
        brw, copy_bytes = br + bw, np.maximum(br, bw)
        costs = _measured_split(kind, is_dev, dur)
        notes: dict[str, object] = {"hardware": spec.name, "loss_rate": self.loss_rate,
                                    "seed": self.seed}

        cpu_only = n > 0 and not is_dev.any()
        work = kind_mask(kind, *WORK_KINDS) & is_dev  # a CPU-only trace's host ops stay host
        if cpu_only:
            notes["cpu_only"] = CPU_ONLY_NOTE
        has_data = np.where(kind == KINDS.index("memcpy"), copy_bytes > 0, (flops > 0) | (brw > 0))
        priced = work & has_data
        wdur = dur[work].sum()
        frac = float(dur[priced].sum() / wdur) if wdur > 0 else (
            float(priced.sum() / max(work.sum(), 1)))
        measured = not cpu_only and wdur > 0
        mode = self.mode
        if mode == "scaled" and source is None:
            why = source_why.removesuffix(ADVICE) or "no source given"
            raise UsageError("--mode scaled: the hardware the trace was measured on is unknown "
                             f"({why}); pass --source-hw NAME (e.g. h100) or use --mode roofline")
        if mode == "auto":
            mode = "scaled" if source is not None and measured else "roofline"
            why = (f"source {source.name} ({source_why}) and measured device work: measured "
                   f"times x target/source roofline ratio" if mode == "scaled" else
                   "no device work measured (CPU-only trace)" if source is not None else
                   f"no source hardware ({source_why or 'none given'})")
            notes["mode_reason"] = (f"{why}; events with flops/bytes cover {frac:.0%} of "
                                    f"device-work time")
        notes["mode"] = mode
        notes["priced_work_time_fraction"] = frac  # device-work time with flops/bytes known
        notes["source_hw"] = source.name if source is not None else None
        notes["source_hw_reason"] = source_why
        notes["collective_costing"] = ("alpha-beta on the target in every mode (measured "
                                       "collective durations are not scaled)")
        notes["priced_work_events"] = int(priced.sum())
        notes["unpriced_work_events"] = int((work & ~has_data).sum())

        dtype = events.column("dtype")
        shard = table_shard(events)
        sub = np.flatnonzero(work)
        mem_share, src_mem = np.zeros(n), np.zeros(n)
        demand, src_demand = np.ones(n), np.ones(n)
        if len(sub):
            k, f, b, cb = kind[sub], flops[sub], brw[sub], copy_bytes[sub]
            lk = np.zeros(len(sub), dtype=bool)
            copies = np.flatnonzero(k == KINDS.index("memcpy"))
            if len(copies):
                lk[copies] = is_link_copy(events.column("name").take(pa.array(sub[copies])))
            dt = dtype.take(pa.array(sub))
            bwd = np.zeros(len(sub), dtype=bool)
            emb = np.flatnonzero(k == KINDS.index("embedding"))
            if len(emb):
                bwd[emb] = is_embedding_backward(events.column("name").take(pa.array(sub[emb])))
            tc, tf, tm, dm = self._roofline(spec, k, f, b, cb, dt, lk, shard[sub], bwd)
            d = dur[sub]
            data = has_data[sub]
            if source is not None:
                # pseudo work for events without data: the kind's peak (compute or memory) ratio
                gemm = kind_mask(k, *GEMM_KINDS)
                pf = np.where(data, f, np.where(gemm, 1.0, 0.0))
                pb = np.where(data, b, np.where(gemm, 0.0, 1.0))
                pcb = np.where(data, cb, 1.0)
                ptc, ptf, ptm, _ = self._roofline(spec, k, pf, pb, pcb, dt, lk, shard[sub], bwd)
                stc, stf, stm, sdm = self._roofline(source, k, pf, pb, pcb, dt, lk, shard[sub],
                                                    bwd)
                src_demand[sub] = sdm
                tt, ts = ptc + ptf, stc + stf
                ratio = np.divide(tt, ts, out=np.ones_like(tt), where=ts > 0)
                scaled = d * ratio
                share = np.divide(ptc, tt, out=np.zeros_like(tt), where=tt > 0)
                sc_c, sc_f = scaled * share, scaled * (1.0 - share)
                sc_m = np.divide(ptm, tt, out=np.zeros_like(tt), where=tt > 0)
                src_mem[sub] = np.divide(stm, ts, out=np.zeros_like(ts), where=ts > 0)
            else:
                sc_c = np.where(kind_mask(k, *FETCH_KINDS), 0.0, d)
                sc_f = d - sc_c
                sc_m = np.where(sc_f > 0, 1.0, 0.0)
            use_roof = data if mode == "roofline" else np.zeros(len(sub), dtype=bool)
            compute = np.where(use_roof, tc, sc_c)
            fetch = np.where(use_roof, tf, sc_f)
            roof_t = tc + tf
            mem_share[sub] = np.where(use_roof, np.divide(tm, roof_t, out=np.zeros_like(tm),
                                                          where=roof_t > 0), sc_m)
            demand[sub] = dm
            for name in COMPONENTS:
                getattr(costs, f"{name}_us")[sub] = 0.0
            costs.compute_us[sub] = compute
            costs.fetch_us[sub] = fetch

        comm = self._comm_inputs(events, kind, is_dev, cpu_only)
        if mode == "scaled" and source is not None:
            self._remove_source_slowdown(events, kind, is_dev, source, src_mem, src_demand,
                                         comm, costs, notes)

        # kernel-launch calls follow the target's launch overhead when the source is known
        if source is not None:
            rt = np.flatnonzero(kind == KINDS.index("runtime"))
            names = events.column("name").take(pa.array(rt))
            launch = rt[pc.fill_null(pc.match_substring_regex(names, "(?i)launch"), False)
                        .to_numpy(zero_copy_only=False)]
            costs.host_us[launch] = dur[launch] * (float(spec.value("host.kernel_launch_us"))
                                                   / float(source.value("host.kernel_launch_us")))

        coll = self._cost_collectives(events, comm, costs, notes)
        costs.interference = self.interference(spec, events, kind, is_dev, mem_share, demand,
                                               comm, coll)
        notes["overlap_slowdown"] = self.overlap_slowdown()
        notes["interference"] = self._interference_notes(costs.interference)
        known = np.isfinite(shard)
        notes["embedding_working_set"] = (
            {"from": "trace embedding shapes (per-rank shard)",
             "GB_min": float(np.nanmin(shard) / 1e9), "GB_max": float(np.nanmax(shard) / 1e9)}
            if known.any() else {"from": "spec cache.working_set_GB",
                                 "GB": float(spec.value("cache.working_set_GB"))})
        hits = _hit_by_shard(spec, shard[known]) if known.any() else None
        notes["embedding_cache_hit_ratio"] = (float(np.mean(hits)) if hits is not None
                                              else zipf_hit_ratio(spec))
        notes["assumed"] = [k for k in self.used_keys() if k in set(spec.assumed())]
        costs.notes = notes
        return costs

    def _remove_source_slowdown(self, events: pa.Table, kind: np.ndarray, is_dev: np.ndarray,
                                source: HardwareSpec, src_mem: np.ndarray,
                                src_demand: np.ndarray, comm: _Comm | None,
                                costs: EventCosts, notes: dict[str, object]) -> None:
        """Scaled compute and fetch carry the source's own interference where a kernel
        overlapped communication in the measured trace (needs the measured schedule: the
        costing input's `MEASURED_DUR`). The source's model applied to the measured schedule
        gives each part's stretch ``r``; the part is divided by it (first-order inverse), so
        the replay's stretch by the target's interference is not applied on top of the
        source's."""
        notes["source_overlap_slowdown"] = inter_mod.many_wave_slowdown(source)
        notes["source_overlap_removed_events"] = 0
        notes["source_overlap_removed_us"] = 0.0
        if MEASURED_DUR not in events.schema.names:
            return
        ts = _np(events, "ts_us")
        measured = _np(events, MEASURED_DUR)
        end = ts + measured
        start = ts.copy()
        coll = None
        if comm is not None:
            c = coll_mod.collective_costs(source, comm.op, comm.bytes_in, comm.bytes_out,
                                          comm.group, local=comm.local, nodes=comm.nodes)
            coll = c
            # the transfer is the end of the measured kernel; before it, the wait for peers
            transfer = _np(events, "dur_us")[comm.idx]
            start[comm.idx] = np.maximum(ts[comm.idx], end[comm.idx] - transfer)
        inter = self.interference(source, events, kind, is_dev, src_mem, src_demand, comm, coll)
        c0, f0 = costs.compute_us.copy(), costs.fetch_us.copy()
        rc, rf = np.ones_like(c0), np.ones_like(f0)
        span = end.copy()
        for _ in range(_INVERSE_PASSES):
            # each part's stretch, for the kernel at its measured start with its clean length
            c1, f1 = inter.apply(c0 / rc, f0 / rf, ts, start, span)
            rc = np.maximum(np.divide(c1, c0 / rc, out=np.ones_like(c0), where=c0 > 0), 1.0)
            rf = np.maximum(np.divide(f1, f0 / rf, out=np.ones_like(f0), where=f0 > 0), 1.0)
            work = inter.victim
            span = np.where(work, ts + (c0 / rc + f0 / rf), end)
        costs.compute_us = c0 / rc
        costs.fetch_us = f0 / rf
        changed = (rc > 1.0) | (rf > 1.0)
        notes["source_overlap_removed_events"] = int(changed.sum())
        notes["source_overlap_removed_us"] = float((c0 + f0 - costs.compute_us
                                                    - costs.fetch_us).sum())

    def interference(self, spec: HardwareSpec, events: pa.Table, kind: np.ndarray,
                     is_dev: np.ndarray, mem_share: np.ndarray, demand: np.ndarray,
                     comm: _Comm | None,
                     coll: coll_mod.CollectiveCost | None) -> inter_mod.Interference:
        """Per-event inputs of ``spec``'s interference model (`replay.hardware.interference`)."""
        n = events.num_rows
        sm = int(spec.get("comm.sm_count", 0) or 0) if spec.value("comm.path") == "on_compute" else 0
        gemm = is_dev & kind_mask(kind, *GEMM_KINDS)
        grid = np.zeros(n)
        if sm and gemm.any():
            gi = np.flatnonzero(gemm)
            out = _np(events, "bytes_written")[gi] / element_bytes(
                events.column("dtype").take(pa.array(gi)))
            grid[gi] = inter_mod.gemm_grid(spec, np.nan_to_num(_np(events, "flops")[gi]),
                                           np.nan_to_num(out))
        held, hbm, is_comm = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
        if comm is not None and coll is not None:
            i = comm.idx[comm.known]
            is_comm[i] = True
            held[i] = inter_mod.channels(comm.op, coll.algorithm, coll.protocol, spec)[comm.known]
            wire = inter_mod.wire_bytes(comm.op, comm.bytes_in, comm.bytes_out, comm.group)
            hbm[i] = inter_mod.hbm_share(spec, wire, coll.collective_us)[comm.known]
        return inter_mod.Interference(
            rank=_np(events, "rank", np.int64), victim=is_dev & kind_mask(kind, *COMPUTE_KINDS),
            grid=grid, mem_share=mem_share, hbm_demand=demand, comm=is_comm, held=held, hbm=hbm, sm_count=sm,
            beta=inter_mod.contention(spec))

    @staticmethod
    def _interference_notes(it: inter_mod.Interference) -> dict[str, object]:
        g = it.grid[it.victim & (it.grid > 0)]
        return {"gemm_kernels_with_grid": len(g),
                "gemm_grid_median_ctas": float(np.median(g)) if len(g) else None,
                "collective_sms_held_max": float(it.held.max()) if len(it.held) else 0.0,
                "collective_hbm_share_max": float(it.hbm.max()) if len(it.hbm) else 0.0,
                "transfer_contention": it.beta}

    def _comm_inputs(self, events: pa.Table, kind: np.ndarray, is_dev: np.ndarray,
                     cpu_only: bool) -> _Comm | None:
        """The priced collectives' per-event inputs (None when the trace has none)."""
        n = events.num_rows
        comm = kind_mask(kind, *COMM_KINDS) & (is_dev | cpu_only)
        idx = np.flatnonzero(comm)
        if not len(idx):
            return None
        rank = _np(events, "rank", np.int64)
        take = pa.array(idx)
        op = coll_mod.op_codes(events.column("coll_op").take(take))
        bin_ = np.nan_to_num(_np(events, "coll_bytes_in")[idx])
        bout = np.nan_to_num(_np(events, "coll_bytes_out")[idx])
        group = _np(events, "group_size", np.int64)[idx]
        nranks = int((np.bincount(rank[rank >= 0]) > 0).sum()) if (rank >= 0).any() else 1
        p_rec, L, N = coll_mod.placement(events.column("pg_ranks").take(take), rank[idx],
                                         int(self.spec.value("network.ranks_per_node")))
        group = np.where(group > 0, group, np.where(p_rec > 0, p_rec, max(nranks, 2)))
        known = (bin_ + bout > 0) | (op == coll_mod.OPS.index("barrier"))
        del n
        return _Comm(idx, op, bin_, bout, group, L, N, known)

    def _cost_collectives(self, events: pa.Table, comm: _Comm | None, costs: EventCosts,
                          notes: dict[str, object]) -> coll_mod.CollectiveCost | None:
        n = events.num_rows
        rank = _np(events, "rank", np.int64)
        cap = self.pool_capacity()
        classes = len(POOL_CLASSES[self.pool_kind()])
        nrank = int(rank.max()) + 1 if n else 0
        costs.resource = np.full(n, -1, dtype=np.int32)
        costs.resource_capacity = np.full(nrank * classes, cap, dtype=np.int32)
        notes["collective_pool"] = {"per": "rank", "pools": list(POOL_CLASSES[self.pool_kind()]),
                                    "capacity": cap, "link_sharing": self.link_sharing(),
                                    "slots": self.slots(),
                                    "units": "message-engine slots"
                                    if self.spec.value("comm.path") == "offloaded"
                                    else "concurrent collectives"}
        if comm is None:
            return None
        idx, known = comm.idx, comm.known
        notes["group_placement"] = {"from_pg_ranks": int((comm.local > 0).sum()),
                                    "assumed_contiguous": int((comm.local == 0).sum())}
        notes["unpriced_collectives"] = int((~known).sum())
        share = cap if self.link_sharing() == "split" else 1
        c = coll_mod.collective_costs(self.spec, comm.op, comm.bytes_in, comm.bytes_out,
                                      comm.group, local=comm.local, nodes=comm.nodes, share=share)
        sel = idx[known]
        for name in COMPONENTS:
            getattr(costs, f"{name}_us")[sel] = 0.0
        costs.collective_us[sel] = c.collective_us[known]
        costs.host_us[sel] = c.post_us[known]
        rng = np.random.default_rng(self.seed)
        u = rng.random((3, len(idx)))
        own = retry_costs(self.spec, self.loss_rate, c.nic_bytes, c.nic_messages, c.nic_bw, u[:2])
        own = np.where(known, own, 0.0)
        retry = couple(comm.op, _instances(events, idx), own, u[2])
        costs.retry_us[sel] = retry[known]
        notes["retry_own_us"] = float(own.sum())
        notes["retry_from_peers_us"] = float((retry - own).sum())
        rpn = int(self.spec.value("network.ranks_per_node"))  # type: ignore[call-overload]
        cls = pool_class(self.pool_kind(), comm.group, comm.local, comm.nodes, rpn)
        costs.resource[sel] = (rank[sel] * classes + cls[known]).astype(np.int32)
        chosen = [f"{a}/{p}" for a, p in zip(np.array(coll_mod.ALGORITHMS)[c.algorithm[known]],
                                             np.array(coll_mod.PROTOCOLS)[c.protocol[known]])]
        names, counts = np.unique(np.array(chosen, dtype=object), return_counts=True) \
            if chosen else (np.array([]), np.array([]))
        notes["collective_algorithms"] = {str(a): int(k) for a, k in zip(names, counts)}
        notes["loss_recovery"] = str(self.spec.value("loss.recovery"))
        notes["rto_us"] = rto_us(self.spec)
        return c


def _instances(events: pa.Table, idx: np.ndarray) -> np.ndarray:
    """Collective instance per event of ``idx`` (same process group and sequence number, as the
    graph matches them); -1 where either is unknown."""
    pg = events.column("pg").take(pa.array(idx))
    seq = pc.fill_null(events.column("coll_seq"), -1).to_numpy().astype(np.int64)[idx]
    enc = pc.dictionary_encode(pc.fill_null(pg.cast(pa.string()), "\x00").combine_chunks())
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    known = np.asarray(pg.is_valid()) & (seq >= 0)
    _, inst = np.unique(np.stack([code, seq]), axis=1, return_inverse=True)
    return np.where(known, inst.ravel(), -1)


def table_shard(events: pa.Table) -> np.ndarray:
    """Per event: bytes of its rank's embedding shard as the ingest recorded it
    (`schema.TABLE_BYTES_KEY`); NaN where unknown."""
    meta = (events.schema.metadata or {}).get(TABLE_BYTES_KEY)
    out = np.full(events.num_rows, np.nan)
    if not meta or not events.num_rows:
        return out
    per = {int(k): float(v) for k, v in json.loads(meta).items()}
    rank = _np(events, "rank", np.int64)
    lut = np.full(int(max(rank.max(), max(per))) + 1, np.nan)
    for r, b in per.items():
        if r >= 0:
            lut[r] = b
    ok = rank >= 0
    out[ok] = lut[rank[ok]]
    return out


def _hit_by_shard(spec: HardwareSpec, shard: np.ndarray) -> np.ndarray:
    """Cache-hit ratio per event from its shard (the spec's working set where NaN); one
    evaluation per distinct shard size."""
    vals, inv = np.unique(np.nan_to_num(shard, nan=-1.0), return_inverse=True)
    hits = np.array([zipf_hit_ratio(spec, None if v < 0 else v) for v in vals.tolist()])
    return hits[inv.ravel()] if len(vals) else np.zeros(0)


@dataclass
class _Comm:
    """Per priced collective event (indices ``idx`` into the table) the collective model's inputs."""

    idx: np.ndarray
    op: np.ndarray
    bytes_in: np.ndarray
    bytes_out: np.ndarray
    group: np.ndarray
    local: np.ndarray
    nodes: np.ndarray
    known: np.ndarray
