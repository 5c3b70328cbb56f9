"""Built-in models, with their sources (see ../shared HARDWARE.md 1i and 2.6 in the design docs).

- ``dlrm-kaggle``: Criteo Kaggle DLRM (facebookresearch/dlrm bench/dlrm_s_criteo_kaggle.sh):
  26 one-hot tables of dim 16 with the Kaggle cardinalities, bottom 13-512-256-64-16, top
  512-256-1, dot interaction, batch 128.
- ``dlrm-dcnv2``: MLPerf DLRM-DCNv2 (mlcommons/training recommendation_v2): 26 tables of dim 128
  capped at 40 M rows, multi-hot 214 lookups/sample, bottom 512-256-128, DCN 3 layers of rank 512,
  top 1024-1024-512-256-1, global batch 65536 on 8 ranks, table-wise sharding.
- ``rec-150b``: the ~150 B-parameter recommender of the MTIA 300 scenario on 40 accelerators:
  DCNv2's shape with every table's rows grown by the same factor until the embeddings hold
  150 B parameters; global batch 64000 (1600 per rank), table-row-wise sharding.
"""

from __future__ import annotations

from mtia_trace.synth.model import Model, Table

KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
               27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
DCNV2_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282,
              10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108,
              36)
DCNV2_POOLING = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
REC150B_PARAMS = 150e9


def _dcnv2(name: str, rows: tuple[int, ...], batch: int, ranks: int, sharding: str,
           doc: str) -> Model:
    return Model(
        name=name, tables=tuple(Table(r, 128, p) for r, p in zip(rows, DCNV2_POOLING, strict=True)),
        bottom_mlp=(512, 256, 128), top_mlp=(1024, 1024, 512, 256, 1), batch=batch,
        interaction="dcn", dcn_layers=3, dcn_rank=512, ranks=ranks, sharding=sharding, doc=doc)


def _rec150b_rows() -> tuple[int, ...]:
    factor = REC150B_PARAMS / (128 * sum(DCNV2_ROWS))
    return tuple(round(r * factor) for r in DCNV2_ROWS)


PRESETS: dict[str, Model] = {
    "dlrm-kaggle": Model(
        name="dlrm-kaggle", tables=tuple(Table(r, 16, 1.0) for r in KAGGLE_ROWS),
        bottom_mlp=(512, 256, 64, 16), top_mlp=(512, 256, 1), batch=128, interaction="dot",
        ranks=1, sharding="tw",
        doc="Criteo Kaggle DLRM: 26 one-hot tables dim 16, bottom 13-512-256-64-16, top 512-256-1,"
            " dot interaction, batch 128, 1 rank"),
    "dlrm-dcnv2": _dcnv2(
        "dlrm-dcnv2", DCNV2_ROWS, 65536, 8, "tw",
        "MLPerf DLRM-DCNv2: 26 tables dim 128 (<= 40M rows), 214 lookups/sample, bottom"
        " 512-256-128, DCN 3 x rank 512, top 1024-1024-512-256-1, batch 65536 on 8 ranks, tw"),
    "rec-150b": _dcnv2(
        "rec-150b", _rec150b_rows(), 64000, 40, "twrw",
        "~150B-parameter recommender (MTIA 300 scenario): DCNv2 shape, rows grown to 150B"
        " embedding params, batch 64000 on 40 ranks, twrw"),
}
