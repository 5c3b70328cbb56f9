"""Custom models from a small TOML or JSON file.

    name = "my-model"          # optional
    batch = 4096               # global batch per step (required)
    bottom_mlp = [512, 256, 64]
    top_mlp = [512, 256, 1]
    interaction = "dot"        # or "dcn" (then dcn_layers, dcn_rank)
    dense_features = 13        # optional
    dtype = "fp32"             # optional: fp32, bf16, fp16 (dense compute and communication)
    emb_dtype = "fp32"         # optional: the embedding tables' type (default: dtype)
    host_overhead = "eager"    # optional: eager or graph (CUDA-graph launches)
    framework = "torchrec"     # optional: torchrec (PyTorch DDP step) or hugectr (HugeCTR)
    ranks = 8                  # optional defaults for --ranks / --sharding
    sharding = "tw"
    [[tables]]                 # one entry per table, or `count = N` to repeat it
    rows = 1000000
    dim = 64
    pooling = 4
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from mtia_trace.errors import UsageError
from mtia_trace.synth.model import DTYPE_ALIASES, Model, Table

REQUIRED = ("tables", "bottom_mlp", "top_mlp", "batch")
TABLE_FIELDS = ("rows", "dim", "pooling")


def load_model_file(path: str | Path) -> Model:
    """Parse and validate a model file; every problem is a one-line `UsageError`."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise UsageError(f"{p}: cannot read model file ({exc.strerror}); check the path") from None
    try:
        doc = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}"
                         f" ({exc}); fix the syntax") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{p}: expected a table of model fields; see `mtia-trace synth --help`")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise UsageError(f"{p}: missing field(s) {', '.join(missing)}; a model file needs"
                         f" {', '.join(REQUIRED)}")
    return _model(doc, p).validate(str(p))


def _model(doc: dict[str, Any], p: Path) -> Model:
    tables = doc["tables"]
    if isinstance(tables, dict):
        tables = [tables]
    if not isinstance(tables, list):
        raise UsageError(f"{p}: tables must be a list of {{rows, dim, pooling}} entries")
    out: list[Table] = []
    for i, t in enumerate(tables):
        if not isinstance(t, dict):
            raise UsageError(f"{p}: tables[{i}] must be a table with {', '.join(TABLE_FIELDS)}")
        miss = [k for k in TABLE_FIELDS if k not in t]
        if miss:
            raise UsageError(f"{p}: tables[{i}] is missing {', '.join(miss)}; each table needs"
                             f" {', '.join(TABLE_FIELDS)}")
        count = _num(t.get("count", 1), f"tables[{i}].count", p, int)
        out += [Table(_num(t["rows"], f"tables[{i}].rows", p, int),
                      _num(t["dim"], f"tables[{i}].dim", p, int),
                      _num(t["pooling"], f"tables[{i}].pooling", p, float))] * max(count, 0)
    dtype = str(doc.get("dtype", "fp32")).lower()
    if dtype not in DTYPE_ALIASES:
        raise UsageError(f"{p}: dtype is {dtype!r}; allowed: fp32, bf16, fp16")
    kw: dict[str, Any] = {}
    if "emb_dtype" in doc:
        e = str(doc["emb_dtype"]).lower()
        if e not in DTYPE_ALIASES:
            raise UsageError(f"{p}: emb_dtype is {e!r}; allowed: fp32, bf16, fp16")
        kw["emb_dtype"] = DTYPE_ALIASES[e]
    for key, typ in (("dense_features", int), ("dcn_layers", int), ("dcn_rank", int),
                     ("ranks", int)):
        if key in doc:
            kw[key] = _num(doc[key], key, p, typ)
    for key in ("interaction", "sharding", "host_overhead", "framework"):
        if key in doc:
            kw[key] = str(doc[key])
    return Model(name=str(doc.get("name", p.stem)), tables=tuple(out),
                 bottom_mlp=_widths(doc["bottom_mlp"], "bottom_mlp", p),
                 top_mlp=_widths(doc["top_mlp"], "top_mlp", p),
                 batch=_num(doc["batch"], "batch", p, int), dtype=DTYPE_ALIASES[dtype], **kw)


def _num(v: Any, name: str, p: Path, typ: type) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (typ is int and v != int(v)):
        raise UsageError(f"{p}: {name} is {v!r}; expected {'an integer' if typ is int else 'a number'}")
    return typ(v)


def _widths(v: Any, name: str, p: Path) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise UsageError(f"{p}: {name} is {v!r}; expected a list of layer widths")
    return tuple(_num(w, f"{name}[{i}]", p, int) for i, w in enumerate(v))
