"""Schedule the step program on every rank at once and emit the trace events as columns.

One pass over the program per step (a Python loop over ops, which are few); every quantity is an
array over ranks. Times are integer nanoseconds, so the dependencies hold exactly in the written
microsecond timestamps (3 decimals):
- a device event starts at ``max(its runtime call's end, the previous event on its stream)``;
- a ``Stream Wait Event`` (cuda_sync) occupies its stream until the recorded event has fired;
- a collective kernel starts when its rank arrives; its transfer starts when the last member of
  its process group has arrived and every member has a free slot in the pool of the links it
  crosses (in-node links or NICs, or the message engines of an offloaded target: the replay
  cost model's pools, `replay.hardware.model.pool_class`), and it ends on each
  rank at that start plus the rank's cost (`costing.SourceHardware.collective`);
- ``cudaDeviceSynchronize`` ends when every stream of the device is idle.

Overlap slowdown: a compute kernel that overlaps communication kernels on its rank is stretched
by ``1 + s x f`` (``s``: the source's `SourceHardware.overlap_slowdown`, ``f``: its overlapped
fraction, `replay.intervals.overlap_fraction`, the replay's own definition), so the trace carries the
interference the replay's scaled mode takes out of measured compute. As in the replay, one
correction pass: the program is scheduled, the fractions taken from that schedule, and the
program scheduled again with the same seed (same jitter draws) and the stretched kernels
(`overlap_stretch`, `Timeline(stretch=...)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtia_trace.ingest.classify import classify, coll_op_of
from mtia_trace.ingest.shapes import dtype_size, op_cost
from mtia_trace.schema import SHAPE_KINDS, from_columns
from mtia_trace.synth import costing as C
from mtia_trace.synth.costing import SourceHardware
from mtia_trace.synth.sharding import Collective, Groups
from mtia_trace.synth.workload import Annot, Comm, Leaf, Op, Program, Sync, Wait
from replay.hardware.interference import Interference
from replay.hardware.model import HardwareModel

COMPUTE_STREAM = 7
COMM_STREAM = {"world": 20, "intra": 24, "cross": 28}
HOST_PID = 100000
T0_NS = 1_000_000_000  # trace clock origin: 1e6 us (float64 resolution there: 2.3e-10 us)

_NCCL_KERNEL = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_{t}_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "all_to_allv": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "_reduce_scatter_base": "ncclDevKernel_ReduceScatter_Sum_{t}_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "_allgather_base": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}
_NCCL_TYPE = {"Float": "f32", "BFloat16": "bf16", "Half": "f16", "Long": "i64", "Int": "i32"}
_ANNOT_OP = {"all_to_allv": "nccl:all_to_all", "allreduce": "nccl:all_reduce",
             "_reduce_scatter_base": "nccl:_reduce_scatter_base",
             "_allgather_base": "nccl:_all_gather_base"}
_CBID = {"cudaLaunchKernel": 211, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147,
         "cudaDeviceSynchronize": 165}
TRUNCATE = 30  # record_param_comms writes at most 30 list entries, then ", ..."


@dataclass
class Rec:
    """One template event on every rank: arrays of shape (ranks,) for what differs by rank."""

    ph: str                   # X, s, f
    cat: str
    name: str
    device: bool
    stream: int               # device events: stream id
    ts: np.ndarray            # ns
    dur: np.ndarray | None    # ns
    ext: int | None
    corr: int | None          # correlation (X) or flow id (s/f)
    seq: int | None = None
    args: dict | list | None = None   # static args (a list when they differ per rank)


def fmt_list(values: np.ndarray) -> str:
    vals = [int(v) for v in values[:TRUNCATE]]
    tail = ", ..." if len(values) > TRUNCATE else ""
    return "[" + ", ".join(map(str, vals)) + tail + "]"


class Timeline:
    def __init__(self, hw: SourceHardware, ranks: int, bf16: bool, seed: int,
                 stretch: np.ndarray | None = None, host_overhead: str = "eager") -> None:
        self.hw, self.R, self.bf16 = hw, ranks, bf16
        self.host = C.HostCosts.of(host_overhead, hw.launch_us)
        #: per compute kernel (in launch order) and rank: the factor its duration is stretched by
        self.stretch = stretch
        #: indices in ``recs`` of the compute-stream kernels, in launch order
        self.compute_recs: list[int] = []
        #: per compute kernel rec: (flops, bytes read, bytes written per rank, dtype) as ingested
        self.work: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, str | None]] = {}
        #: per collective kernel rec: when its transfer starts (ns per rank)
        self.transfer_start: dict[int, np.ndarray] = {}
        self._leaf_work: dict[int, tuple] = {}
        self.rng = np.random.default_rng(seed)
        self.h = np.full(ranks, T0_NS, np.int64)
        self.free: dict[int, np.ndarray] = {COMPUTE_STREAM: self.h.copy()}
        self.pending: dict[str, tuple[np.ndarray, int, int]] = {}
        self.seq: dict[str, int] = {}
        self.next_id = 1
        self.recs: list[Rec] = []
        self._coll_cache: dict[int, tuple[np.ndarray, np.ndarray, list[dict]]] = {}
        #: per rank and pool class (in-node links / NICs, or message engines), when each slot
        #: of that collective pool is free again
        self.link = np.full((ranks, hw.pool_classes, max(hw.pool_capacity, 1)), T0_NS, np.int64)

    # -- helpers ------------------------------------------------------------------------------
    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _host(self, base_us: float) -> np.ndarray:
        return np.rint(base_us * 1e3 * self.rng.lognormal(0.0, C.HOST_JITTER, self.R)).astype(np.int64)

    def _runtime(self, name: str, ext: int | None = None) -> tuple[int, np.ndarray, np.ndarray]:
        """A runtime call at the host clock; returns (correlation, start, end)."""
        corr = self._id()
        start = self.h.copy()
        dur = self._host(self.host.launch if name == "cudaLaunchKernel" else self.host.runtime_call)
        self.h = self.h + dur
        self.recs.append(Rec("X", "cuda_runtime", name, False, -1, start, dur,
                             corr if ext is None else ext, corr, args={"cbid": _CBID[name]}))
        return corr, start, self.h.copy()

    def _device(self, cat: str, name: str, stream: int, corr: int, ext: int, start: np.ndarray,
                end: np.ndarray, args: dict | list, seq: int | None = None,
                call_start: np.ndarray | None = None) -> None:
        self.recs.append(Rec("X", cat, name, True, stream, start, end - start, ext, corr, seq, args))
        if call_start is not None:
            self.recs.append(Rec("s", "ac2g", "ac2g", False, -1, call_start, None, None, corr))
            self.recs.append(Rec("f", "ac2g", "ac2g", True, stream, start, None, None, corr))

    def _stream(self, s: int) -> np.ndarray:
        if s not in self.free:
            self.free[s] = np.full(self.R, T0_NS, np.int64)
        return self.free[s]

    def _wait(self, stream: int, on_stream: int, rec_corr: int, rec_time: np.ndarray,
              ext: int | None = None) -> None:
        corr, c0, c1 = self._runtime("cudaStreamWaitEvent", ext)
        start = np.maximum(c1, self._stream(stream))
        end = np.maximum(start, rec_time)
        self.free[stream] = end
        self._device("cuda_sync", "Stream Wait Event", stream, corr, corr if ext is None else ext,
                     start, end, {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": on_stream,
                                  "wait_on_cuda_event_record_corr_id": rec_corr, "context": 1},
                     call_start=c0)

    @staticmethod
    def _group_max(x: np.ndarray, g: Groups) -> np.ndarray:
        m = np.stack(g.members)
        return x[m].max(axis=1)[g.gid]

    # -- instructions -------------------------------------------------------------------------
    def annot(self, a: Annot, open_: dict[str, tuple[np.ndarray, int]]) -> None:
        if a.begin:
            open_[a.name] = (self.h.copy(), self._id())
            self.h = self.h + self._host(1.0)
        else:
            start, ext = open_.pop(a.name)
            self.h = self.h + self._host(1.0)
            self.recs.append(Rec("X", "user_annotation", a.name, False, -1, start, self.h - start,
                                 ext, None, args={"Record function id": 0}))

    def op(self, op: Op) -> None:
        opened = []
        for name in op.wrappers:
            opened.append((name, self.h.copy(), self._id()))
            self.h = self.h + self._host(self.host.op)
        for leaf in op.leaves:
            start, ext = self.h.copy(), self._id()
            self.h = self.h + self._host(self.host.op)
            if leaf.kernel is not None:
                k = leaf.kernel
                corr, c0, c1 = self._runtime("cudaLaunchKernel", ext)
                dur = self.hw.kernel_us(k.kind, k.flops, k.nbytes, self.bf16)
                dur = dur * 1e3 * self.rng.lognormal(0.0, C.DEVICE_JITTER, self.R)
                if self.stretch is not None:
                    dur = dur * self.stretch[len(self.compute_recs)]
                dur = np.rint(dur).astype(np.int64)
                ks = np.maximum(c1, self.free[COMPUTE_STREAM])
                self.free[COMPUTE_STREAM] = ks + dur
                self.compute_recs.append(len(self.recs))
                if id(leaf) not in self._leaf_work:
                    self._leaf_work[id(leaf)] = leaf_work(leaf, self.R)
                self.work[len(self.recs)] = self._leaf_work[id(leaf)]
                self._device("kernel", k.name, COMPUTE_STREAM, corr, ext, ks, ks + dur,
                             {"queued": 0, "context": 1, "stream": COMPUTE_STREAM},
                             call_start=c0)
            self.h = self.h + self._host(self.host.post)
            self.recs.append(Rec("X", "cpu_op", leaf.name, False, -1, start, self.h - start, ext,
                                 None, args=leaf.args))
        for name, start, ext in reversed(opened):
            self.h = self.h + self._host(self.host.post)
            self.recs.append(Rec("X", "cpu_op", name, False, -1, start, self.h - start, ext, None,
                                 args={"Record function id": 0}))
        self.h = self.h + self._host(self.host.gap)

    def comm(self, c: Collective) -> None:
        g = c.groups
        stream = COMM_STREAM[g.kind]
        seq = self.seq[g.kind] = self.seq.get(g.kind, 0) + 1
        transfer_us, pool, per_rank_args = self._coll_static(c)
        outer_start, outer_ext = self.h.copy(), self._id()
        self.h = self.h + self._host(self.host.op)
        rpc_start, rpc_ext = self.h.copy(), self._id()
        self.h = self.h + self._host(self.host.op)
        # the NCCL stream waits for the producer of the input on the compute stream
        rec_corr, _, _ = self._runtime("cudaEventRecord", rpc_ext)
        self._wait(stream, COMPUTE_STREAM, rec_corr, self.free[COMPUTE_STREAM].copy(), rpc_ext)
        ann_start, ann_ext = self.h.copy(), self._id()
        corr, c0, c1 = self._runtime("cudaLaunchKernel", ann_ext)
        arrive = np.maximum(c1, self._stream(stream))
        # the transfer starts once every member has arrived and has a free slot in the pool
        # of the links it crosses; each rank then takes its own cost (the kernel spans the
        # wait and the transfer)
        rows = np.arange(self.R)
        slot = np.argmin(self.link[rows, pool], axis=1)
        start = self._group_max(np.maximum(arrive, self.link[rows, pool, slot]), g)
        jit = self.rng.lognormal(0.0, C.DEVICE_JITTER, self.R)
        end = start + np.rint(transfer_us * 1e3 * jit).astype(np.int64)
        self.link[rows, pool, slot] = end
        self.free[stream] = end
        name = _NCCL_KERNEL[c.op].format(t=_NCCL_TYPE.get(c.dtype, "f32"))
        kargs = [dict(a, queued=0, context=1, stream=stream) for a in per_rank_args]
        self.transfer_start[len(self.recs)] = start
        self._device("kernel", name, stream, corr, ann_ext, arrive, end, kargs, seq, call_start=c0)
        self.h = self.h + self._host(self.host.post)
        self.recs.append(Rec("X", "user_annotation", _ANNOT_OP[c.op], False, -1, ann_start,
                             self.h - ann_start, ann_ext, None, args={"Record function id": 0}))
        # the work's end event, which Work.wait() makes the compute stream wait on
        end_corr, _, _ = self._runtime("cudaEventRecord", rpc_ext)
        self.pending[c.label] = (end.copy(), end_corr, stream)
        self.h = self.h + self._host(self.host.post)
        self.recs.append(Rec("X", "cpu_op", "record_param_comms", False, -1, rpc_start,
                             self.h - rpc_start, rpc_ext, None, seq,
                             [dict(a, **{"Record function id": 0}) for a in per_rank_args]))
        self.h = self.h + self._host(self.host.post)
        self.recs.append(Rec("X", "cpu_op", c.c10d, False, -1, outer_start, self.h - outer_start,
                             outer_ext, None, None,
                             [{"Record function id": 0, "Input Dims": [[int(a["Out msg nelems"])],
                                                                       [int(a["In msg nelems"])]],
                               "Input type": [_TORCH_TYPE.get(c.dtype, "float")] * 2}
                              for a in per_rank_args]))
        self.h = self.h + self._host(self.host.gap)

    def _coll_static(self, c: Collective) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        key = id(c)
        if key not in self._coll_cache:
            g = c.groups
            args = []
            for r in range(self.R):
                mem = g.members[g.gid[r]]
                a = {"Collective name": c.op, "dtype": c.dtype,
                     "In msg nelems": int(c.in_nelems[r]), "Out msg nelems": int(c.out_nelems[r]),
                     "Group size": int(g.size),
                     "In split size": fmt_list(c.matrix[r]) if c.matrix is not None else "[]",
                     "Out split size": "[]",
                     "Process Group Name": g.names[g.gid[r]], "Process Group Description": g.desc,
                     "Process Group Ranks": fmt_list(mem), "Rank": r}
                args.append(a)
            if c.matrix is not None:
                recv = c.matrix[np.stack(g.members)[g.gid], _pos(g)[:, None]]
                for r in range(self.R):
                    args[r]["Out split size"] = fmt_list(recv[r])
            pg_ranks = [a["Process Group Ranks"] for a in args]
            self._coll_cache[key] = (*self.hw.collective(c, pg_ranks), args)
        return self._coll_cache[key]

    def wait(self, w: Wait) -> None:
        end, rec_corr, stream = self.pending.pop(w.label)
        start, ext = self.h.copy(), self._id()
        self.h = self.h + self._host(self.host.op)
        self._wait(COMPUTE_STREAM, stream, rec_corr, end, ext)
        self.h = self.h + self._host(self.host.post)
        self.recs.append(Rec("X", "cpu_op", "c10d_functional::wait_tensor", False, -1, start,
                             self.h - start, ext, None, args={"Record function id": 0}))
        self.h = self.h + self._host(self.host.gap)

    def sync(self) -> None:
        corr, c0, _ = self._runtime("cudaDeviceSynchronize")
        busy = np.max(np.stack(list(self.free.values())), axis=0)
        end = np.maximum(self.h, busy) + self._host(0.5)
        self.recs[-1].dur = end - c0
        self.h = end

    def step(self, prog: Program, number: int) -> None:
        self.h = self.h + self._host(self.host.step_gap)
        open_: dict[str, tuple[np.ndarray, int]] = {}
        if number == 1:
            for c in prog.prologue:
                assert isinstance(c, Comm)
                self.comm(c.coll)
        start, ext = self.h.copy(), self._id()
        self.h = self.h + self._host(1.0)
        for ins in prog.instrs:
            if isinstance(ins, Op):
                self.op(ins)
            elif isinstance(ins, Comm):
                self.comm(ins.coll)
            elif isinstance(ins, Wait):
                self.wait(ins)
            elif isinstance(ins, Annot):
                self.annot(ins, open_)
            elif isinstance(ins, Sync):
                self.sync()
        self.h = self.h + self._host(1.0)
        self.recs.append(Rec("X", "user_annotation", f"ProfilerStep#{number}", False, -1, start,
                             self.h - start, ext, None, args={"Record function id": 0}))


def overlap_stretch(tl: Timeline) -> np.ndarray | None:
    """Per compute kernel of ``tl`` (launch order) and rank: the factor the source hardware's
    interference model (`replay.hardware.interference`, the replay's own) stretches it by in
    ``tl``'s schedule, from the kernel's shape-derived work as ingest reads it back and the
    collectives it overlaps; ``None`` when nothing is stretched."""
    if not tl.compute_recs:
        return None
    dev = [i for i, r in enumerate(tl.recs) if r.device and r.ph == "X" and r.cat == "kernel"]
    R, n = tl.R, len(dev)
    rank = np.tile(np.arange(R), n)
    cols: dict[str, object] = {"rank": rank.astype(np.int32), "is_device": np.ones(n * R, bool),
                               "ph": ["X"] * (n * R)}
    ts = np.stack([tl.recs[i].ts for i in dev]).astype(np.float64)              # (events, ranks)
    dur = np.stack([tl.recs[i].dur for i in dev]).astype(np.float64)
    start = ts.copy()
    kinds, names, flops, rd, wr, dtype = [], [], np.zeros((n, R)), np.zeros((n, R)), \
        np.zeros((n, R)), []
    coll = {c: np.zeros((n, R)) for c in ("coll_bytes_in", "coll_bytes_out", "group_size")}
    coll_op: list[list[str | None]] = [[None] * R for _ in range(n)]
    pg_ranks: list[list[str | None]] = [[None] * R for _ in range(n)]
    for e, i in enumerate(dev):
        rec = tl.recs[i]
        kinds.append(classify(rec.cat, rec.name))
        names.append(rec.name)
        if i in tl.work:
            flops[e], rd[e], wr[e], dt = tl.work[i]
            dtype.append(dt)
        else:
            dtype.append(None)
        if i in tl.transfer_start:
            start[e] = tl.transfer_start[i]
            per_rank: list[dict] = rec.args  # type: ignore[assignment]
            for r, a in enumerate(per_rank):
                size = float(dtype_size(a["dtype"]))
                coll["coll_bytes_in"][e, r] = a["In msg nelems"] * size
                coll["coll_bytes_out"][e, r] = a["Out msg nelems"] * size
                coll["group_size"][e, r] = a["Group size"]
                coll_op[e][r] = coll_op_of("c10d::" + a["Collective name"]) or a["Collective name"]
                pg_ranks[e][r] = a["Process Group Ranks"]
    cols.update(kind=np.repeat(np.array(kinds, dtype=object), R).tolist(),
                name=np.repeat(np.array(names, dtype=object), R).tolist(),
                dtype=np.repeat(np.array(dtype, dtype=object), R).tolist(),
                ts_us=((ts - T0_NS) / 1e3).ravel(), dur_us=(dur / 1e3).ravel(),
                flops=flops.ravel(), bytes_read=rd.ravel(), bytes_written=wr.ravel(),
                coll_bytes_in=coll["coll_bytes_in"].ravel(),
                coll_bytes_out=coll["coll_bytes_out"].ravel(),
                group_size=coll["group_size"].ravel().astype(np.int32),
                coll_op=[x for row in coll_op for x in row],
                pg_ranks=[x for row in pg_ranks for x in row])
    table = from_columns(cols)
    spec = tl.hw.spec
    costs = HardwareModel(spec, mode="scaled", source=spec).cost(table)  # type: ignore[arg-type]
    t0 = ((ts - T0_NS) / 1e3).ravel()
    inter = costs.interference
    assert isinstance(inter, Interference)
    c, f = inter.apply(costs.compute_us, costs.fetch_us, t0, ((start - T0_NS) / 1e3).ravel(),
                       t0 + (dur / 1e3).ravel())
    before = costs.dur_us
    after = before - costs.compute_us - costs.fetch_us + c + f
    factor = np.divide(after, before, out=np.ones_like(before), where=before > 0).reshape(n, R)
    row = {i: k for k, i in enumerate(dev)}
    out = factor[[row[i] for i in tl.compute_recs]]
    return out if (out > 1.0).any() else None


def leaf_work(leaf: Leaf, ranks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | None]:
    """(flops, bytes read, bytes written per rank, dtype) of a leaf op as ingest reads them from
    its recorded args (`mtia_trace.ingest.shapes.op_cost`; a recorded ``flops`` / ``bytes`` arg
    wins), which its kernel inherits."""
    per = leaf.args if isinstance(leaf.args, list) else [leaf.args] * ranks
    kind = classify("cpu_op", leaf.name)
    out = np.zeros((3, ranks))
    dtype = None
    for r, a in enumerate(per):
        dims, types = a.get("Input Dims"), a.get("Input type")
        if kind in SHAPE_KINDS:
            fl, rd, wr, dtype = op_cost(kind, leaf.name, dims, types, None)
        else:
            fl = rd = wr = 0.0
            dtype = next((t for t in types or [] if t not in ("", "Scalar", "ScalarList")), None)
        if "flops" in a:
            fl = float(a["flops"])
        if "bytes" in a:
            wr = min(wr, float(a["bytes"]))
            rd = float(a["bytes"]) - wr
        out[:, r] = (fl, rd, wr)
    return out[0], out[1], out[2], dtype


_TORCH_TYPE = {"Float": "float", "Long": "long int", "Int": "int", "BFloat16": "c10::BFloat16",
               "Half": "c10::Half"}


def _pos(g: Groups) -> np.ndarray:
    pos = np.empty(len(g.gid), np.int64)
    for m in g.members:
        pos[m] = np.arange(len(m))
    return pos
