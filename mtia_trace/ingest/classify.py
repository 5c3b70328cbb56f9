"""Map (category, name) to the closed `schema.KINDS` vocabulary.

Classification runs once per distinct (cat, name) pair, not per event, and the result is mapped
back to rows with an index array.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: Categories of host-side runtime / driver calls (launches, syncs, MTIA runtime).
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"})
#: Categories of events that execute on a device stream.
DEVICE_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset",
                         "mtia_ccp_events", "cuda_sync", "gpu_user_annotation"})
ANNOTATION_CATS = frozenset({"user_annotation", "gpu_user_annotation", "Trace",
                             "python_function", "cuda_profiler_range"})
FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})

#: Collective annotation prefixes: gloo on CPU, NCCL/HCCL/XCCL markers on the host.
COLL_PREFIXES = ("gloo:", "nccl:", "hccl:", "xccl:", "rccl:")

_P2P = re.compile(r"(^|[^a-z])(send|recv|isend|irecv)([^a-z]|$)", re.I)
_COLL_KERNEL = re.compile(r"^(nccl|rccl|hccl|ncclDev)|ncclKernel|ncclDevKernel", re.I)

_DEVICE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pat, re.I))
    for kind, pat in (
        ("attention", r"flash|fmha|attention|sdpa|_attn"),
        ("embedding", r"embedding|split_eb|tbe_|_tbe|indexSelectLargeIndex|embedding_bag|"
                      r"EmbeddingBag|jagged|keyed_jagged"),
        ("optimizer", r"adam|adagrad|sgd|lamb|optimi[sz]er|_fused_\w*step|multi_tensor_apply"),
        ("conv", r"conv|implicit_?gemm.*fprop|winograd|dgrad|wgrad|cudnn.*fprop"),
        ("gemm", r"gemm|gemv|cutlass|Cijk_|sm\d+_xmma|matmul|(^|[^a-z])fc([^a-z]|$)|"
                 r"(^|[^a-z])mm([^a-z]|$)|addmm|bmm|linear|dot_product|tensorop"),
        ("reduction", r"reduce|softmax|norm|bn_fw|bn_bw|batch_?norm|(^|[^a-z])sum([^a-z]|$)|mean|argmax|argmin|cumsum|"
                      r"triton_red|triton_per|scan|topk|sort"),
        ("elementwise", r"elementwise|vectorized|unrolled|triton_poi|copy|fill|where|clamp|clip|"
                        r"nchwToNhwc|nhwcToNchw|transpose|"
                        r"relu|sigmoid|tanh|gelu|silu|(^|[^a-z])(add|sub|mul|div|divide|neg|exp|log2?|"
                        r"sqrt|rsqrt|reciprocal|pow|abs|eq|ne|gt|lt|ge|le|cat|nan_to_num|"
                        r"threshold_backward|sigmoid_backward|tanh_backward|bucketize|index|"
                        r"gather|scatter|permute|transpose|to_dense|cast)([^a-z]|$)"),
    )
)

#: Per rule of `_DEVICE_RULES` (None: no such words), words one of which any match of its
#: pattern contains, lowercased: on an ASCII name (where ``re.I`` is ASCII case folding) a rule
#: whose words are all absent cannot match, and its search over a long kernel name is skipped.
_RULE_WORDS: tuple[tuple[str, ...] | None, ...] = (
    ("flash", "fmha", "attention", "sdpa", "_attn"),
    ("embedding", "split_eb", "tbe_", "_tbe", "indexselectlargeindex", "jagged"),
    ("adam", "adagrad", "sgd", "lamb", "optimi", "_fused_", "multi_tensor_apply"),
    ("conv", "implicit", "winograd", "dgrad", "wgrad", "cudnn"),
    ("gemm", "gemv", "cutlass", "cijk_", "_xmma", "matmul", "fc", "mm", "linear", "dot_product",
     "tensorop"),
    ("reduce", "softmax", "norm", "bn_fw", "bn_bw", "sum", "mean", "argmax", "argmin",
     "triton_red", "triton_per", "scan", "topk", "sort"),
    None,  # elementwise: its two-letter words (eq, ne, lt...) are in most names
)
#: words one of which any match of `_COLL_KERNEL` contains, lowercased
_COLL_WORDS = ("nccl", "rccl", "hccl")

#: aten op names (after the namespace) by kind, for host ops.
_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv",
                       "addbmm", "_addmm_activation", "dot", "einsum", "_scaled_mm"})
_CONV_OPS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution",
                       "cudnn_convolution", "mkldnn_convolution", "convolution_backward",
                       "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                       "_convolution_mode", "thnn_conv2d", "slow_conv2d_forward"})
_ATTN_OPS = frozenset({"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                       "_scaled_dot_product_efficient_attention", "_flash_attention_forward",
                       "_efficient_attention_forward", "_scaled_dot_product_attention_math"})
_EMB_OPS = frozenset({"embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
                      "embedding_backward", "embedding_dense_backward", "_embedding_bag_backward",
                      "_embedding_bag_sparse_backward", "_embedding_bag_dense_backward",
                      "_embedding_bag_per_sample_weights_backward"})
_ELEM_OPS = frozenset({
    "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "pow", "abs",
    "relu", "sigmoid", "tanh", "gelu", "silu", "hardtanh", "leaky_relu", "clamp", "clamp_min",
    "clamp_max", "where", "masked_fill", "fill", "zero", "copy", "to", "_to_copy", "clone",
    "threshold_backward", "sigmoid_backward", "tanh_backward", "gelu_backward", "silu_backward",
    "eq", "ne", "gt", "lt", "ge", "le", "logical_and", "logical_or", "logical_not", "bitwise_and",
    "addcmul", "addcdiv", "lerp", "maximum", "minimum", "sign", "floor", "ceil", "round",
    "nan_to_num", "cat", "stack", "index_select", "gather", "scatter", "scatter_add",
    "index_add", "index_put", "index", "dropout", "native_dropout", "mul_scalar", "rsub",
    "erf", "sin", "cos", "square", "hardsigmoid", "hardswish", "elu", "softplus",
})
_OPT_OPS = frozenset({"_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad",
                      "_foreach_add", "_foreach_mul", "_foreach_addcmul", "_foreach_addcdiv",
                      "_foreach_sqrt", "_foreach_div", "_foreach_lerp"})
_RED_OPS = frozenset({"sum", "mean", "softmax", "_softmax", "log_softmax", "_log_softmax",
                      "norm", "layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm",
                      "linalg_vector_norm", "amax", "amin", "max", "min", "argmax", "argmin",
                      "cumsum", "prod", "var", "std", "logsumexp", "_softmax_backward_data",
                      "native_layer_norm_backward", "binary_cross_entropy_with_logits",
                      "mse_loss", "nll_loss", "cross_entropy"})


def _op_base(name: str) -> str:
    """'aten::addmm_' -> 'addmm'; 'aten::add.Tensor' -> 'add'."""
    base = name.split("::")[-1].split(".")[0]
    return base[:-1] if base.endswith("_") and not base.startswith("_") else base


@lru_cache(maxsize=65536)
def coll_op_of(name: str) -> str | None:
    """Normalised collective op for a collective-related name, else None."""
    n = name.lower()
    for prefix in COLL_PREFIXES:
        if n.startswith(prefix):
            n = n[len(prefix):]
            break
    else:
        if n.startswith("c10d::"):
            n = n[6:]
        elif _COLL_KERNEL.search(name):
            n = n.replace("ncclkernel_", "").replace("nccldevkernel_", "")
        else:
            return None
    n = n.strip("_").replace("_base", "").rstrip("_")
    table = (
        ("reduce_scatter", ("reduce_scatter", "reducescatter")),
        ("all_gather", ("allgather", "all_gather", "_allgather")),
        ("all_to_all", ("alltoall", "all_to_all", "sendrecv")),
        ("all_reduce", ("allreduce", "all_reduce")),
        ("broadcast", ("broadcast",)),
        ("barrier", ("barrier",)),
        ("reduce", ("reduce",)),
        ("gather", ("gather",)),
        ("scatter", ("scatter",)),
        ("send", ("send",)),
        ("recv", ("recv",)),
    )
    for op, keys in table:
        if any(n.startswith(k) or k in n.split("(")[0] for k in keys):
            return op
    return None


def classify(cat: str | None, name: str) -> str:
    """The kind of one (category, name) pair; 'other' when nothing matches."""
    cat = cat or ""
    if cat in RUNTIME_CATS:
        return "runtime"
    if cat == "cuda_sync":
        return "sync"
    if cat in ("gpu_memcpy", "Memcpy"):
        return "memcpy"
    if cat in ("gpu_memset", "Memset"):
        return "memset"
    if cat == "cpu_instant_event":
        return "instant"
    low = name.lower()
    if cat == "mtia_ccp_events":
        if name == "dma_request":
            return "memcpy"
        if name in ("event_record", "event_wait"):
            return "sync"
        return _device_kind(name)
    if cat in ("kernel", "Kernel"):
        return _device_kind(name)
    if cat in ANNOTATION_CATS or cat.endswith("annotation"):
        if low.startswith(COLL_PREFIXES) and cat != "gpu_user_annotation" and coll_op_of(name):
            return "p2p" if coll_op_of(name) in ("send", "recv") else "collective"
        return "annotation"
    if cat in ("cpu_op", "operator", "Operator"):
        if name == "record_param_comms" or (name.startswith("c10d::") and coll_op_of(name)):
            op = coll_op_of(name) if name.startswith("c10d::") else None
            return "p2p" if op in ("send", "recv") else "collective"
        if low.startswith("optimizer.") or "optimizer" in low:
            return "optimizer"
        if low.startswith(("fbgemm::", "torchrec::")) and "embedding" in low:
            return "embedding"
        base = _op_base(name)
        if base in _GEMM_OPS:
            return "gemm"
        if base in _CONV_OPS:
            return "conv"
        if base in _ATTN_OPS:
            return "attention"
        if base in _EMB_OPS:
            return "embedding"
        if base in _RED_OPS:
            return "reduction"
        if base in _OPT_OPS:
            return "optimizer"
        if base in _ELEM_OPS:
            return "elementwise"
        return "host_op"
    return "other"


def _device_kind(name: str) -> str:
    # `_RULE_WORDS` rule out patterns before they are searched; only on ASCII names, where
    # lowercasing and re.I's case folding agree
    low = name.lower() if name.isascii() else None
    if (low is None or any(w in low for w in _COLL_WORDS)) and _COLL_KERNEL.search(name):
        op = coll_op_of(name)
        return "p2p" if op in ("send", "recv") else "collective"
    if name.lower().startswith(("memcpy", "memset")):
        return "memcpy" if name.lower().startswith("memcpy") else "memset"
    for (kind, pat), words in zip(_DEVICE_RULES, _RULE_WORDS):
        if low is not None and words is not None and not any(w in low for w in words):
            continue
        if pat.search(name):
            return kind
    return "other"
