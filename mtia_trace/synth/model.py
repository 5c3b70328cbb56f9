"""A recommender model as the generator sees it: embedding tables, dense MLPs, interaction."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mtia_trace.errors import UsageError

INTERACTIONS = ("dot", "dcn")
#: element type name as PyTorch writes it in `Input type` -> (bytes, record_param_comms dtype)
DTYPES = {"float": (4, "Float"), "c10::BFloat16": (2, "BFloat16"), "c10::Half": (2, "Half")}
DTYPE_ALIASES = {"float": "float", "fp32": "float", "float32": "float", "bf16": "c10::BFloat16",
                 "bfloat16": "c10::BFloat16", "fp16": "c10::Half", "float16": "c10::Half"}
SHARDINGS = ("auto", "tw", "rw", "cw", "twrw", "dp")
#: host overhead per op: ``eager`` PyTorch (Python + dispatcher + one launch call per kernel)
#: or ``graph`` (the step captured as a CUDA graph: kernels replayed at graph-node cost)
HOST_OVERHEADS = ("eager", "graph")
#: the training program the step is: ``torchrec`` (PyTorch + TorchRec/FBGEMM: input all-to-all at
#: the step's start, DDP gradient buckets all-reduced as the backward fills them, aten kernels:
#: ReLU, bias gradients and the DCN's multiply and add each a kernel) or ``hugectr`` (HugeCTR's
#: embedding-collection pipeline and fused dense layers, as the MLPerf DLRM-DCNv2 submissions
#: run it); workload.py cites the source of each difference
FRAMEWORKS = ("torchrec", "hugectr")


@dataclass(frozen=True)
class Table:
    rows: int
    dim: int
    pooling: float  # mean lookups per sample (multi-hot size)


@dataclass(frozen=True)
class Model:
    """Sizes of a DLRM-style model; ``batch`` is the global batch per step."""

    name: str
    tables: tuple[Table, ...]
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    batch: int
    dense_features: int = 13
    interaction: str = "dot"
    dcn_layers: int = 0
    dcn_rank: int = 0
    dtype: str = "float"        # dense compute, activations, pooled embeddings, communication
    ranks: int = 1
    sharding: str = "tw"
    emb_dtype: str | None = None  # embedding tables (None: ``dtype``)
    host_overhead: str = "eager"
    framework: str = "torchrec"
    doc: str = field(default="", compare=False)

    @property
    def dims(self) -> np.ndarray:
        return np.array([t.dim for t in self.tables], dtype=np.int64)

    @property
    def rows(self) -> np.ndarray:
        return np.array([t.rows for t in self.tables], dtype=np.int64)

    @property
    def pooling(self) -> np.ndarray:
        return np.array([t.pooling for t in self.tables], dtype=np.float64)

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype][0]

    @property
    def table_dtype(self) -> str:
        return self.emb_dtype or self.dtype

    @property
    def table_bytes(self) -> int:
        """Bytes of all embedding tables (weights only)."""
        return self.embedding_params * DTYPES[self.table_dtype][0]

    @property
    def embedding_params(self) -> int:
        return int((self.rows * self.dims).sum())

    @property
    def interaction_width(self) -> int:
        """Width of the interaction output fed to the top MLP."""
        d_out = self.bottom_mlp[-1]
        if self.interaction == "dcn":
            return d_out + int(self.dims.sum())
        f = len(self.tables) + 1
        return d_out + f * (f - 1) // 2

    def dense_layers(self) -> list[tuple[str, int, int]]:
        """(group, in, out) of every dense linear layer in forward order."""
        out: list[tuple[str, int, int]] = []
        prev = self.dense_features
        for w in self.bottom_mlp:
            out.append(("bottom", prev, w))
            prev = w
        if self.interaction == "dcn":
            width = self.interaction_width
            for _ in range(self.dcn_layers):
                out.append(("dcn_v", width, self.dcn_rank))
                out.append(("dcn_u", self.dcn_rank, width))
        prev = self.interaction_width
        for w in self.top_mlp:
            out.append(("top", prev, w))
            prev = w
        return out

    @property
    def dense_params(self) -> int:
        return sum(i * o + (0 if g == "dcn_v" else o) for g, i, o in self.dense_layers())

    def validate(self, origin: str = "model") -> Model:
        def bad(fieldname: str, what: str) -> UsageError:
            return UsageError(f"{origin}: {fieldname} {what}")

        if not self.tables:
            raise bad("tables", "is empty; give at least one table with rows, dim, pooling")
        for i, t in enumerate(self.tables):
            if t.rows <= 0 or t.dim <= 0 or not t.pooling > 0:
                raise bad(f"tables[{i}]", f"has rows={t.rows}, dim={t.dim}, pooling={t.pooling};"
                          " all must be positive")
        for name, mlp in (("bottom_mlp", self.bottom_mlp), ("top_mlp", self.top_mlp)):
            if not mlp or any(w <= 0 for w in mlp):
                raise bad(name, f"is {list(mlp)}; give a non-empty list of positive layer widths")
        if self.batch <= 0:
            raise bad("batch", f"is {self.batch}; must be a positive global batch size")
        if self.dense_features <= 0:
            raise bad("dense_features", f"is {self.dense_features}; must be positive")
        if self.interaction not in INTERACTIONS:
            raise bad("interaction", f"is {self.interaction!r}; allowed: {', '.join(INTERACTIONS)}")
        if self.interaction == "dot":
            if len(set(self.dims.tolist())) != 1 or self.bottom_mlp[-1] != self.tables[0].dim:
                raise bad("bottom_mlp", f"ends in {self.bottom_mlp[-1]} but dot interaction needs"
                          f" it equal to every table dim ({sorted(set(self.dims.tolist()))})")
        elif self.dcn_layers <= 0 or self.dcn_rank <= 0:
            raise bad("dcn_layers/dcn_rank", f"are {self.dcn_layers}/{self.dcn_rank}; dcn"
                      " interaction needs both positive")
        if self.dtype not in DTYPES:
            raise bad("dtype", f"is {self.dtype!r}; allowed: fp32, bf16, fp16")
        if self.table_dtype not in DTYPES:
            raise bad("emb_dtype", f"is {self.emb_dtype!r}; allowed: fp32, bf16, fp16")
        if self.host_overhead not in HOST_OVERHEADS:
            raise bad("host_overhead", f"is {self.host_overhead!r}; allowed: "
                      f"{', '.join(HOST_OVERHEADS)}")
        if self.framework not in FRAMEWORKS:
            raise bad("framework", f"is {self.framework!r}; allowed: {', '.join(FRAMEWORKS)}")
        if self.ranks <= 0:
            raise bad("ranks", f"is {self.ranks}; must be positive")
        if self.sharding not in SHARDINGS:
            raise bad("sharding", f"is {self.sharding!r}; allowed: {', '.join(SHARDINGS)}")
        return self
