"""Shape-aware compute/communication interference (`replay.hardware.interference`): wave
quantisation of a GEMM's grid against the SMs a collective's CTAs leave, HBM contention from
the collective's own traffic, and the peer-wait span of a GPU collective holding its SMs."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pyarrow as pa
import pytest

from replay.hardware import interference as I
from replay.hardware import load_spec, model_for
from replay.hardware.compute import zipf_hit_ratio
from replay.hardware.spec import HardwareSpec
from replay.run import replay_events
from tests.replay_tables import dev, table

H100 = load_spec("h100")
SM = int(H100.value("comm.sm_count"))
CTAS = int(H100.value("comm.comm_ctas"))


def test_wave_ratio_one_wave_vs_many_waves() -> None:
    held = np.full(3, float(CTAS))
    w = I.wave_ratio(np.array([SM, 40 * SM, 0.0]), SM, held)
    assert w[0] == 2.0                                   # one full wave spills into a second
    assert w[1] == pytest.approx(math.ceil(40 * SM / (SM - CTAS)) / 40)
    assert w[2] == pytest.approx(SM / (SM - CTAS))       # no shape: many-wave limit
    assert w[0] > w[1] > 1.0
    assert (I.wave_ratio(np.array([SM, 7.0]), SM, np.zeros(2)) == 1.0).all()  # nothing held


def test_gemm_grid_from_shape_and_split_k() -> None:
    tm, tn = (float(H100.value(f"interference.gemm_tile_{a}")) for a in "mn")
    kmin = float(H100.value("interference.split_k_min_k"))
    # 8192 x 1024 output, K = 512: 64 x 8 = 512 tiles, no split
    m, n, k = 8192, 1024, 512
    g = I.gemm_grid(H100, np.array([2.0 * m * n * k]), np.array([float(m * n)]))
    assert g[0] == math.ceil(m / tm) * math.ceil(n / tn)
    # weight gradient 512 x 256 (8 tiles) over K = 8192: split K to fill the SMs
    m, n, k = 512, 256, 8192
    g = I.gemm_grid(H100, np.array([2.0 * m * n * k]), np.array([float(m * n)]))
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    assert g[0] == tiles * min(SM // tiles, math.ceil(k / kmin))
    assert I.gemm_grid(H100, np.array([0.0]), np.array([0.0]))[0] == 0.0  # unknown shape


#: a GEMM of 132 output tiles (one wave on h100) and one of 20 waves; both compute-bound
ONE_WAVE = (12 * 128, 11 * 128, 16384)
MANY_WAVES = (20 * 12 * 128, 11 * 128, 16384)


def _one_gemm(shape: tuple[int, int, int], *, hw: str = "h100", kind: str = "gemm",
              dtype: str = "c10::BFloat16", after: bool = False, late_peer: float = 0.0,
              sets: tuple[str, ...] = (), victim: str = "victim") -> tuple[float, float]:
    """Two ranks, each with a 4 GiB all-to-all on stream 20 and a kernel of ``shape``
    (M, N, K) on stream 7 (both start with the rank) or, ``after``, behind the all-to-all on
    stream 20. ``late_peer``: rank 1 first runs that long on stream 20, so rank 0's collective
    waits for it. ``victim``: the kernel's name. Replayed in roofline mode; returns (rank 0's kernel compute + fetch after the
    replay, before any stretch)."""
    m, n, k = shape
    rows = []
    for r in (0, 1):
        if r == 1 and late_peer:
            rows.append(dev(r, 0.0, late_peer, stream=20, kind="other", name="busy"))
        rows.append(dev(r, 1.0 + late_peer * r, 1.0, stream=20, kind="collective", pg="0",
                        coll_seq=0, coll_op="all_to_all", name="ncclSendRecv"))
        rows.append(dev(r, 1e7 if after else 0.5, 1.0, stream=20 if after else 7, kind=kind,
                        name=victim))
    t = table(rows)
    v = np.array([x == victim for x in t.column("name").to_pylist()])
    c = np.array([x == "ncclSendRecv" for x in t.column("name").to_pylist()])
    esz = 2.0 if "16" in dtype else 4.0
    flops = 2.0 * m * n * k if kind == "gemm" else float(m * n)
    cols = {"flops": np.where(v, flops, 0.0),
            "bytes_read": np.where(v, (m * k + k * n) * esz, 0.0),
            "bytes_written": np.where(v, m * n * esz, 0.0),
            "dtype": [dtype if x else None for x in v],
            "coll_bytes_in": np.where(c, 2.0 ** 32, 0.0),
            "coll_bytes_out": np.where(c, 2.0 ** 32, 0.0),
            "group_size": np.where(c, 2, 0).astype(np.int32),
            "pg_ranks": ["[0, 1]" if x else None for x in c]}
    for name, col in cols.items():
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(col, type=t.schema.field(i).type))
    model = model_for(load_spec(hw, list(sets)), mode="roofline")
    ev = replay_events(t, model).events
    g0 = int(np.flatnonzero(v & (t.column("rank").to_numpy() == 0))[0])
    got = float(ev.column("compute_us")[g0].as_py() + ev.column("fetch_us")[g0].as_py())
    base = model.cost(t)
    return got, float(base.compute_us[g0] + base.fetch_us[g0])


def test_one_wave_gemm_slows_more_than_many_waves() -> None:
    one, one0 = _one_gemm(ONE_WAVE)
    many, many0 = _one_gemm(MANY_WAVES)
    s_one, s_many = one / one0 - 1, many / many0 - 1
    beta = float(H100.value("comm.mem_contention"))
    assert s_one == pytest.approx(2 * (1 + beta) - 1, rel=1e-6)  # 1 wave -> 2, compute-bound
    assert 0 < s_many < s_one
    assert s_many == pytest.approx(math.ceil(20 * SM / (SM - CTAS)) / 20 * (1 + beta) - 1,
                                   rel=1e-6)


def test_no_overlap_means_no_slowdown() -> None:
    got, base = _one_gemm(ONE_WAVE, after=True)
    assert got == base
    # nothing held and no contention: no slowdown even when overlapping
    got, base = _one_gemm(ONE_WAVE, sets=("comm.comm_ctas=0", "comm.mem_contention=0",
                                          "interference.hbm_bytes_per_wire_byte=0"))
    assert got == base


def _all_to_all_load(spec: HardwareSpec) -> float:
    """By hand: the 4 GiB all-to-all of `_one_gemm` on 2 ranks sends (p-1)/p of its buffer and
    receives as much; its HBM sees hbm_bytes_per_wire_byte x that over its transfer time, a
    load u of the sustained HBM bandwidth (peak x hbm.efficiency)."""
    t = table([dev(0, 0.0, 1.0, stream=20, kind="collective", pg="0", coll_seq=0,
                   coll_op="all_to_all")])
    for name, col in (("coll_bytes_in", [2.0 ** 32]), ("coll_bytes_out", [2.0 ** 32]),
                      ("group_size", [2]), ("pg_ranks", ["[0, 1]"])):
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), pa.array(col, type=t.schema.field(i).type))
    transfer = float(model_for(spec, mode="roofline").cost(t).collective_us[0])
    return (float(spec.value("interference.hbm_bytes_per_wire_byte")) * 2.0 ** 31 / transfer
            / (float(spec.value("hbm.bandwidth_GBps")) * 1e3 * float(spec.value("hbm.efficiency"))))


def test_memory_bound_kernel_pays_hbm_contention_on_offloaded_path_too() -> None:
    # an elementwise kernel (memory-bound) beside the all-to-all on mtia300: no SMs are held
    # (message engines), but the collective's traffic shares HBM with it
    spec = load_spec("mtia300")
    got, base = _one_gemm((8192, 4096, 1), hw="mtia300", kind="elementwise", dtype="float")
    # a streaming kernel draws all of HBM (d = 1): fully overlapped, it takes 1 + u
    u = _all_to_all_load(spec)
    assert 0.05 < u < 1
    assert got == pytest.approx(base * (1 + u), rel=1e-9)
    # a compute-bound GEMM on mtia300 slows by at most the disclosed < 0.5 %
    got, base = _one_gemm(ONE_WAVE, hw="mtia300")
    assert base < got <= base * 1.005 * (1 + 1e-12)


def test_peer_wait_holds_sms_but_moves_no_data() -> None:
    # rank 1 is busy for 50 ms first: rank 0's collective kernel spins from its own start
    # holding its CTAs; rank 0's GEMM overlaps only that wait
    got, base = _one_gemm(ONE_WAVE, late_peer=50_000.0)
    assert got == pytest.approx(2 * base, rel=1e-9)   # waves only, no transfer contention
    got, base = _one_gemm(ONE_WAVE, hw="mtia300", late_peer=50_000.0)
    assert got == base                                 # message engines hold no compute


@pytest.mark.parametrize("side", ["left", "right"])
def test_grouped_search_counts_the_keys_before_each_query(side: Literal["left", "right"]) -> None:
    """`_search` against its definition, one query at a time: the keys before (group, value)
    in (group, value) order, equal values counted per ``side``; ties, -0.0, empty groups and
    groups with no keys included."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        kg = rng.integers(-1, 4, int(rng.integers(0, 40)))
        kv = np.round(rng.normal(size=len(kg)), 1)
        kv[: len(kv) // 4] = 0.0
        o = np.lexsort((kv, kg))
        kg, kv = kg[o], kv[o]
        qg = rng.integers(-2, 5, int(rng.integers(0, 40)))
        qv = np.round(rng.normal(size=len(qg)), 1)
        qv[: len(qv) // 4] = -0.0
        want = [int(np.sum((kg < g) | ((kg == g) & ((kv < v) if side == "left" else (kv <= v)))))
                for g, v in zip(qg, qv)]
        assert I._search(kg, kv, qg, qv, side=side).tolist() == want


def _tbe_backward_demand(spec: HardwareSpec) -> float:
    """By hand: the embedding backward's HBM draw while it fetches, in units of the sustained
    HBM bandwidth. Its rate per byte: 1 / (1 / (peak x gather_ceiling) + 1 / concurrency)
    (Little's law, `compute.gather_GBps`); the cached share ``hit`` is served on chip, so HBM
    sees ``(1 - hit)`` of its bytes over ``hit / cache_bw + (1 - hit) / rate`` per byte."""
    peak = float(spec.value("hbm.bandwidth_GBps"))
    rate = 1.0 / (1.0 / (peak * float(spec.value("hbm.gather_ceiling")))
                  + 1.0 / float(spec.value("hbm.gather_backward_concurrency_GBps")))
    hit = zipf_hit_ratio(spec)
    per_byte = hit / float(spec.value("cache.bandwidth_GBps")) + (1.0 - hit) / rate
    return (1.0 - hit) / per_byte / (peak * float(spec.value("hbm.efficiency")))


@pytest.mark.parametrize("hw", ["h100", "mtia300"])
def test_latency_bound_gather_is_slowed_only_past_hbm_capacity(hw: str) -> None:
    # the embedding backward reaches ~29% of peak (Little's law): beside the all-to-all the
    # two together ask less than HBM delivers, so it is not slowed, while a streaming kernel
    # of the same bytes is slowed by 1 + u as before
    spec = load_spec(hw)
    d, u = _tbe_backward_demand(spec), _all_to_all_load(spec)
    assert 0.2 < d < 0.5 and 0.05 < u and d + u < 1
    shape = (8192, 4096, 1)
    got, base = _one_gemm(shape, hw=hw, kind="embedding", dtype="float", victim="tbe_backward")
    assert got == pytest.approx(base, rel=1e-12)
    got, base = _one_gemm(shape, hw=hw, kind="elementwise", dtype="float")
    assert got == pytest.approx(base * (1 + u), rel=1e-9)
    # a collective moving 4x the HBM bytes per wire byte asks more than the gather leaves:
    # HBM shared in proportion to demand, the gather's memory time runs d + 4u times longer,
    # the streaming kernel's 1 + 4u
    per = 4 * float(spec.value("interference.hbm_bytes_per_wire_byte"))
    sets = (f"interference.hbm_bytes_per_wire_byte={per}",)
    got, base = _one_gemm(shape, hw=hw, kind="embedding", dtype="float", victim="tbe_backward",
                          sets=sets)
    assert d + 4 * u > 1
    assert got == pytest.approx(base * (d + 4 * u), rel=1e-9)
    got, base = _one_gemm(shape, hw=hw, kind="elementwise", dtype="float", sets=sets)
    assert got == pytest.approx(base * (1 + 4 * u), rel=1e-9)
