"""Compute slowed by concurrent communication, per kernel, on a schedule.

Two mechanisms (docs/concepts.md §3, "Compute beside communication"), applied only where a device compute event of a rank overlaps
that rank's communication device events in the schedule:

- **SMs taken by collective CTAs** (``on_compute`` paths): a collective kernel holds
  `channels` SMs exclusively from the moment it is resident on its stream (its own ready time,
  so the span it spins waiting for peers or for its link counts) to its end. A GEMM whose grid
  has ``G`` CTAs runs ``ceil(G / (SM - k)) / ceil(G / SM)`` times longer on its compute part
  while ``k`` SMs are held (wave quantisation: a one-wave GEMM can take 2x, a many-wave GEMM
  ``SM / (SM - k)``). ``G`` comes from the GEMM's recorded shape: output elements
  ``M N = bytes_written / element size`` in ``tile_m x tile_n`` tiles, and when those tiles
  leave SMs idle the kernel splits K to fill them (``min(SM // tiles, ceil(K / split_k_min_k))``
  pieces, ``K = flops / (2 M N)``), as cuBLAS-style split-K / stream-K kernels do. Kernels
  without a shape (elementwise, reductions, embeddings) are taken as many-wave.
- **HBM bandwidth taken by the collective's own traffic** (every path): while a collective
  transfers, it moves ``hbm_bytes_per_wire_byte x wire bytes`` through its rank's HBM over its
  transfer time, ``u`` times the HBM's sustained bandwidth. While it fetches, the kernel draws
  ``d`` times that bandwidth (`compute.hbm_demand`: 1 for streaming work, which is priced at
  it; a latency-bound gather less, the rate Little's law leaves it). HBM delivers 1: while
  ``d + u <= 1`` both get what they ask and the kernel is not slowed; beyond, HBM is shared in
  proportion to demand, the kernel gets ``d / (d + u)`` and its memory time runs ``d + u``
  times longer: ``max(1, d + u)``. A streaming kernel (``d = 1``) takes ``1 + u``
  (``1 / (1 - u)`` for small ``u``, and never starved when the collective alone could
  saturate HBM: ``u >= 1``); the H100 TBE backward (``d = 0.37``) is slowed only by a
  collective drawing more than the 0.63 it leaves. The compute part also pays
  the spec's L2/memory contention ``beta`` (``comm.mem_contention`` on GPUs,
  ``comm.overlap_slowdown`` on offloaded paths) while a transfer runs.

Per overlapping stretch of the schedule (constant set of running collectives) the kernel's time
becomes ``max(c w (1 + beta), t_mem max(1, d + u))`` instead of ``max(c, t_mem)``; its compute part
grows by the first term's excess and its fetch part takes the rest, each weighted by the
fraction of the kernel's span that stretch covers (one correction of the schedule, as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from replay.groups import ranges, runs, segment_cumsum
from replay.hardware.collectives import OPS
from replay.hardware.spec import HardwareSpec


def channels(op: np.ndarray, algorithm: np.ndarray, protocol: np.ndarray | None,
             spec: HardwareSpec) -> np.ndarray:
    """SMs (CTAs) a collective holds while resident, per event: one CTA per channel on
    ``on_compute`` paths (the spec's ``comm.comm_ctas``), none on ``offloaded`` paths.

    ``op`` / ``algorithm`` / ``protocol`` are per-event codes of the collective model; the
    channel count does not depend on them until that model gives channels per algorithm and
    protocol."""
    del algorithm, protocol
    if spec.value("comm.path") == "offloaded":
        return np.zeros(len(op))
    sm = int(spec.value("comm.sm_count"))
    return np.full(len(op), float(min(int(spec.value("comm.comm_ctas")), sm - 1)))


def contention(spec: HardwareSpec) -> float:
    """Fractional slowdown ``beta`` of a compute part while a transfer runs beside it."""
    key = "comm.overlap_slowdown" if spec.value("comm.path") == "offloaded" else "comm.mem_contention"
    return float(spec.value(key))


def wave_ratio(grid: np.ndarray, sm: int, held: np.ndarray) -> np.ndarray:
    """Slowdown of a kernel of ``grid`` CTAs (0 = many waves) when ``held`` of ``sm`` SMs are
    taken: ``ceil(G / (SM - k)) / ceil(G / SM)``."""
    free = np.maximum(sm - held, 1.0)
    g = np.maximum(grid, 1.0)
    exact = np.ceil(g / free) / np.ceil(g / sm)
    return np.where(grid > 0, exact, sm / free)


def gemm_grid(spec: HardwareSpec, flops: np.ndarray, out_elems: np.ndarray) -> np.ndarray:
    """CTAs of a GEMM's grid from its shape (0 where unknown), see the module docstring."""
    tm = float(spec.value("interference.gemm_tile_m"))
    tn = float(spec.value("interference.gemm_tile_n"))
    kmin = float(spec.value("interference.split_k_min_k"))
    sm = float(spec.get("comm.sm_count", 0) or 0)
    known = (out_elems > 0) & (flops > 0)
    mn = np.where(known, out_elems, 1.0)
    tiles = np.ceil(mn / (tm * tn))
    k = flops / (2.0 * mn)
    split = np.ones(len(mn))
    if sm > 0:
        split = np.clip(np.minimum(np.floor(sm / tiles), np.ceil(k / kmin)), 1.0, None)
    return np.where(known, tiles * split, 0.0)


def hbm_share(spec: HardwareSpec, wire_bytes: np.ndarray, transfer_us: np.ndarray) -> np.ndarray:
    """A collective's HBM traffic while it transfers, in units of the sustained HBM bandwidth."""
    bw = float(spec.value("hbm.bandwidth_GBps")) * 1e3 * float(spec.value("hbm.efficiency"))
    per_byte = float(spec.value("interference.hbm_bytes_per_wire_byte"))
    rate = np.divide(per_byte * wire_bytes, transfer_us, out=np.zeros(len(wire_bytes)),
                     where=transfer_us > 0)
    return rate / bw


def many_wave_slowdown(spec: HardwareSpec) -> float:
    """Slowdown of a compute-bound many-wave kernel under one collective: a summary figure."""
    held = channels(np.zeros(1), np.zeros(1), None, spec)
    sm = int(spec.get("comm.sm_count", 0) or 0)
    w = float(wave_ratio(np.zeros(1), sm, held)[0]) if sm and held[0] > 0 else 1.0
    return w * (1.0 + contention(spec)) - 1.0


@dataclass
class Interference:
    """What a spec's interference needs per event, to stretch compute on any schedule."""

    rank: np.ndarray        # per event
    victim: np.ndarray      # device compute events that can be slowed
    grid: np.ndarray        # CTAs of the kernel's grid, 0 = many waves
    mem_share: np.ndarray   # memory time / total time of the event (roofline)
    hbm_demand: np.ndarray  # its HBM traffic while it fetches / sustained HBM bandwidth
    comm: np.ndarray        # communication device events
    held: np.ndarray        # SMs a communication event holds while resident
    hbm: np.ndarray         # its HBM traffic while it transfers / sustained HBM bandwidth
    sm_count: int
    beta: float

    def apply(self, compute: np.ndarray, fetch: np.ndarray, ready: np.ndarray,
              start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(compute, fetch) per event once stretched by the communication it overlaps in the
        schedule (``ready`` / ``start`` / ``end`` per event); unchanged elsewhere."""
        c_out, f_out = compute.astype(np.float64).copy(), fetch.astype(np.float64).copy()
        comm = self.comm & (end > ready)
        if not comm.any() or not self.victim.any():
            return c_out, f_out
        # all ranks at once: every array below is grouped by rank (one stable sort), and each
        # search or running sum stays inside its rank, so the arithmetic per rank is exactly
        # that of a loop over ranks
        cj = np.flatnonzero(comm)
        vi = np.flatnonzero(self.victim & (end > start))
        cj = cj[np.argsort(self.rank[cj], kind="stable")]
        vi = vi[np.argsort(self.rank[vi], kind="stable")]
        cr, vr = self.rank[cj], self.rank[vi]
        # segments of constant (SMs held, HBM share, transfers running) per rank
        a, s, e = ready[cj], np.maximum(start[cj], ready[cj]), end[cj]
        pr, pts = _unique_pairs(np.concatenate([cr, cr, cr]), np.concatenate([a, s, e]))
        held, hbm, xfer = (np.zeros(len(pts)) for _ in range(3))
        ia, is_, ie = np.split(_search(pr, pts, np.concatenate([cr, cr, cr]),
                                       np.concatenate([a, s, e])), 3)
        np.add.at(held, ia, self.held[cj])
        np.add.at(held, ie, -self.held[cj])
        np.add.at(hbm, is_, self.hbm[cj])
        np.add.at(hbm, ie, -self.hbm[cj])
        np.add.at(xfer, is_, 1.0)
        np.add.at(xfer, ie, -1.0)
        bounds = np.flatnonzero(np.r_[True, pr[1:] != pr[:-1], True])  # pr: sorted ranks
        held, hbm, xfer = (segment_cumsum(x, bounds) for x in (held, hbm, xfer))
        # a segment runs from a point to the next point of the same rank
        inner = np.flatnonzero(pr[:-1] == pr[1:])
        live = inner[(held[inner] > 1e-9) | (xfer[inner] > 0.5)]
        sr, seg_s, seg_e = pr[live], pts[live], pts[live + 1]
        held, hbm, xfer = held[live], hbm[live], xfer[live]
        if not len(seg_s) or not len(vi):
            return c_out, np.maximum(f_out, 0.0)
        lo, hi = start[vi], end[vi]
        first = _search(sr, seg_e, vr, lo, side="right")
        last = _search(sr, seg_s, vr, hi, side="left") - 1
        count = np.maximum(last - first + 1, 0)
        if count.sum():
            seg, ev = ranges(first, first + count)
            frac = ((np.minimum(hi[ev], seg_e[seg]) - np.maximum(lo[ev], seg_s[seg])).clip(0)
                    / (hi - lo)[ev])
            k = np.minimum(held[seg], self.sm_count - 1) if self.sm_count else np.zeros(len(seg))
            c, x = compute[vi][ev], fetch[vi][ev]
            t = c + x
            t_mem = np.where(x > 0, t, self.mem_share[vi][ev] * t)
            w = wave_ratio(self.grid[vi][ev], self.sm_count, k) if self.sm_count else 1.0
            new_c = c * w * (1.0 + self.beta * (xfer[seg] > 0.5))
            new_m = t_mem * np.maximum(1.0, self.hbm_demand[vi][ev] + hbm[seg])
            new_t = np.maximum(new_c, new_m)
            c_out[vi] += np.bincount(ev, weights=frac * (new_c - c), minlength=len(vi))
            f_out[vi] += np.bincount(ev, weights=frac * ((new_t - new_c) - x), minlength=len(vi))
        return c_out, np.maximum(f_out, 0.0)


def _unique_pairs(group: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, value) pairs, sorted by group and then value."""
    o = np.lexsort((value, group))
    g, v = group[o], value[o]
    keep = np.ones(len(g), dtype=bool)
    keep[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    return g[keep], v[keep]


def _search(kg: np.ndarray, kv: np.ndarray, qg: np.ndarray, qv: np.ndarray,
            side: Literal["left", "right"] = "left") -> np.ndarray:
    """`np.searchsorted` of each query (group, value) in keys sorted by (group, value): the
    number of keys before it in that order (``side`` as in searchsorted for equal values), so
    within a group it is the group's first key index plus the searchsorted of its values.

    One searchsorted per group of queries (`groups.runs`: groups are ranks, few), not a sort
    of keys and queries together."""
    out = np.empty(len(qv), dtype=np.int64)
    rows, bounds, heads = runs(qg)
    first, end = np.searchsorted(kg, heads, "left"), np.searchsorted(kg, heads, "right")
    for a, b, k0, k1 in zip(bounds[:-1].tolist(), bounds[1:].tolist(), first.tolist(),
                            end.tolist()):
        q = rows[a:b]
        out[q] = k0 + np.searchsorted(kv[k0:k1], qv[q], side=side)
    return out


def wire_bytes(op: np.ndarray, bytes_in: np.ndarray, bytes_out: np.ndarray,
               group: np.ndarray) -> np.ndarray:
    """Bytes one rank sends (and receives) in a collective: the nccl-tests bus-bandwidth
    factors (NVIDIA/nccl-tests doc/PERFORMANCE.md) x the buffer: AllReduce 2(p-1)/p n;
    ReduceScatter, AllGather, AlltoAll (p-1)/p S; Broadcast, Reduce, send/recv n."""
    p = np.maximum(group.astype(np.float64), 1.0)
    n = np.maximum(bytes_in, bytes_out)
    frac = (p - 1) / p
    out = np.where(op == OPS.index("all_reduce"), 2 * frac * n, n)
    out = np.where(op == OPS.index("reduce_scatter"), frac * bytes_in, out)
    out = np.where(op == OPS.index("all_gather"), frac * bytes_out, out)
    out = np.where(op == OPS.index("all_to_all"), frac * n, out)
    return np.where(np.isin(op, (OPS.index("barrier"), OPS.index("unknown"))), 0.0, out)


__all__ = [
    "Interference",
    "channels",
    "contention",
    "gemm_grid",
    "hbm_share",
    "many_wave_slowdown",
    "wave_ratio",
    "wire_bytes",
]
