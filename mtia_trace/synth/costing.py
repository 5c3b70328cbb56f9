"""Durations on the source hardware by roofline, from a `replay.hardware` spec.

Kernels: ``max(flops / (peak * eff), bytes / (hbm * eff_mem))``, embedding gathers at the spec's
random-access efficiency. Collectives: latency per algorithm step plus bytes over the intra-node
(NVLink) or inter-node (NIC) bandwidth, each scaled by the spec's achieved efficiency.
Host costs (dispatch, launches) come from the spec's ``host.kernel_launch_us``; the few host
constants below are workload assumptions, not hardware numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtia_trace.errors import HardwareSpecError
from mtia_trace.synth.sharding import Collective

#: Assumed host-side costs of a PyTorch eager step (Python + dispatcher), in us.
HOST_OP_US = 6.0          # per aten op level (dispatch before its first launch)
HOST_POST_US = 1.0        # after an op's last launch
HOST_GAP_US = 2.0         # between top-level ops (Python)
RUNTIME_CALL_US = 1.5     # cudaEventRecord / cudaStreamWaitEvent
STEP_GAP_US = 40.0        # between steps (data loading, pipeline bookkeeping)
#: Assumed device-side floor of one kernel, in us.
MIN_KERNEL_US = 1.5
#: Seeded multiplicative jitter (lognormal sigma): device kernels, host ops.
DEVICE_JITTER = 0.03
HOST_JITTER = 0.15


@dataclass(frozen=True)
class SourceHardware:
    """The handful of spec values the generator uses, read once."""

    name: str
    peak_fp32: float   # flop/us
    peak_bf16: float
    eff_gemm: float
    eff_other: float
    hbm: float         # B/us, streaming
    gather: float      # B/us, random rows
    launch_us: float
    ranks_per_node: int
    intra: float       # B/us per rank, achieved
    inter: float
    latency_us: float
    inter_latency_us: float
    base_latency_us: float
    device_name: str
    hbm_bytes: float

    @classmethod
    def load(cls, name: str) -> SourceHardware:
        try:
            from replay.hardware import load_spec
        except ImportError as exc:  # pragma: no cover - replay ships with the package
            raise HardwareSpecError(f"--source-hw {name}: hardware specs unavailable ({exc})") from None
        spec = load_spec(name)
        v, g = spec.value, spec.get
        hbm = float(v("hbm.bandwidth_GBps")) * 1e3
        return cls(
            name=str(getattr(spec, "name", name)),
            peak_fp32=float(v("compute.peak_tflops_fp32")) * 1e6,
            peak_bf16=float(v("compute.peak_tflops_bf16")) * 1e6,
            eff_gemm=float(v("compute.efficiency_gemm")),
            eff_other=float(g("compute.efficiency_other", v("compute.efficiency_gemm"))),
            hbm=hbm * float(v("hbm.efficiency")),
            gather=hbm * float(v("hbm.gather_efficiency")),
            launch_us=float(v("host.kernel_launch_us")),
            ranks_per_node=int(v("network.ranks_per_node")),
            intra=float(v("network.intra_node_GBps")) * 1e3 * float(g("comm.intra_efficiency", 1.0)),
            inter=float(v("network.inter_node_GBps")) * 1e3 * float(g("comm.inter_efficiency", 1.0)),
            latency_us=float(v("network.latency_us")),
            inter_latency_us=float(g("network.inter_latency_us", v("network.latency_us"))),
            base_latency_us=float(g("comm.base_latency_us", 0.0)),
            device_name=str(getattr(spec, "description", name)).split(":")[0],
            hbm_bytes=float(g("hbm.capacity_GB", 0.0)) * 1e9,
        )

    def kernel_us(self, kind: str, flops: np.ndarray, nbytes: np.ndarray, bf16: bool) -> np.ndarray:
        """Roofline time of device kernels of one kind."""
        flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
        if kind == "embedding":
            t = nbytes / self.gather
        elif kind == "gemm":
            peak = self.peak_bf16 if bf16 else self.peak_fp32
            t = np.maximum(flops / (peak * self.eff_gemm), nbytes / self.hbm)
        else:
            t = np.maximum(flops / (self.peak_fp32 * self.eff_other), nbytes / self.hbm)
        return np.maximum(t, MIN_KERNEL_US)

    def collective_us(self, c: Collective) -> np.ndarray:
        """Transfer time per rank of one collective (before waiting for peers)."""
        g = c.groups
        members = np.stack(g.members)[g.gid]                     # (ranks, size)
        node = members // self.ranks_per_node
        own = (np.arange(len(g.gid)) // self.ranks_per_node)[:, None]
        p = g.size
        nodes = len(np.unique(node[0]))
        per_node = -(-p // nodes)
        if c.matrix is not None:
            b = c.matrix * c.elem_bytes
            me = members == np.arange(len(g.gid))[:, None]
            same = (node == own) & ~me
            t_in = (b * same).sum(1) / self.intra
            t_out = (b * (node != own)).sum(1) / (self.inter * 1.0)
            lat = self.base_latency_us + (self.latency_us if nodes == 1 else self.inter_latency_us)
            return lat + np.maximum(t_in, t_out)
        size = np.maximum(c.in_nelems, c.out_nelems) * float(c.elem_bytes)
        factor = 2.0 * (p - 1) / p if c.op == "allreduce" else (p - 1) / p
        bw = self.intra if nodes == 1 else min(self.intra, per_node * self.inter)
        steps_intra, steps_inter = per_node - 1, nodes - 1
        if c.op == "allreduce":
            steps_intra, steps_inter = 2 * steps_intra, 2 * steps_inter
        lat = (self.base_latency_us + steps_intra * self.latency_us
               + steps_inter * self.inter_latency_us)
        return lat + factor * size / bw
