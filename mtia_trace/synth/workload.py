"""The host program of one step: ops, their kernels and the collectives, in issue order.

The program is the same on every rank (sizes may differ per rank: arrays of shape ``(ranks,)``).
Two training programs (`Model.framework`):

- ``ddp`` (a PyTorch/TorchRec step). Forward: KJT input all-to-all, bottom MLP (overlapping it),
  TBE lookup, pooled-embedding output distribution, interaction (dot or DCN), top MLP, loss.
  Backward (train): loss, top MLP, interaction, pooled-gradient distribution overlapping the
  bottom MLP, fused TBE backward + row-wise Adagrad, dense-gradient AllReduce in DDP buckets as
  gradients become ready; then the dense optimizer.
- ``hugectr`` (HugeCTR's embedding-collection training pipeline as the MLPerf DLRM-DCNv2
  submissions run it: ``train_intra_iteration_overlap=True``, ``train_inter_iteration_overlap=
  True``, ``grouped_all_reduce=True`` in their ``train.py``; the order is
  ``Model::create_train_pipeline_with_ebc`` in NVIDIA-Merlin/HugeCTR
  ``HugeCTR/src/pybind/model_pipeline.cpp``, tags v23.04.00 and v24.04.00, the NGC 23.04 and
  24.04 containers of the v3.0 and v4.0 submissions). The input distribution (``distribute_data``)
  runs on a ``prefetch`` stream for the next iteration, so a step waits on the one issued during
  the step before (the first step issues its own in a prologue, before its profiler step); the
  bottom MLP's forward waits for the embedding lookup (``bottom_network_fprop->wait_event(
  {done_mp_model_forward})``) and runs beside the pooled-embedding exchange; the embedding's
  backward exchange waits only for the top network's backward; the dense gradients are
  all-reduced once (``network_exchange_wgrad``) after the bottom MLP's backward, not in buckets
  during it. What runs on HugeCTR's separate ``mp``/``dp`` compute streams stays on the one
  compute stream here: kernels of one device do not overlap in the model. Its dense layers fuse
  what the ``torchrec`` step runs as separate kernels: bias and ReLU in the MLP GEMMs' epilogues,
  the bias gradients in the weight-gradient GEMMs', and the DCN cross layers as HugeCTR's
  MultiCross layer computes them (`_Builder.dcn_fwd_hugectr`, `_Builder.dcn_bwd_hugectr`). The
  dot interaction keeps the ``torchrec`` kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mtia_trace.synth.model import DTYPES, Model
from mtia_trace.synth.sharding import Collective, ShardPlan, world_groups

DDP_FIRST_BUCKET = 1 * 1024 * 1024   # torch DDP defaults: first bucket 1 MiB, then 25 MiB
DDP_BUCKET = 25 * 1024 * 1024

_GEMM = {"float": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
                  "_execute_segment_k_off_kernel__5x_cublas",
         "c10::BFloat16": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroup"
                          "size2x1x1_execute_segment_k_off_kernel__5x_cublas",
         "c10::Half": "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
                      "_execute_segment_k_off_kernel__5x_cublas"}
_ELEM = ("void at::native::vectorized_elementwise_kernel<4, at::native::{}, "
         "at::detail::Array<char*, {}> >(int, at::native::{}, at::detail::Array<char*, {}>)")
_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::{}, " \
          "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::{}, unsigned int, float, 4>)"
TBE_FWD = "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"
TBE_FWD_KERNEL = ("void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float,"
                  " float, long, 128>(at::PackedTensorAccessor64<float, 1, at::RestrictPtrTraits>)")
TBE_BWD = "fbgemm::split_embedding_backward_codegen_rowwise_adagrad_unweighted_exact_cuda"
TBE_BWD_KERNEL = ("void fbgemm_gpu::split_embedding_backward_codegen_rowwise_adagrad_unweighted_"
                  "kernel_cta_per_row_1<float, float, float, long, 128>(at::PackedTensorAccessor64"
                  "<float, 1, at::RestrictPtrTraits>)")
OPT_KERNEL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
              "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
              "FusedAdagradMathFunctor<float>, float>(at::native::(anonymous namespace)::"
              "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdagradMathFunctor"
              "<float>, float)")


@dataclass
class Kernel:
    name: str
    kind: str                  # costing kind: gemm, embedding, embedding_backward, elementwise,
    #                            reduction, optimizer
    flops: np.ndarray
    nbytes: np.ndarray


@dataclass
class Leaf:
    """A cpu_op that launches at most one kernel on the compute stream."""

    name: str
    args: dict | list[dict]    # per-rank list when shapes differ by rank
    kernel: Kernel | None = None


@dataclass
class Op:
    wrappers: tuple[str, ...]  # enclosing cpu_ops, outermost first (no args of their own)
    leaves: list[Leaf]


@dataclass
class Comm:
    coll: Collective


@dataclass
class Wait:
    """The compute stream waits for a collective (``Work.wait()``)."""

    label: str


@dataclass
class Annot:
    name: str
    begin: bool


@dataclass
class Sync:
    pass


Instr = Op | Comm | Wait | Annot | Sync


@dataclass
class Program:
    instrs: list[Instr] = field(default_factory=list)
    #: run once, before the first step (work a pipeline issues for the step after its own)
    prologue: list[Instr] = field(default_factory=list)

    def add(self, *items: Instr) -> None:
        self.instrs.extend(items)


def _arr(x: object, ranks: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (ranks,)).copy()


class _Builder:
    def __init__(self, model: Model, plan: ShardPlan) -> None:
        self.m, self.p, self.R = model, plan, plan.ranks
        self.b = plan.local_batch
        self.dt = model.dtype
        self.s = DTYPES[model.dtype][0]
        self.se = DTYPES[model.table_dtype][0]   # embedding tables
        #: HugeCTR's dense layers: bias and ReLU in the GEMMs' cuBLASLt epilogues, forward and
        #: backward (``CUBLASLT_EPILOGUE_RELU_AUX_BIAS``, ``..._DRELU_BGRAD``, ``..._BGRADA``;
        #: HugeCTR/src/layers/functors/fused_gemm_functors.cu, mlp_layer.cu, v24.04.00)
        self.fused = model.framework == "hugectr"
        self.prog = Program()

    # -- leaves -------------------------------------------------------------------------------
    def leaf(self, name: str, dims: list, kernel: Kernel | None, flops: float | None = None,
             nbytes: float | None = None) -> Leaf:
        args: dict = {"Record function id": 0, "Input Dims": dims,
                      "Input type": [self.dt if d else "Scalar" for d in dims]}
        if flops is not None:
            args["flops"] = int(flops)
        if nbytes is not None:
            args["bytes"] = int(nbytes)
        return Leaf(name, args, kernel)

    def gemm(self, name: str, m: int, k: int, n: int, bias: bool, accumulate: bool = False) -> Leaf:
        """``accumulate``: the GEMM adds a [m, n] operand into its result (cuBLAS beta = 1),
        recorded as addmm's first input."""
        fl = 2.0 * m * k * n
        nb = (m * k + k * n + m * n + (n if bias else 0) + (m * n if accumulate else 0)) * self.s
        dims = ([[m, n]] if accumulate else [[n]] if bias else []) + [[m, k], [k, n]]
        return self.leaf(name, dims, Kernel(_GEMM[self.dt], "gemm", _arr(fl, self.R),
                                            _arr(nb, self.R)), flops=fl)

    def bmm(self, a: list[int], b: list[int]) -> Leaf:
        """``aten::bmm`` of ``a`` [batch, m, k] and ``b`` [batch, k, n]: priced on the operands
        and the [batch, m, n] result its shapes record."""
        (bt, m, k), n = a, b[2]
        fl = 2.0 * bt * m * k * n
        nb = bt * (m * k + k * n + m * n) * self.s
        return self.leaf("aten::bmm", [a, b], Kernel(_GEMM[self.dt], "gemm", _arr(fl, self.R),
                                                     _arr(nb, self.R)), flops=fl)

    def elem(self, name: str, functor: str, shape: list[int], inputs: int = 1) -> Leaf:
        n = float(np.prod(shape))
        nb = n * self.s * (inputs + 1)
        k = Kernel(_ELEM.format(functor, inputs + 1, functor, inputs + 1), "elementwise",
                   _arr(n, self.R), _arr(nb, self.R))
        return self.leaf(name, [shape] * inputs, k)

    def reduce(self, name: str, functor: str, shape: list[int]) -> Leaf:
        n = float(np.prod(shape))
        k = Kernel(_REDUCE.format(functor, functor), "reduction", _arr(n, self.R),
                   _arr(n * self.s, self.R))
        return self.leaf(name, [shape], k)

    # -- layers -------------------------------------------------------------------------------
    def linear_fwd(self, i: int, o: int, bias: bool = True) -> Op:
        return Op(("aten::linear",), [self.gemm("aten::addmm" if bias else "aten::mm",
                                                self.b, i, o, bias)])

    def linear_bwd(self, i: int, o: int, need_input_grad: bool, bias: bool = True) -> Op:
        node = "AddmmBackward0" if bias else "MmBackward0"
        leaves = []
        if need_input_grad:
            leaves.append(self.gemm("aten::mm", self.b, o, i, False))
        leaves.append(self.gemm("aten::mm", o, self.b, i, False))
        if bias and not self.fused:
            leaves.append(self.reduce("aten::sum", "func_wrapper_t<float, at::native::sum_functor"
                                      "<float, float, float>::operator()>", [self.b, o]))
        return Op((f"autograd::engine::evaluate_function: {node}", node), leaves)

    def relu(self, o: int) -> list[Op]:
        if self.fused:
            return []
        return [Op((), [self.elem("aten::relu", "launch_clamp_scalar", [self.b, o])])]

    def relu_bwd(self, o: int) -> list[Op]:
        if self.fused:
            return []
        return [Op(("autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0"),
                   [self.elem("aten::threshold_backward", "threshold_kernel_impl", [self.b, o], 2)])]

    def tbe_fwd(self) -> Op:
        p, s, se = self.p, self.s, self.se
        # rows gathered at the tables' type, pooled output at the compute type
        nbytes = p.tbe_gather * se + p.tbe_idx * 8 + p.tbe_out * s
        k = Kernel(TBE_FWD_KERNEL, "embedding", p.tbe_gather.astype(float), nbytes.astype(float))
        args = [{"Record function id": 0,
                 "Input Dims": [[int(p.tbe_weights[r])], [int(p.tbe_feats[r]) + 1],
                                [int(p.tbe_idx[r])], [int(p.tbe_samples[r] * p.tbe_feats[r]) + 1]],
                 "Input type": [self.m.table_dtype, "long int", "long int", "long int"],
                 "flops": int(p.tbe_gather[r]), "bytes": int(nbytes[r])} for r in range(self.R)]
        return Op((), [Leaf(TBE_FWD, args, k)])

    def tbe_bwd(self, fused_optimizer: bool) -> Op:
        p, s, se = self.p, self.s, self.se
        # read the gathered rows, write them back updated, read the pooled grads, row-wise
        # Adagrad state: one float per touched row read and written (HARDWARE.md 2.6)
        nbytes = p.tbe_gather * 2 * se + p.tbe_out * s + p.tbe_idx * (8 + (8 if fused_optimizer else 0))
        k = Kernel(TBE_BWD_KERNEL, "embedding_backward", (p.tbe_gather * 4).astype(float),
                   nbytes.astype(float))
        args = [{"Record function id": 0,
                 "Input Dims": [[int(p.tbe_weights[r])], [int(p.tbe_idx[r])],
                                [int(p.tbe_out[r])]],
                 "Input type": [self.m.table_dtype, "long int", self.dt],
                 "flops": int(p.tbe_gather[r] * 4), "bytes": int(nbytes[r])} for r in range(self.R)]
        node = "SplitLookupFunction_rowwise_adagrad_OpBackward"
        return Op((f"autograd::engine::evaluate_function: {node}", node), [Leaf(TBE_BWD, args, k)])

    # -- HugeCTR's MultiCross layer (HugeCTR/src/layers/multi_cross_layer.cu, v24.04.00) -------
    def dcn_fwd_hugectr(self) -> None:
        """Concat (one copy), then per layer ``MultiCrossForwardFunctorv2``: x_i U, (x_i U) V + b
        (bias in the epilogue), and one kernel ``x_0 .* h + x_i`` (``fused_matrix_elementwise_
        dot_add``: three reads, one write)."""
        m, add, b, w, r = self.m, self.prog.add, self.b, self.m.interaction_width, self.m.dcn_rank
        add(Op((), [self.elem("aten::cat", "CatArrayBatchedCopy", [b, w], 1)]))
        for _ in range(m.dcn_layers):
            add(self.linear_fwd(w, r, bias=False), self.linear_fwd(r, w),
                Op((), [self.elem("aten::addcmul", "vector_fma4_align8", [b, w], 3)]))

    def dcn_bwd_hugectr(self, buckets: _Buckets) -> None:
        """Per layer, last first, ``MultiCrossBackwardFunctor``: one kernel S0 = dY .* x_0 and
        dX += dY .* h (``fused_mul_fma3``: four reads, two writes), dH = S0 V^T, dV = (x U)^T S0
        with the bias gradient in its epilogue, dU = x_i^T dH, dY_prev = dH U^T + dY (the sum
        in the GEMM, beta = 1); then dX + dY_0 (``matrix_add``) and the concat's backward (one
        copy into the embedding and bottom-MLP gradients)."""
        m, add, b, w, r = self.m, self.prog.add, self.b, self.m.interaction_width, self.m.dcn_rank
        node = "autograd::engine::evaluate_function: MultiCrossBackward", "MultiCrossBackward"
        for _ in range(m.dcn_layers):
            add(Op(node, [self.elem("aten::addcmul", "vector_mul_fma3_align", [b, w], 5),
                          self.gemm("aten::mm", b, w, r, False),
                          self.gemm("aten::mm", r, b, w, False),
                          self.gemm("aten::mm", w, b, r, False),
                          self.gemm("aten::addmm", b, r, w, False, accumulate=True)]))
            buckets.grad(r * w + w + w * r)
        add(Op(node, [self.elem("aten::add", "CUDAFunctor_add<float>", [b, w], 2),
                      self.elem("aten::copy_", "direct_copy_kernel_cuda", [b, w], 1)]))

    # -- the step -----------------------------------------------------------------------------
    def forward(self, train: bool) -> None:
        m, p, add = self.m, self.p, self.prog.add
        add(Annot("## forward ##", True))
        bottom = [op for g, i, o in m.dense_layers() if g == "bottom"
                  for op in (self.linear_fwd(i, o), *self.relu(o))]
        if m.framework == "hugectr":
            # this step's input was distributed during the previous one (the prologue for the
            # first); the next step's is issued now, on its own stream
            self.prog.prologue.extend(Comm(c) for c in p.fwd_input)
            if p.fwd_input:
                add(Wait(p.fwd_input[-1].label))
            for c in p.fwd_input:
                add(Comm(c))
            add(self.tbe_fwd())
            # the bottom MLP beside the pooled-embedding exchange
            for n, c in enumerate(p.fwd_output):
                if n:
                    add(Wait(p.fwd_output[n - 1].label))
                add(Comm(c))
                if n == 0:
                    add(*bottom)
            if p.fwd_output:
                add(Wait(p.fwd_output[-1].label))
            if not p.fwd_output:
                add(*bottom)
        else:
            for c in p.fwd_input:
                add(Comm(c))
            add(*bottom)
            if p.fwd_input:
                add(Wait(p.fwd_input[-1].label))
            add(self.tbe_fwd())
            for c in p.fwd_output:
                add(Comm(c), Wait(c.label))
        d_out, n_t = m.bottom_mlp[-1], len(m.tables)
        if m.interaction == "dcn" and self.fused:
            self.dcn_fwd_hugectr()
        elif m.interaction == "dcn":
            w = m.interaction_width
            add(Op((), [self.elem("aten::cat", "CatArrayBatchedCopy", [self.b, w], 2)]))
            for _ in range(m.dcn_layers):
                add(self.linear_fwd(w, m.dcn_rank, bias=False), self.linear_fwd(m.dcn_rank, w),
                    Op((), [self.elem("aten::mul", "BinaryFunctor<float, float, float, "
                                      "binary_internal::MulFunctor<float> >", [self.b, w], 2)]),
                    Op((), [self.elem("aten::add", "CUDAFunctor_add<float>", [self.b, w], 2)]))
        else:
            f = n_t + 1
            add(Op((), [self.elem("aten::cat", "CatArrayBatchedCopy", [self.b, f, d_out], 2)]),
                Op(("aten::matmul",), [self.bmm([self.b, f, d_out], [self.b, d_out, f])]),
                Op((), [self.elem("aten::index", "index_kernel_impl", [self.b, f * (f - 1) // 2])]),
                Op((), [self.elem("aten::cat", "CatArrayBatchedCopy", [self.b, m.interaction_width], 2)]))
        tops = [(i, o) for g, i, o in m.dense_layers() if g == "top"]
        for n, (i, o) in enumerate(tops):
            add(self.linear_fwd(i, o))
            if n < len(tops) - 1:
                add(*self.relu(o))
        if train:
            add(Op((), [self.reduce("aten::binary_cross_entropy_with_logits", "MeanOps<float, float>",
                                    [self.b, 1])]))
        else:
            add(Op((), [self.elem("aten::sigmoid", "sigmoid_kernel_cuda", [self.b, 1])]))
        add(Annot("## forward ##", False))

    def backward(self) -> None:
        m, p, add = self.m, self.p, self.prog.add
        add(Annot("## backward ##", True))
        add(Op(("autograd::engine::evaluate_function: BinaryCrossEntropyWithLogitsBackward0",
                "BinaryCrossEntropyWithLogitsBackward0"),
               [self.elem("aten::binary_cross_entropy_with_logits_backward", "bce_backward",
                          [self.b, 1], 2)]))
        # hugectr: one all-reduce of every dense gradient after the bottom MLP's backward
        buckets = _Buckets(self, add, whole=m.framework == "hugectr")
        layers = m.dense_layers()
        tops = [(i, o) for g, i, o in layers if g == "top"]
        for n in range(len(tops) - 1, -1, -1):
            i, o = tops[n]
            if n < len(tops) - 1:
                add(*self.relu_bwd(o))
            add(self.linear_bwd(i, o, True))
            buckets.grad(i * o + o)
        if m.interaction == "dcn" and self.fused:
            self.dcn_bwd_hugectr(buckets)
        elif m.interaction == "dcn":
            w = m.interaction_width
            for _ in range(m.dcn_layers):
                add(Op(("autograd::engine::evaluate_function: MulBackward0", "MulBackward0"),
                       [self.elem("aten::mul", "BinaryFunctor<float, float, float, "
                                  "binary_internal::MulFunctor<float> >", [self.b, w], 2)]),
                    self.linear_bwd(m.dcn_rank, w, True))
                buckets.grad(m.dcn_rank * w + w)
                add(self.linear_bwd(w, m.dcn_rank, True, bias=False))
                buckets.grad(w * m.dcn_rank)
        else:
            f, d = len(m.tables) + 1, m.bottom_mlp[-1]
            add(Op(("autograd::engine::evaluate_function: IndexBackward0", "IndexBackward0"),
                   [self.elem("aten::index_put_", "index_put_kernel_impl", [self.b, f * (f - 1) // 2])]),
                # Z = bmm(A [b,f,d], B [b,d,f]): the gradients of A and of B are one bmm each
                # (PyTorch's BmmBackward0), each recorded with its own operands' shapes
                Op(("autograd::engine::evaluate_function: BmmBackward0", "BmmBackward0"),
                   [self.bmm([self.b, f, f], [self.b, f, d]),
                    self.bmm([self.b, d, f], [self.b, f, f])]))
        if p.bwd_output:
            add(Comm(p.bwd_output[0]))
        bottoms = [(i, o) for g, i, o in layers if g == "bottom"]
        for n in range(len(bottoms) - 1, -1, -1):
            i, o = bottoms[n]
            add(*self.relu_bwd(o), self.linear_bwd(i, o, n > 0))
            buckets.grad(i * o + o)
        buckets.flush()
        for prev, c in zip(p.bwd_output, p.bwd_output[1:], strict=False):
            add(Wait(prev.label), Comm(c))
        if p.bwd_output:
            add(Wait(p.bwd_output[-1].label))
        add(self.tbe_bwd(fused_optimizer=not p.emb_grad))
        for c in p.emb_grad:
            add(Comm(c))
        add(Annot("## backward ##", False))
        add(Annot("## optimizer ##", True))
        for label in buckets.labels[-1:] + [c.label for c in p.emb_grad]:
            add(Wait(label))
        params = m.dense_params + (m.embedding_params if p.emb_grad else 0)
        add(Annot("Optimizer.step#Adagrad.step", True))
        # mixed precision keeps FP32 master weights and optimizer state
        ob = max(self.s, 4)
        k = Kernel(OPT_KERNEL, "optimizer", _arr(6.0 * params, self.R),
                   _arr(5.0 * params * ob, self.R))
        add(Op((), [self.leaf("aten::_fused_adagrad_", [[params], [params], [params], [1]], k,
                              nbytes=5.0 * params * ob)]))
        add(Annot("Optimizer.step#Adagrad.step", False))
        add(Annot("## optimizer ##", False))


class _Buckets:
    """DDP gradient buckets: an AllReduce is issued when a bucket fills."""

    def __init__(self, b: _Builder, add, whole: bool = False) -> None:  # noqa: ANN001
        self.b, self.add, self.fill, self.labels = b, add, 0, []
        self.whole = whole
        self.cap = DDP_FIRST_BUCKET

    def grad(self, params: int) -> None:
        self.fill += params
        if not self.whole and self.fill * self.b.s >= self.cap:
            self.flush()

    def flush(self) -> None:
        if self.fill == 0 or self.b.R == 1:
            self.fill = 0
            return
        label = "dense_wgrad" if self.whole else f"ddp_bucket_{len(self.labels)}"
        n = np.full(self.b.R, self.fill, np.int64)
        dtype, eb = DTYPES[self.b.m.dtype][1], self.b.s
        self.add(Comm(Collective(label, "allreduce", "c10d::allreduce_", dtype, eb,
                                 world_groups(self.b.R), n, n.copy())))
        self.labels.append(label)
        self.fill, self.cap = 0, DDP_BUCKET


def build_program(model: Model, plan: ShardPlan, train: bool) -> Program:
    b = _Builder(model, plan)
    b.forward(train)
    if train:
        b.backward()
    b.prog.add(Sync())
    return b.prog
