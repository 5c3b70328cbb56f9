"""Durations on the source hardware, from a `replay.hardware` spec.

Kernels: roofline, ``max(flops / (peak * eff), bytes / (hbm * eff_mem))``, embedding kernels at
the spec's measured TBE efficiency of their direction (forward gather; backward with the fused
optimizer update). Collectives: the replay's own alpha-beta model
(`replay.hardware.collectives.collective_costs`, HARDWARE.md 2.4) on the bytes, group and
placement the trace records for each rank, plus the NIC post cost it charges; each rank's
collectives hold the pool of the links they cross (in-node links or NICs; message engines when
offloaded) the way the replay's cost model does (``comm.link_sharing``).
Compute kernels overlapping communication on their rank are stretched by the replay model's
overlap slowdown (``1 + s x f``, `timeline.overlap_stretch`). So a synthetic trace replayed on
its ``--source-hw`` matches the as-measured replay up to the jitter. Host costs (dispatch,
launches) come from the spec's ``host.kernel_launch_us``; the few host constants below are
workload assumptions, not hardware numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mtia_trace.ingest.classify import coll_op_of
from mtia_trace.ingest.shapes import dtype_size
from mtia_trace.synth.sharding import Collective
from replay.hardware import collectives as coll_mod
from replay.hardware import load_spec
from replay.hardware.compute import gather_GBps
from replay.hardware.model import POOL_CLASSES, HardwareModel, pool_class

#: Assumed host-side costs of a PyTorch eager step (Python + dispatcher), in us.
HOST_OP_US = 6.0          # per aten op level (dispatch before its first launch)
HOST_POST_US = 1.0        # after an op's last launch
HOST_GAP_US = 2.0         # between top-level ops (Python)
RUNTIME_CALL_US = 1.5     # cudaEventRecord / cudaStreamWaitEvent
STEP_GAP_US = 40.0        # between steps (data loading, pipeline bookkeeping)
#: Graph-captured step (CUDA graphs, as the MLPerf DLRM-DCNv2 GPU submissions run): the host
#: replays a captured graph, so per-op Python/dispatch cost vanishes and each kernel costs one
#: graph-node launch: 0.5 us, the 1 KB AllReduce measured with CUDA graphs (3.5 us without,
#: NVIDIA/nccl#1984). The small per-op remainder is assumed.
GRAPH_NODE_LAUNCH_US = 0.5
GRAPH_HOST_US = 0.05


@dataclass(frozen=True)
class HostCosts:
    """Host-side costs (us) of one op level, launch and runtime call, by host-overhead mode."""

    op: float
    post: float
    gap: float
    runtime_call: float
    launch: float
    step_gap: float = STEP_GAP_US

    @classmethod
    def of(cls, mode: str, launch_us: float) -> HostCosts:
        """``eager``: the eager constants and the spec's ``host.kernel_launch_us``; ``graph``:
        graph-node launches (`GRAPH_NODE_LAUNCH_US`) and no per-op dispatch."""
        if mode == "graph":
            return cls(GRAPH_HOST_US, GRAPH_HOST_US, GRAPH_HOST_US, GRAPH_HOST_US,
                       GRAPH_NODE_LAUNCH_US)
        return cls(HOST_OP_US, HOST_POST_US, HOST_GAP_US, RUNTIME_CALL_US, launch_us)


#: Assumed device-side floor of one kernel, in us.
MIN_KERNEL_US = 1.5
#: Seeded multiplicative jitter (lognormal sigma): device kernels, host ops.
DEVICE_JITTER = 0.03
HOST_JITTER = 0.15


@dataclass(frozen=True)
class SourceHardware:
    """The handful of spec values the generator uses, read once, and the spec itself (for the
    collective model)."""

    name: str
    peak_fp32: float   # flop/us
    peak_bf16: float
    eff_gemm: float
    eff_other: float
    hbm: float         # B/us, streaming
    gather: float      # B/us, random rows (embedding forward)
    gather_backward: float  # B/us, embedding backward with its fused optimizer update
    launch_us: float
    ranks_per_node: int
    device_name: str
    hbm_bytes: float
    spec: object = field(repr=False, compare=False)
    #: collectives one rank runs at once (the replay model's link pool) and the link share each
    #: gets (``split`` link sharing), as `replay.hardware.model.HardwareModel` sets them
    pool_capacity: int = 1
    link_share: int = 1
    #: the replay model's pool kind (`replay.hardware.model.POOL_CLASSES`): one pool per rank
    #: (``engines``) or one per link class (``links``: in-node links and NICs)
    pool_kind: str = "links"
    #: the replay model's overlap slowdown ``s`` of this hardware: compute overlapping
    #: communication on its rank runs ``1 + s x (overlapped fraction)`` times longer
    overlap_slowdown: float = 0.0

    @classmethod
    def load(cls, name: str) -> SourceHardware:
        spec = load_spec(name)
        v, g = spec.value, spec.get
        hbm = float(v("hbm.bandwidth_GBps")) * 1e3
        model = HardwareModel(spec)
        cap = model.pool_capacity()
        return cls(
            name=str(getattr(spec, "name", name)),
            peak_fp32=float(v("compute.peak_tflops_fp32")) * 1e6,
            peak_bf16=float(v("compute.peak_tflops_bf16")) * 1e6,
            eff_gemm=float(v("compute.efficiency_gemm")),
            eff_other=float(g("compute.efficiency_other", v("compute.efficiency_gemm"))),
            hbm=hbm * float(v("hbm.efficiency")),
            gather=gather_GBps(spec) * 1e3,
            gather_backward=gather_GBps(spec, backward=True) * 1e3,
            launch_us=float(v("host.kernel_launch_us")),
            ranks_per_node=int(v("network.ranks_per_node")),
            device_name=str(getattr(spec, "description", name)).split(":")[0],
            hbm_bytes=float(g("hbm.capacity_GB", 0.0)) * 1e9,
            spec=spec,
            pool_capacity=cap,
            link_share=cap if model.link_sharing() == "split" else 1,
            pool_kind=model.pool_kind(),
            overlap_slowdown=float(model.overlap_slowdown()),
        )

    def kernel_us(self, kind: str, flops: np.ndarray, nbytes: np.ndarray, bf16: bool) -> np.ndarray:
        """Roofline time of device kernels of one kind."""
        flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
        if kind == "embedding":
            t = nbytes / self.gather
        elif kind == "embedding_backward":
            t = nbytes / self.gather_backward
        elif kind == "gemm":
            peak = self.peak_bf16 if bf16 else self.peak_fp32
            t = np.maximum(flops / (peak * self.eff_gemm), nbytes / self.hbm)
        else:
            t = np.maximum(flops / (self.peak_fp32 * self.eff_other), nbytes / self.hbm)
        return np.maximum(t, MIN_KERNEL_US)

    @property
    def pool_classes(self) -> int:
        return len(POOL_CLASSES[self.pool_kind])

    def collective(self, c: Collective, pg_ranks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per rank: (transfer time, latency included, plus NIC post cost of one collective
        once its group has arrived; the pool class its part holds), as the replay's cost model
        prices and places the event the trace records: op from the ``Collective name``, bytes
        from ``In/Out msg nelems`` x ``dtype``, group size, and placement from ``Process Group
        Ranks`` (``pg_ranks``, as written; `replay.hardware.model.pool_class`)."""
        R = len(c.groups.gid)
        op_name = coll_mod.normalize_op(coll_op_of("c10d::" + c.op) or c.op)
        op = np.full(R, coll_mod.OPS.index(op_name))
        size = float(dtype_size(c.dtype))
        group = np.full(R, c.groups.size)
        _, local, nodes = coll_mod.placement(pa.array(pg_ranks, pa.string()), np.arange(R),
                                             self.ranks_per_node)
        cost = coll_mod.collective_costs(
            self.spec, op, np.asarray(c.in_nelems, float) * size,  # type: ignore[arg-type]
            np.asarray(c.out_nelems, float) * size, group, local=local, nodes=nodes,
            share=self.link_share)
        pool = pool_class(self.pool_kind, group, local, nodes, self.ranks_per_node)
        return cost.collective_us + cost.post_us, pool
