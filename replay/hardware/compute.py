"""Compute and fetch costs over arrays: roofline per dtype, embedding gathers, copies and DMA.

Units: FLOP/us = TFLOPS x 1e6 and B/us = GB/s x 1e3. For each event the roofline time is
``max(t_compute, t_memory)``; the compute part is ``t_compute`` and the memory-bound excess
``t_memory - t_compute`` is fetch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mtia_trace.schema import COMPUTE_KINDS, GEMM_KINDS, KINDS
from replay.hardware.spec import HardwareSpec


def kind_codes(kind: pa.ChunkedArray) -> np.ndarray:
    """Index into `schema.KINDS` per event (unknown strings map to 'other')."""
    arr = kind if isinstance(kind, pa.ChunkedArray) else pa.chunked_array([kind])
    enc = pc.dictionary_encode(pc.fill_null(arr.cast(pa.string()), "other").combine_chunks())
    other = KINDS.index("other")
    lut = np.array([KINDS.index(k) if k in KINDS else other
                    for k in enc.dictionary.to_pylist()] or [other])
    return lut[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]


def codes(*names: str) -> list[int]:
    return [KINDS.index(n) for n in names]


def kind_mask(kind: np.ndarray, *names: str) -> np.ndarray:
    """``np.isin(kind, codes(*names))`` by table lookup (kind codes are small ints)."""
    lut = np.zeros(len(KINDS), dtype=bool)
    lut[codes(*names)] = True
    return lut[kind]


def _dtype_class(name: str | None) -> str:
    """Map a recorded dtype string to a peak column: fp8, bf16 or fp32."""
    if not name:
        return "fp32"
    s = name.lower()
    if any(t in s for t in ("float8", "fp8", "e4m3", "e5m2", "int8", "uint8", "qint", "mx8")):
        return "fp8"
    if any(t in s for t in ("bfloat16", "bf16", "half", "float16", "fp16")):
        return "bf16"
    return "fp32"


def peak_flop_per_us(spec: HardwareSpec, dtype: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per-event peak FLOP/us from its dtype (unique dtypes mapped once, then gathered)."""
    arr = dtype if isinstance(dtype, pa.ChunkedArray) else pa.chunked_array([dtype])
    enc = pc.dictionary_encode(pc.fill_null(arr.cast(pa.string()), "").combine_chunks())
    peaks = {c: float(spec.value(f"compute.peak_tflops_{c}")) * 1e6
             for c in ("fp8", "bf16", "fp32")}
    table = np.array([peaks[_dtype_class(d)] for d in enc.dictionary.to_pylist()] or [0.0])
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return table[idx]


def element_bytes(dtype: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per-event element size (bytes) of its peak class: fp8 1, bf16 2, fp32 4."""
    arr = dtype if isinstance(dtype, pa.ChunkedArray) else pa.chunked_array([dtype])
    enc = pc.dictionary_encode(pc.fill_null(arr.cast(pa.string()), "").combine_chunks())
    size = {"fp8": 1.0, "bf16": 2.0, "fp32": 4.0}
    table = np.array([size[_dtype_class(d)] for d in enc.dictionary.to_pylist()] or [4.0])
    return table[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]


def zipf_hit_ratio(spec: HardwareSpec, working_set_bytes: float | None = None) -> float:
    """Fraction of gathered rows served from on-chip cache when the hottest rows are cached.

    Rows are ranked by popularity with Zipf exponent s; caching the top C of N rows hits
    H(C, s) / H(N, s) (generalised harmonic numbers, Euler-Maclaurin approximation). s = 0 gives
    C / N (uniform ids). N is the device's shard: ``working_set_bytes`` (from the trace's
    embedding shapes) or the spec's ``cache.working_set_GB`` (10^9 B) when the trace has none.
    """
    row = float(spec.value("cache.row_bytes"))
    ws = (float(spec.value("cache.working_set_GB")) * 1e9 if working_set_bytes is None
          else float(working_set_bytes))
    n = max(1.0, ws / row)
    c = min(n, float(spec.value("cache.capacity_MB")) * 2**20 / row)
    s = float(spec.value("cache.zipf_alpha"))

    def harmonic(k: float) -> float:
        if k <= 0:
            return 0.0
        if abs(s - 1.0) < 1e-9:
            return math.log(k) + 0.5772156649 + 0.5 / k
        return (k ** (1.0 - s) - 1.0) / (1.0 - s) + 0.5 * (1.0 + k ** (-s))

    return float(min(1.0, max(0.0, harmonic(c) / harmonic(n))))


@dataclass
class Roofline:
    """Compute and fetch time (us) per event on one spec."""

    compute_us: np.ndarray
    fetch_us: np.ndarray
    #: memory time ``t_memory`` of each event (its fetch part is the excess over compute)
    memory_us: np.ndarray
    #: the event's HBM traffic while it fetches, in units of the sustained HBM bandwidth
    #: (`hbm_demand`): 1 for streaming work, below 1 for latency-bound gathers
    hbm_demand: np.ndarray

    @property
    def total_us(self) -> np.ndarray:
        return self.compute_us + self.fetch_us


def is_link_copy(names: pa.ChunkedArray) -> np.ndarray:
    """True for host<->device copies and DMA requests (priced at the host link, not HBM)."""
    pattern = "(?i)(htod|dtoh|htoh|pageable|pinned|dma)"
    return pc.fill_null(pc.match_substring_regex(names, pattern), False).to_numpy(zero_copy_only=False)


def is_embedding_backward(names: pa.ChunkedArray) -> np.ndarray:
    """True for embedding backward work (the TBE backward with its fused optimizer update,
    ``embedding_dense_backward``, ``embedding_bag_backward``): priced at
    ``hbm.gather_backward_concurrency_GBps`` instead of the forward gather's."""
    pattern = "(?i)(backward|_bwd)"
    return pc.fill_null(pc.match_substring_regex(names, pattern), False).to_numpy(zero_copy_only=False)


def gather_GBps(spec: HardwareSpec, backward: bool = False) -> float:
    """Sustained HBM rate (GB/s) of an embedding kernel's uncached bytes.

    A gather's time per byte has a bandwidth part and a latency part. The bandwidth part is
    the device's: peak x ``hbm.gather_ceiling``, what random row reads reach with enough of
    them in flight. The latency part is the kernel's: by Little's law a kernel keeping Q bytes
    in flight against a memory latency L moves Q / L bytes per unit time
    (``hbm.gather_concurrency_GBps``, ``hbm.gather_backward_concurrency_GBps`` for the backward
    with its fused optimizer update), a property of the SMs and the memory path, not of the
    HBM's peak. Each request waits the latency and then its transfer (the Hockney form of the
    collectives' alpha-beta model): ``1 / rate = 1 / (peak x ceiling) + 1 / (Q / L)``. So a
    part with the same die and more HBM bandwidth speeds gathers up by less than its
    bandwidth ratio."""
    peak = float(spec.value("hbm.bandwidth_GBps"))
    key = "hbm.gather_backward_concurrency_GBps" if backward else "hbm.gather_concurrency_GBps"
    return 1.0 / (1.0 / (peak * float(spec.value("hbm.gather_ceiling")))
                  + 1.0 / float(spec.value(key)))


def gather_us_per_byte(spec: HardwareSpec, hit: np.ndarray | float,
                       backward: np.ndarray | bool = False) -> np.ndarray:
    """Time (us) per byte an embedding kernel moves: the cached share at the cache bandwidth,
    the rest at `gather_GBps` of its direction (forward, or backward with its fused optimizer
    update)."""
    rate = np.where(backward, gather_GBps(spec, backward=True), gather_GBps(spec)) * 1e3
    cache_bw = float(spec.value("cache.bandwidth_GBps")) * 1e3
    return np.asarray(hit / cache_bw + (1.0 - np.asarray(hit)) / rate, dtype=float)


def hbm_demand(spec: HardwareSpec, kind: np.ndarray, us_per_gather_byte: np.ndarray,
               hit: np.ndarray | float) -> np.ndarray:
    """Each event's HBM traffic while it fetches, in units of the sustained HBM bandwidth
    (peak x ``hbm.efficiency``, the unit of a collective's `interference.hbm_share`).

    Streaming work is priced at that bandwidth, so it demands all of it: 1. An embedding
    kernel's time per byte is `gather_us_per_byte`: its cached share is served on chip, its
    uncached share ``1 - hit`` comes from HBM at the rate Little's law leaves it
    (`gather_GBps`), so its HBM traffic is ``(1 - hit) / us_per_gather_byte`` bytes per us:
    the TBE backward on H100 SXM demands 983 / 2,680 = 0.37 of the sustained bandwidth and
    leaves the rest to other traffic. Capped at 1: no kernel draws more than HBM delivers."""
    stream_bw = float(spec.value("hbm.bandwidth_GBps")) * 1e3 * float(spec.value("hbm.efficiency"))
    gather = np.divide(1.0 - np.asarray(hit, dtype=float), us_per_gather_byte * stream_bw)
    demand = np.where(kind == KINDS.index("embedding"), gather, 1.0)
    return np.asarray(np.clip(demand, 0.0, 1.0), dtype=float)


def roofline(spec: HardwareSpec, kind: np.ndarray, flops: np.ndarray, bytes_rw: np.ndarray,
             copy_bytes: np.ndarray, peak: np.ndarray, link_copy: np.ndarray,
             hit: np.ndarray | float | None = None,
             backward: np.ndarray | bool = False) -> Roofline:
    """Roofline compute/fetch split for every event (events of other kinds get zeros).

    ``kind`` holds `schema.KINDS` indices; ``bytes_rw`` is bytes read + written; ``copy_bytes`` the size of a copy (max of the two).
    ``hit``: embedding cache-hit ratio per event (default: `zipf_hit_ratio` of the spec).
    ``backward``: per event, embedding backward work (`is_embedding_backward`).
    """
    eff_gemm = float(spec.value("compute.efficiency_gemm"))
    eff_other = float(spec.value("compute.efficiency_other"))
    hbm = float(spec.value("hbm.bandwidth_GBps")) * 1e3
    stream_bw = hbm * float(spec.value("hbm.efficiency"))
    hit = zipf_hit_ratio(spec) if hit is None else hit
    us_per_gather_byte = gather_us_per_byte(spec, hit, backward)
    link_bw = float(spec.value("host.link_GBps")) * 1e3

    eff = np.where(kind_mask(kind, *GEMM_KINDS), eff_gemm, eff_other)
    priced = kind_mask(kind, *COMPUTE_KINDS)  # the roofline prices computation
    t_c = np.where(priced, flops / (peak * eff), 0.0)
    t_m = np.where(kind == KINDS.index("embedding"), bytes_rw * us_per_gather_byte, bytes_rw / stream_bw)
    t_m = np.where(priced, t_m, 0.0)
    # copies move over the host link (H2D/D2H/DMA) or through HBM (D2D: read + write)
    copy = kind == KINDS.index("memcpy")
    t_copy = np.where(link_copy, copy_bytes / link_bw, bytes_rw / stream_bw)
    set_ = kind == KINDS.index("memset")
    fetch = np.maximum(t_m - t_c, 0.0)
    fetch = np.where(copy, t_copy, np.where(set_, bytes_rw / stream_bw, fetch))
    return Roofline(compute_us=t_c, fetch_us=fetch,
                    memory_us=np.where(copy | set_, fetch, t_m),
                    hbm_demand=hbm_demand(spec, kind, np.broadcast_to(us_per_gather_byte,
                                                                      kind.shape), hit))
