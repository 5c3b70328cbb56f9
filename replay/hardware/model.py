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
  all-to-all, HARDWARE.md 2.4), posts and link pool; the step time then differs from an
  as-measured replay by however much those differ from what was measured. NIC posts are host
  time; with a loss rate, retransmissions are retry time (`retries`). Each priced collective
  holds one unit of its rank's pool; the scheduler records the wait as queueing. Link sharing
  (``comm.link_sharing``): ``fifo`` (default) admits one collective per rank at a time, each at
  the full link bandwidth; ``split`` admits as many as the message-engine slots (offloaded) or
  channel budget (on-compute) allow, each at 1/slots of the link bandwidth. Either way the
  rank's collectives never move more than its links carry.
- host events keep their measured durations; kernel-launch calls scale by the target/source
  launch overhead when a source is known.
- CPU-only traces (no device events): leaf host ops with flops/bytes are the work the target
  would run; they are priced like device work plus one kernel launch (host time); CPU
  collectives (gloo) are priced as collectives.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.errors import UsageError
from mtia_trace.schema import KINDS
from replay.costs import COMPUTE_KINDS, MEASURED_DUR, EventCosts
from replay.hardware import collectives as coll_mod
from replay.hardware.compute import (
    GEMM_KINDS,
    ROOFLINE_KINDS,
    is_link_copy,
    kind_codes,
    kind_mask,
    peak_flop_per_us,
    roofline,
    zipf_hit_ratio,
)
from replay.hardware.retries import retry_costs, rto_us
from replay.hardware.source import ADVICE, tagged_source
from replay.hardware.spec import (
    COLLNET_KEYS,
    NVLS_KEYS,
    PATH_KEYS,
    REQUIRED_KEYS,
    HardwareSpec,
    load_spec,
)
from replay.intervals import overlap_fraction

MODES = ("auto", "roofline", "scaled")
#: the pools of one rank a collective can hold, by `HardwareModel.pool_kind`
POOL_CLASSES = {"links": ("in-node links", "NICs"), "engines": ("message engines",)}
WORK_KINDS = (*ROOFLINE_KINDS, "memcpy", "memset")
COMM_KINDS = ("collective", "p2p")


def sm_share_slowdown(spec: HardwareSpec) -> float:
    """Mean slowdown of a GEMM overlapping on-compute collectives (HARDWARE.md 2.3).

    The GEMM runs on SM - k units: its tile waves grow from ceil(T / SM) to ceil(T / (SM - k)),
    averaged over tile counts T uniform in 1 .. waves_max x SM, times (1 + memory contention).
    """
    sm = int(spec.value("comm.sm_count"))
    k = min(int(spec.value("comm.comm_ctas")), sm - 1)
    tiles = np.arange(1, int(spec.value("comm.gemm_waves_max")) * sm + 1)
    waves = np.ceil(tiles / (sm - k)) / np.ceil(tiles / sm)
    return float(waves.mean() * (1.0 + float(spec.value("comm.mem_contention"))) - 1.0)


def _measured_split(kind: np.ndarray, is_dev: np.ndarray, dur: np.ndarray) -> EventCosts:
    """Measured durations split by kind, as `replay.costs.split_by_kind` does (on kind codes)."""
    z = np.zeros(len(dur))
    comm = kind_mask(kind, *COMM_KINDS)
    fetch = kind_mask(kind, "memcpy", "memset", "embedding")
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
        if self.spec.value("comm.path") == "offloaded":
            return float(self.spec.value("comm.overlap_slowdown"))
        return sm_share_slowdown(self.spec)

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
        keys += [k for k in ("loss.rto_us", "loss.ib_timeout", "comm.link_sharing",
                             *NVLS_KEYS, *COLLNET_KEYS)
                 if self.spec.get(k) is not None]
        return keys

    # -- pricing ---------------------------------------------------------------------------
    def _roofline(self, spec: HardwareSpec, kind, flops, brw, copy_bytes, dtype, link) -> np.ndarray:
        r = roofline(spec, kind, flops, brw, copy_bytes, peak_flop_per_us(spec, dtype), link)
        return r.compute_us, r.fetch_us

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
        work = kind_mask(kind, *WORK_KINDS)
        if cpu_only:
            parent = _np(events, "parent_id", np.int64)
            is_parent = np.zeros(n, dtype=bool)
            is_parent[parent[(parent >= 0) & (parent < n)]] = True
            work &= ~is_parent & ((flops > 0) | (brw > 0))
            notes["cpu_only"] = ("no device events: leaf host ops with flops/bytes priced as "
                                 "target device work plus one kernel launch each")
        else:
            work &= is_dev
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
        sub = np.flatnonzero(work)
        if len(sub):
            k, f, b, cb = kind[sub], flops[sub], brw[sub], copy_bytes[sub]
            lk = np.zeros(len(sub), dtype=bool)
            copies = np.flatnonzero(k == KINDS.index("memcpy"))
            if len(copies):
                lk[copies] = is_link_copy(events.column("name").take(pa.array(sub[copies])))
            dt = dtype.take(pa.array(sub))
            tc, tf = self._roofline(spec, k, f, b, cb, dt, lk)
            d = dur[sub]
            data = has_data[sub]
            if source is not None:
                # pseudo work for events without data: the kind's peak (compute or memory) ratio
                gemm = kind_mask(k, *GEMM_KINDS)
                pf = np.where(data, f, np.where(gemm, 1.0, 0.0))
                pb = np.where(data, b, np.where(gemm, 0.0, 1.0))
                pcb = np.where(data, cb, 1.0)
                ptc, ptf = self._roofline(spec, k, pf, pb, pcb, dt, lk)
                stc, stf = self._roofline(source, k, pf, pb, pcb, dt, lk)
                tt, ts = ptc + ptf, stc + stf
                ratio = np.divide(tt, ts, out=np.ones_like(tt), where=ts > 0)
                scaled = d * ratio
                share = np.divide(ptc, tt, out=np.zeros_like(tt), where=tt > 0)
                sc_c, sc_f = scaled * share, scaled * (1.0 - share)
            else:
                sc_c = np.where(kind_mask(k, "memcpy", "memset", "embedding"), 0.0, d)
                sc_f = d - sc_c
            use_roof = data if mode == "roofline" else np.zeros(len(sub), dtype=bool)
            compute = np.where(use_roof, tc, sc_c)
            fetch = np.where(use_roof, tf, sc_f)
            for name in ("compute", "fetch", "collective", "retry", "host"):
                getattr(costs, f"{name}_us")[sub] = 0.0
            costs.compute_us[sub] = compute
            costs.fetch_us[sub] = fetch
            if cpu_only:
                costs.host_us[sub] = float(spec.value("host.kernel_launch_us"))

        if mode == "scaled" and source is not None:
            self._remove_source_slowdown(events, kind, is_dev, source, costs, notes)

        # kernel-launch calls follow the target's launch overhead when the source is known
        if source is not None:
            rt = np.flatnonzero(kind == KINDS.index("runtime"))
            names = events.column("name").take(pa.array(rt))
            launch = rt[pc.fill_null(pc.match_substring_regex(names, "(?i)launch"), False)
                        .to_numpy(zero_copy_only=False)]
            costs.host_us[launch] = dur[launch] * (float(spec.value("host.kernel_launch_us"))
                                                   / float(source.value("host.kernel_launch_us")))

        self._cost_collectives(events, kind, is_dev, cpu_only, costs, notes)
        notes["overlap_slowdown"] = self.overlap_slowdown()
        notes["embedding_cache_hit_ratio"] = zipf_hit_ratio(spec)
        notes["assumed"] = [k for k in self.used_keys() if k in set(spec.assumed())]
        costs.notes = notes
        return costs

    def _remove_source_slowdown(self, events: pa.Table, kind: np.ndarray, is_dev: np.ndarray,
                                source: HardwareSpec, costs: EventCosts,
                                notes: dict[str, object]) -> None:
        """Scaled compute carries the source's own overlap slowdown where a kernel overlapped
        communication in the measured trace: divide its compute part by ``1 + s_source x f``
        (``f``: its overlapped fraction in the measured schedule, same rank), so the replay's
        stretch by the target's slowdown is not applied on top of the source's."""
        s_src = HardwareModel(source).overlap_slowdown()
        m = is_dev & kind_mask(kind, *COMPUTE_KINDS)
        removed, count = 0.0, 0
        if s_src > 0 and m.any():
            ts = _np(events, "ts_us")
            dur = _np(events, MEASURED_DUR if MEASURED_DUR in events.schema.names else "dur_us")
            f = overlap_fraction(events, ts, ts + dur)
            m &= f > 0
            before = costs.compute_us[m]
            after = before / (1.0 + s_src * f[m])
            costs.compute_us[m] = after
            removed, count = float((before - after).sum()), int(m.sum())
        notes["source_overlap_slowdown"] = s_src
        notes["source_overlap_removed_events"] = count
        notes["source_overlap_removed_us"] = removed

    def _cost_collectives(self, events: pa.Table, kind: np.ndarray, is_dev: np.ndarray,
                          cpu_only: bool, costs: EventCosts, notes: dict[str, object]) -> None:
        n = events.num_rows
        comm = kind_mask(kind, *COMM_KINDS) & (is_dev | cpu_only)
        idx = np.flatnonzero(comm)
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
        if not len(idx):
            return
        take = pa.array(idx)
        op = coll_mod.op_codes(events.column("coll_op").take(take))
        bin_ = np.nan_to_num(_np(events, "coll_bytes_in")[idx])
        bout = np.nan_to_num(_np(events, "coll_bytes_out")[idx])
        group = _np(events, "group_size", np.int64)[idx]
        nranks = int((np.bincount(rank[rank >= 0]) > 0).sum()) if (rank >= 0).any() else 1
        rpn = int(self.spec.value("network.ranks_per_node"))  # type: ignore[call-overload]
        p_rec, L, N = coll_mod.placement(events.column("pg_ranks").take(take), rank[idx], rpn)
        group = np.where(group > 0, group, np.where(p_rec > 0, p_rec, max(nranks, 2)))
        notes["group_placement"] = {"from_pg_ranks": int((L > 0).sum()),
                                    "assumed_contiguous": int((L == 0).sum())}
        known = (bin_ + bout > 0) | (op == coll_mod.OPS.index("barrier"))
        notes["unpriced_collectives"] = int((~known).sum())
        share = cap if self.link_sharing() == "split" else 1
        c = coll_mod.collective_costs(self.spec, op, bin_, bout, group, local=L, nodes=N,
                                      share=share)
        sel = idx[known]
        for name in ("compute", "fetch", "collective", "retry", "host"):
            getattr(costs, f"{name}_us")[sel] = 0.0
        costs.collective_us[sel] = c.collective_us[known]
        costs.host_us[sel] = c.post_us[known]
        rng = np.random.default_rng(self.seed)
        u = rng.random((2, len(idx)))
        retry = retry_costs(self.spec, self.loss_rate, c.nic_bytes, c.nic_messages, c.nic_bw, u)
        costs.retry_us[sel] = retry[known]
        # the pool a collective holds: its rank's message engines (offloaded), else the link
        # class it crosses (in-node links, or the NICs once the group spans nodes)
        p_ev = np.maximum(group.astype(np.float64), 1.0)
        spans = np.where((L > 0) & (N > 0), N, np.ceil(p_ev / np.minimum(p_ev, rpn))) > 1
        cls = np.zeros(len(idx), dtype=np.int64) if classes == 1 else spans.astype(np.int64)
        costs.resource[sel] = (rank[sel] * classes + cls[known]).astype(np.int32)
        chosen = [f"{a}/{p}" for a, p in zip(np.array(coll_mod.ALGORITHMS)[c.algorithm[known]],
                                             np.array(coll_mod.PROTOCOLS)[c.protocol[known]])]
        names, counts = np.unique(np.array(chosen, dtype=object), return_counts=True) \
            if chosen else (np.array([]), np.array([]))
        notes["collective_algorithms"] = {str(a): int(k) for a, k in zip(names, counts)}
        notes["loss_recovery"] = str(self.spec.value("loss.recovery"))
        notes["rto_us"] = rto_us(self.spec)
