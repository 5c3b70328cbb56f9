"""FLOPs and bytes of host ops from their recorded input shapes (`Input Dims`, `Input type`).

Formulas (multiply-add = 2 flops):
  mm [M,K]x[K,N]: 2MKN; addmm/baddbmm add the bias; bmm [B,M,K]x[B,K,N]: 2BMKN;
  matmul: broadcast batch x 2MKN; linear x[...,K], w[N,K]: 2*rows*K*N;
  conv: 2 * N * out_channels * in_channels/groups * kernel volume * output spatial volume
  (output size from stride/padding/dilation in `Concrete Inputs` when recorded, else same as input);
  embedding: gathers indices x dim rows; embedding_bag also sums them (1 flop per element);
  elementwise: one flop per output element; reductions: one flop per input element.
Bytes read are the tensor inputs (for embeddings: the gathered rows plus the indices), bytes
written the output. Unknown ops get zeros; the trace's own `flops` arg wins when present.
"""

from __future__ import annotations

import math
import re
from typing import Any

DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "c10::half": 2, "half": 2,
    "float16": 2, "c10::bfloat16": 2, "bfloat16": 2, "long int": 8, "long": 8, "int64": 8,
    "int": 4, "int32": 4, "short int": 2, "short": 2, "int16": 2, "signed char": 1, "int8": 1,
    "unsigned char": 1, "uint8": 1, "bool": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "byte": 1, "char": 1,
}


def dtype_size(dtype: str | None, default: int = 4) -> int:
    if not dtype:
        return default
    return DTYPE_BYTES.get(dtype.lower(), default)


def _numel(dims: Any) -> int:
    if not isinstance(dims, list):
        return 0
    if dims and isinstance(dims[0], list):  # a TensorList: [[d0, d1], [d0]]
        return sum(_numel(d) for d in dims)
    n = 1
    for d in dims:
        if type(d) is not int:  # the usual case is all ints: no conversion needed
            if not isinstance(d, (int, float)):
                return 0
            d = int(d)
        n *= d
    return n


#: input types that are no tensor (`_is_tensor`)
_NOT_TENSOR = frozenset(("", "Scalar", "ScalarList"))


def _is_tensor(dims: Any, typ: Any) -> bool:
    return isinstance(dims, list) and isinstance(typ, str) and typ not in _NOT_TENSOR


def _ints(text: Any) -> list[int] | None:
    if not isinstance(text, str) or not text.startswith("["):
        return None
    try:
        return [int(x) for x in re.findall(r"-?\d+", text)]
    except ValueError:
        return None


def _gemm(base: str, dims: list[Any]) -> float:
    """FLOPs of the matrix-multiply family from input shapes, 0 if shapes don't fit."""
    try:
        if base in ("mm", "addmm", "_addmm_activation"):
            a, b = (dims[0], dims[1]) if base == "mm" else (dims[1], dims[2])
            m, k = a
            n = b[1]
            return 2.0 * m * k * n
        if base in ("bmm", "baddbmm", "addbmm"):
            a, b = (dims[0], dims[1]) if base == "bmm" else (dims[1], dims[2])
            bs, m, k = a
            n = b[2]
            return 2.0 * bs * m * k * n
        if base == "linear":
            x, w = dims[0], dims[1]
            rows = math.prod(x[:-1]) if len(x) > 1 else 1
            return 2.0 * rows * x[-1] * (w[0] if len(w) == 2 else 1)
        if base == "matmul":
            a, b = list(dims[0]), list(dims[1])
            if len(a) == 1:
                a = [1] + a
            if len(b) == 1:
                b = b + [1]
            batch_a, batch_b = a[:-2], b[:-2]
            nb = max(len(batch_a), len(batch_b))
            batch_a = [1] * (nb - len(batch_a)) + batch_a
            batch_b = [1] * (nb - len(batch_b)) + batch_b
            batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
            return 2.0 * batch * a[-2] * a[-1] * b[-1]
        if base in ("addmv", "mv"):
            a = dims[0] if base == "mv" else dims[1]
            return 2.0 * a[0] * a[1]
    except (IndexError, TypeError, ValueError):
        return 0.0
    return 0.0


def _conv(dims: list[Any], concrete: list[Any] | None) -> float:
    try:
        x, w = dims[0], dims[1]
        nsp = len(x) - 2
        if nsp < 1 or len(w) != len(x):
            return 0.0
        conc = concrete or []
        stride = _ints(conc[3]) if len(conc) > 3 else None
        padding = _ints(conc[4]) if len(conc) > 4 else None
        dilation = _ints(conc[5]) if len(conc) > 5 else None
        out_sp = []
        for i in range(nsp):
            k = w[2 + i]
            s = stride[i if len(stride) > i else 0] if stride else 1
            p = padding[i if len(padding) > i else 0] if padding else (k - 1) // 2
            d = dilation[i if len(dilation) > i else 0] if dilation else 1
            out_sp.append(max(0, (x[2 + i] + 2 * p - d * (k - 1) - 1) // max(s, 1) + 1))
        return 2.0 * x[0] * w[0] * w[1] * math.prod(w[2:]) * math.prod(out_sp)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return 0.0


def op_cost(kind: str, name: str, dims: list[Any] | None, types: list[Any] | None,
            concrete: list[Any] | None) -> tuple[float, float, float, str | None]:
    """(flops, bytes_read, bytes_written, dtype) of one host op from its recorded inputs."""
    if not dims:
        return 0.0, 0.0, 0.0, None
    types = types or []
    # inputs without a recorded type are float tensors
    typed = types if len(types) >= len(dims) else [*types, *["float"] * (len(dims) - len(types))]
    tensors = [(d, t) for d, t in zip(dims, typed)
               if isinstance(d, list) and isinstance(t, str) and t not in _NOT_TENSOR]
    if not tensors:
        return 0.0, 0.0, 0.0, None
    dtype = tensors[0][1]
    numels = [_numel(d) for d, _ in tensors]
    read = float(sum(n * dtype_size(t) for n, (_, t) in zip(numels, tensors)))
    esize = dtype_size(dtype)
    if kind == "elementwise":
        out_n = max(numels)
        return float(out_n), read, float(out_n * esize), dtype
    if kind == "reduction":
        return float(numels[0]), read, 0.0, dtype
    base = name.split("::")[-1].split(".")[0]
    base = base[:-1] if base.endswith("_") and not base.startswith("_") else base
    if kind == "gemm":
        flops = _gemm(base, dims)
        out = 0.0
        if flops:
            # output elements = flops / (2K); recover K from the first matrix operand
            a = dims[1] if base in ("addmm", "baddbmm", "addbmm", "_addmm_activation", "addmv") else dims[0]
            k = a[-1] if isinstance(a, list) and a else 1
            out = flops / (2.0 * max(k, 1)) * esize
        return flops, read, out, dtype
    if kind == "conv":
        flops = _conv(dims, concrete)
        w = dims[1] if len(dims) > 1 else []
        k_vol = math.prod(w[1:]) if isinstance(w, list) and len(w) > 1 else 1
        out = flops / (2.0 * max(k_vol, 1)) * esize if flops else 0.0
        return flops, read, out, dtype
    if kind == "embedding" and _TBE_LOOKUP.match(base):
        return _tbe(dims, types, concrete)
    if kind == "embedding" and base.startswith(("embedding", "_embedding_bag")) and "backward" not in base:
        try:
            weight = dims[0]
            dim = weight[-1]
            n_idx = _numel(dims[1])
            idx_bytes = n_idx * dtype_size(types[1] if len(types) > 1 else "long int", 8)
            gathered = float(n_idx * dim * esize)
            if "bag" in base:
                n_bags = _numel(dims[2]) if len(dims) > 2 else 1
                return float(n_idx * dim), gathered + idx_bytes, float(n_bags * dim * esize), dtype
            return 0.0, gathered + idx_bytes, gathered, dtype
        except (IndexError, TypeError):
            return 0.0, read, 0.0, dtype
    return 0.0, 0.0, 0.0, dtype


_TBE_LOOKUP = re.compile(r"^split_embedding\w*_codegen_(lookup|forward)_")


def table_bytes(kind: str, name: str, dims: list[Any] | None, types: list[Any] | None) -> float:
    """Bytes of the embedding table(s) an embedding lookup reads from: its weights tensor (the
    first floating tensor: a TBE's flat weights, an ``embedding(_bag)``'s ``[rows, dim]``); 0 for
    other ops and backward passes."""
    if kind != "embedding" or not dims:
        return 0.0
    base = name.split("::")[-1].split(".")[0]
    if not (_TBE_LOOKUP.match(base) or (base.startswith(("embedding", "_embedding_bag"))
                                        and "backward" not in base)):
        return 0.0
    types = types or []
    for i, d in enumerate(dims):
        t = str(types[i]) if i < len(types) else ""
        if _is_tensor(d, t) and t not in _INT_TYPES:
            return float(_numel(d) * dtype_size(t))
    return 0.0
_INT_TYPES = frozenset({"long int", "long", "int64", "int", "int32"})


def _tbe(dims: list[Any], types: list[Any], concrete: list[Any] | None
         ) -> tuple[float, float, float, str | None]:
    """FBGEMM table-batched embedding lookup (pooled) from its recorded arguments.

    The weights dtype is the first floating tensor's; `indices` is the largest 1-D integer
    tensor and `offsets` the 1-D integer tensor right after it (B*T+1 entries). The mean row
    width is total_D / T: total_D is the first integer scalar in `Concrete Inputs` after
    `D_offsets` (the 1-D integer tensor of T+1 entries before it). Reads: gathered rows, indices
    and offsets; writes: the pooled output (B*total_D). Zeros when any piece is missing.
    """
    def typ(i: int) -> str:
        return str(types[i]) if i < len(types) else ""

    floats = [i for i, d in enumerate(dims) if _is_tensor(d, typ(i)) and typ(i) not in _INT_TYPES]
    ints = [i for i, d in enumerate(dims)
            if isinstance(d, list) and len(d) == 1 and typ(i) in _INT_TYPES]
    if not floats or len(ints) < 2 or not concrete:
        return 0.0, 0.0, 0.0, typ(floats[0]) if floats else None
    wtype = typ(floats[0])
    idx = max(ints, key=lambda i: _numel(dims[i]))
    off = next((i for i in ints if i > idx), None)
    total_d = t = None
    for i, c in enumerate(concrete):
        if typ(i) == "Scalar" and isinstance(c, str) and c.strip().isdigit() and int(c) > 0:
            prev = [j for j in ints if j < i]
            if prev and _numel(dims[prev[-1]]) > 1:
                total_d, t = int(c), _numel(dims[prev[-1]]) - 1
            break
    if off is None or not total_d or not t:
        return 0.0, 0.0, 0.0, wtype
    n_idx, n_off = _numel(dims[idx]), _numel(dims[off])
    bags = max(n_off - 1, 0)
    esize, dim = dtype_size(wtype), total_d / t
    read = n_idx * dim * esize + n_idx * dtype_size(typ(idx), 8) + n_off * dtype_size(typ(off), 8)
    return float(n_idx * dim), float(read), float(bags / t * total_d * esize), wtype


_SIZE = re.compile(r"(\d+(?:\.\d+)?)")


def parse_size(value: Any) -> float:
    """Bytes from a numeric arg or a string like '18803888 bytes'; 0 when absent."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    m = _SIZE.search(str(value))
    return float(m.group(1)) if m else 0.0
