"""Built-in models, with their sources (HARDWARE.md 1i and 2.6 in the design docs). Every size
below is from the named source or labelled *assumed* here, in `synth --help` and in the docs.

- ``dlrm-kaggle``: Criteo Kaggle DLRM (facebookresearch/dlrm bench/dlrm_s_criteo_kaggle.sh):
  26 one-hot tables of dim 16 with the Kaggle cardinalities, bottom 13-512-256-64-16, top
  512-256-1, dot interaction, batch 128, FP32, eager PyTorch (the reference script).
- ``dlrm-dcnv2``: MLPerf DLRM-DCNv2 as the 8-GPU submissions run it. Model
  (mlcommons/training recommendation_v2/torchrec_dlrm README): 26 tables of dim 128 capped at
  40 M rows, multi-hot 214 lookups/sample, bottom 512-256-128, DCN 3 layers of rank 512, top
  1024-1024-512-256-1. Run (mlcommons/training_results_v4.0, NVIDIA dlrm_dcnv2
  merlin_hugectr config_DGXH200_1x8x6912.sh / config_DGXH100_1x8x6912.sh): BATCHSIZE=55296 on
  8 GPUs (6912 per GPU), USE_MIXED_PRECISION=true with a loss scaler (FP16 dense compute,
  activations, pooled embeddings and their communication), one fused TBE per rank with the
  row-wise Adagrad update in its backward, the step launched as a CUDA graph (graph-node launch
  cost, `costing.GRAPH_NODE_LAUNCH_US`). FP32 embedding tables: the submission's planner
  (sharding/generate_plan.py) budgets 8 bytes per element under Adagrad, an FP32 weight and its
  FP32 accumulator, and holds every table in HBM (its per-GPU cap, memory_cap_for_embedding,
  is 60 GB; the tables take 204,184,588 rows x 128 x 8 B / 8 GPUs = 26 GB each): no host-memory
  cache, only the GPU's L2 (the replay's cache model). Sharding ``auto``: the submission's
  planner (SHARDING_PLAN=auto, sharding/planner.py) balances tables by hotness across GPUs and
  splits the hottest ones; the ``auto`` planner here does the same with column shards
  (``--sharding tw`` is the naive table-wise plan). Framework ``hugectr``: the submission's
  ``train.py`` (HugeCTR, ``train_intra_iteration_overlap=True``, ``train_inter_iteration_overlap=
  True``, ``grouped_all_reduce=True``, ``use_embedding_collection=True``) runs HugeCTR's pipeline
  (NVIDIA-Merlin/HugeCTR ``HugeCTR/src/pybind/model_pipeline.cpp``, tags v23.04.00 / v24.04.00:
  input distributed a step ahead on a prefetch stream, bottom MLP beside the pooled-embedding
  exchange, one all-reduce of the dense gradients after the backward) and its fused dense layers
  (``mlp_layer.cu``, ``functors/fused_gemm_functors.cu``: bias and ReLU in cuBLASLt epilogues;
  ``multi_cross_layer.cu``: one fused element-wise kernel per cross layer forward and backward);
  ``--framework torchrec`` is the PyTorch DDP step. Assumed: the row-wise Adagrad update
  (HugeCTR keeps an accumulator per element; the model's backward is FBGEMM's row-wise update).
- ``rec-150b``: the 150 B-parameter recommender on 40 accelerators of the MTIA 300 disclosure
  (Aug-2026), whose model is not described; all of its sizes are assumed, from DCNv2: the 26
  DCNv2 tables taken 4 times (104 tables, so embedding communication grows with the model and
  not only its rows), dim 128, DCNv2's multi-hot pooling per table (856 lookups/sample), rows
  grown x1.435 until the tables hold 150 B parameters; DCNv2's dense stack; the MLPerf per-GPU
  batch 6912 on 40 ranks (global 276,480); table-row-wise sharding (TorchRec's scheme for
  tables larger than one host); DCNv2's mixed precision and graph-captured launches.
"""

from __future__ import annotations

from mtia_trace.synth.model import Model, Table

KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
               27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
DCNV2_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282,
              10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108,
              36)
DCNV2_POOLING = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
#: MLPerf DLRM-DCNv2 on 8 GPUs (NVIDIA submission config): global batch
MLPERF_DCNV2_BATCH, MLPERF_DCNV2_GPUS = 55296, 8
REC150B_PARAMS = 150e9
REC150B_RANKS = 40
REC150B_TABLE_COPIES = 4


def _dcnv2(name: str, rows: tuple[int, ...], pooling: tuple[int, ...], batch: int, ranks: int,
           sharding: str, doc: str, framework: str = "torchrec") -> Model:
    return Model(
        name=name, tables=tuple(Table(r, 128, p) for r, p in zip(rows, pooling, strict=True)),
        bottom_mlp=(512, 256, 128), top_mlp=(1024, 1024, 512, 256, 1), batch=batch,
        interaction="dcn", dcn_layers=3, dcn_rank=512, ranks=ranks, sharding=sharding,
        dtype="c10::Half", emb_dtype="float", host_overhead="graph", framework=framework, doc=doc)


def _rec150b_rows() -> tuple[int, ...]:
    rows = DCNV2_ROWS * REC150B_TABLE_COPIES
    factor = REC150B_PARAMS / (128 * sum(rows))
    return tuple(round(r * factor) for r in rows)


PRESETS: dict[str, Model] = {
    "dlrm-kaggle": Model(
        name="dlrm-kaggle", tables=tuple(Table(r, 16, 1.0) for r in KAGGLE_ROWS),
        bottom_mlp=(512, 256, 64, 16), top_mlp=(512, 256, 1), batch=128, interaction="dot",
        ranks=1, sharding="tw",
        doc="Criteo Kaggle DLRM: 26 one-hot tables dim 16, bottom 13-512-256-64-16, top 512-256-1,"
            " dot interaction, batch 128, 1 rank, FP32, eager"),
    "dlrm-dcnv2": _dcnv2(
        "dlrm-dcnv2", DCNV2_ROWS, DCNV2_POOLING, MLPERF_DCNV2_BATCH, MLPERF_DCNV2_GPUS, "auto",
        "MLPerf DLRM-DCNv2 as the 8-GPU submission runs it: 26 tables dim 128 (<= 40M rows), 214"
        " lookups/sample, bottom 512-256-128, DCN 3 x rank 512, top 1024-1024-512-256-1; batch"
        " 55296 on 8 ranks (NVIDIA config_DGXH100_1x8x6912), FP16 mixed precision, fused TBE,"
        " CUDA-graph launches, FP32 tables (the submission's planner budgets FP32 weight and"
        " accumulator), auto sharding (balanced by lookup bytes, heaviest tables split"
        " column-wise, as the submission's planner balances hotness), HugeCTR's training program"
        " (input distributed a step ahead, bottom MLP beside the pooled-embedding exchange, one"
        " dense all-reduce after the backward, bias/ReLU in GEMM epilogues, fused DCN"
        " element-wise kernels)", framework="hugectr"),
    "rec-150b": _dcnv2(
        "rec-150b", _rec150b_rows(), DCNV2_POOLING * REC150B_TABLE_COPIES,
        MLPERF_DCNV2_BATCH // MLPERF_DCNV2_GPUS * REC150B_RANKS, REC150B_RANKS, "twrw",
        "150B-parameter recommender on 40 ranks (MTIA 300 disclosure; model not published, all"
        " assumed): DCNv2's 26 tables x4 = 104 tables dim 128, DCNv2 pooling (856"
        " lookups/sample), rows grown to 150B params, DCNv2 dense stack, batch 6912/rank"
        " (MLPerf per-GPU) = 276480, twrw, FP16 mixed precision, FP32 tables, CUDA-graph"
        " launches"),
}
