"""Device kernels are classified by ordered rules; words that every match of a rule contains
rule it out before its pattern is searched. Checked against the rules searched one by one, on
names that hit every alternative of every pattern, on random names built from those words, and
on names where case folding is not ASCII's."""

from __future__ import annotations

import random

import pytest

from mtia_trace.ingest import classify
from mtia_trace.ingest.classify import _DEVICE_RULES, _RULE_WORDS, _device_kind, coll_op_of


def _searched(name: str) -> str:
    """The kind by searching every rule's pattern in order (no words ruling any out)."""
    if classify._COLL_KERNEL.search(name):
        return "p2p" if coll_op_of(name) in ("send", "recv") else "collective"
    if name.lower().startswith(("memcpy", "memset")):
        return "memcpy" if name.lower().startswith("memcpy") else "memset"
    return next((kind for kind, pat in _DEVICE_RULES if pat.search(name)), "other")


NAMES = [
    # attention, embedding, optimizer
    "flash_fwd_kernel", "fmha_cutlassF_f16", "xAttentionY", "sdpa_math", "foo_attn_bar",
    "embedding_forward", "split_embedding_codegen", "split_eb_x", "tbe_kernel", "fused_tbe",
    "indexSelectLargeIndex", "EmbeddingBag_updateOutputKernel", "jagged_to_padded",
    "keyed_jagged_index", "adam_kernel", "adagrad_update", "sgd_step", "lamb_stage1",
    "optimiser_x", "Optimizer_step", "_fused_xyz_step", "_fused_step", "multi_tensor_apply_k",
    # conv, gemm
    "conv2d_fprop", "implicit_gemm_x_fprop", "implicitgemm_fprop", "winograd_4x4", "dgrad_engine",
    "wgrad_alg0", "cudnn::detail::fprop", "sm80_xmma_gemm_f16", "ampere_sgemm_128x64",
    "gemv2T_kernel", "cutlass_80_tensorop_s1688", "Cijk_Ailk_Bljk", "sm90_xmma_x", "matmul_k",
    "my_fc_layer", "FC", "xfcy", "x.mm.y", "mm", "addmm_out", "bmm_kernel", "linear_kernel",
    "dot_product_x", "tensorop_s1688",
    # reduction, elementwise
    "reduce_kernel", "softmax_warp_forward", "layer_norm_kernel", "bn_fw_tr_1C11_kernel",
    "bn_bw_1C11", "batchnorm_x", "batch_norm_collect", "x_sum_y", "sum", "summary", "mean_k",
    "argmax_kernel", "argmin", "cumsum_kernel", "triton_red_fused_0", "triton_per_fused_1",
    "scan_kernel", "topk_kernel", "radixSortKVInPlace", "vectorized_elementwise_kernel",
    "unrolled_elementwise_kernel", "triton_poi_fused_add", "copy_kernel", "x_add_y", "neg", "le",
    # collectives, copies, nothing
    "ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_SendRecv", "rccl_x", "HCCL_send",
    "Memcpy DtoH", "memset_kernel", "unknown_kernel_xyz", "",
    # not ASCII: re.I folds these onto ASCII letters, lowercasing does not
    "\u017foftmax_kernel", "\u212aernel_sum", "\u0130ndexSelectLargeIndex", "flash_\u00e9",
]


def test_one_word_list_per_rule() -> None:
    assert len(_RULE_WORDS) == len(_DEVICE_RULES)
    for words in _RULE_WORDS:
        assert words is None or all(w == w.lower() for w in words)


@pytest.mark.parametrize("name", NAMES)
def test_words_never_change_a_kind(name: str) -> None:
    assert _device_kind(name) == _searched(name)


def test_words_never_change_a_kind_on_random_names() -> None:
    rnd = random.Random(7)
    parts = [w for words in _RULE_WORDS if words for w in words] + [
        "add", "eq", "ne", "nccl", "Dev", "Kernel", "memcpy", "fprop", "step", "xmma", "sm80",
        "norm", "batch", "_", "::", ".", "<", ">", "1", "x", "void", "at::native::", "\u017f"]
    for _ in range(3000):
        name = "".join(rnd.choice(parts) for _ in range(rnd.randint(1, 8)))
        name = "".join(c.upper() if rnd.random() < 0.3 else c for c in name)
        assert _device_kind(name) == _searched(name), name
