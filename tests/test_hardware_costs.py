"""Cost formulas against hand-computed values, monotonicity, determinism, overlap slowdown."""

from __future__ import annotations

import numpy as np
import pytest

from mtia_trace.errors import UsageError
from mtia_trace.schema import from_columns, validate_events
from replay.hardware import load_spec, model_for
from replay.hardware.retries import expected_retry_us, poisson_quantile

#: Every latency of the collective model set to 0 (per-step by link class, base, post).
NO_LATENCY = [f"network.{c}_{a}_{p}_us=0" for c in ("intra", "inter") for a in ("ring", "tree")
              for p in ("ll", "ll128", "simple")] + [
    f"comm.{a}_base_{p}_us=0" for a in ("ring", "tree") for p in ("ll", "ll128", "simple")] + [
    "comm.post_us=0"]
#: A one-rack offloaded spec with round numbers: 100 GB/s = 1e5 B/us, no latency, no posts, no
#: pipeline fill (the calibrated as-run term; tests/test_collectives.py covers it).
PLAIN = ["network.intra_node_GBps=100", "comm.intra_efficiency=1", "network.inter_node_GBps=10",
         "comm.inter_efficiency=1", *NO_LATENCY, "comm.fill_chunks=0"]


def events(rows: list[dict]) -> pa.Table:  # noqa: F821
    cols: dict[str, list] = {}
    keys = ("rank", "kind", "is_device", "name", "dur_us", "flops", "bytes_read", "bytes_written",
            "dtype", "coll_op", "coll_bytes_in", "coll_bytes_out", "group_size", "parent_id",
            "pg_ranks")
    defaults = dict(rank=0, kind="gemm", is_device=True, name="k", dur_us=10.0, flops=0.0,
                    bytes_read=0.0, bytes_written=0.0, dtype="float", coll_op=None,
                    coll_bytes_in=0.0, coll_bytes_out=0.0, group_size=0, parent_id=-1,
                    pg_ranks=None)
    for k in keys:
        cols[k] = [r.get(k, defaults[k]) for r in rows]
    cols["event_id"] = list(range(len(rows)))
    cols["ts_us"] = [float(i) for i in range(len(rows))]
    t = from_columns(cols)
    validate_events(t)
    return t


def coll(op: str, nbytes: float, p: int, rank: int = 0) -> dict:
    return dict(kind="collective", coll_op=op, coll_bytes_in=nbytes, coll_bytes_out=nbytes,
                group_size=p, rank=rank, name=f"nccl:{op}")


def test_ring_allreduce_and_all_to_all_bytes() -> None:
    m = model_for(load_spec("mtia300", PLAIN))
    c = m.cost(events([coll("all_reduce", 8e6, 4), coll("all_to_all", 8e6, 4),
                       coll("_allgather_base", 8e6, 4), coll("reduce_scatter", 8e6, 4)]))
    # AllReduce: 2(p-1)/p n / B = 1.5 * 8e6 / 1e5; all-to-all, AG, RS: (p-1)/p S / B
    assert c.collective_us[0] == pytest.approx(120.0)
    assert c.collective_us[1:] == pytest.approx([60.0, 60.0, 60.0])
    assert (c.compute_us == 0).all() and (c.retry_us == 0).all()


def test_latency_and_post_terms() -> None:
    # ring Simple in one rack: base + 2(p-1) steps; no post floor inside a node
    m = model_for(load_spec("mtia300", PLAIN + ["network.intra_ring_simple_us=1",
                                                "comm.ring_base_simple_us=2",
                                                "comm.protocol=simple", "comm.algorithm=ring"]))
    c = m.cost(events([coll("allreduce", 8e6, 4)]))
    assert c.collective_us[0] == pytest.approx(120.0 + 2 * 3 * 1.0 + 2.0)
    # a direct all-to-all posts one NIC message per peer (in-rack peers too on MTIA)
    m = model_for(load_spec("mtia300", PLAIN + ["comm.post_us=0.5"]))
    c = m.cost(events([coll("all_to_all", 8e6, 4)]))
    assert c.host_us[0] == pytest.approx(3 * 0.5)


def test_express_doorbell_saving_40_rank_all_to_all() -> None:
    ev = events([coll("all_to_all", 21.8e6, 40)])
    express = model_for("mtia300").cost(ev)
    host_doorbell = model_for(load_spec("mtia300", ["comm.post_us=1.0"])).cost(ev)
    assert host_doorbell.host_us[0] - express.host_us[0] == pytest.approx(39 * 0.8)
    assert (host_doorbell.collective_us == express.collective_us).all()


def test_hierarchical_allreduce_by_hand() -> None:
    spec = load_spec("h100", ["comm.intra_efficiency=1", "comm.inter_efficiency=1",
                              "comm.algorithm=hierarchical", "comm.protocol=simple", *NO_LATENCY,
                              "comm.fill_chunks=0"])
    c = model_for(spec).cost(events([coll("all_reduce", 16e6, 16)]))
    # L=8, N=2: 2*(7/8)*n over NVLink 450 GB/s + 2*(1/2)*(n/8) over the 50 GB/s NIC
    want = 2 * 7 / 8 * 16e6 / 450e3 + 2 * 0.5 * 2e6 / 50e3
    assert c.collective_us[0] == pytest.approx(want)
    assert c.host_us[0] == 0.0  # ring-type steps carry their post in the step latency floor


def test_roofline_knee() -> None:
    spec = load_spec("mtia300")
    peak = 600e6 * 0.75           # flop/us at BF16 x GEMM efficiency
    bw = 6100e3 * 0.8             # B/us at HBM x streaming efficiency
    knee = peak / bw
    nbytes = 1e8
    rows = [dict(kind="gemm", dtype="c10::BFloat16", flops=nbytes * knee * f, bytes_read=nbytes)
            for f in (0.5, 2.0)]
    c = model_for(spec, mode="roofline").cost(events(rows))
    assert c.compute_us[0] == pytest.approx(nbytes * knee * 0.5 / peak)
    assert c.compute_us[0] + c.fetch_us[0] == pytest.approx(nbytes / bw)   # memory-bound
    assert c.fetch_us[1] == 0.0
    assert c.compute_us[1] == pytest.approx(2 * nbytes / bw)              # compute-bound


def test_copies_and_embedding() -> None:
    spec = load_spec("h100")
    rows = [dict(kind="memcpy", name="Memcpy HtoD (Pageable -> Device)", bytes_read=64e6,
                 bytes_written=64e6),
            dict(kind="embedding", bytes_read=1e8)]
    c = model_for(spec, mode="roofline").cost(events(rows))
    assert c.fetch_us[0] == pytest.approx(64e6 / 64e3)  # PCIe Gen5 x16, 64 GB/s per direction
    assert c.fetch_us[1] > 1e8 / (3350e3 * 0.8)          # gathers slower than streaming


def test_embedding_backward_priced_at_its_own_concurrency() -> None:
    """The TBE backward (fused optimizer update) and the forward share the device's bandwidth
    side (peak x ceiling) and each has its own latency side: with the cache off, two equal-byte
    kernels take 1/(peak x ceiling) + 1/rate of their direction per byte."""
    fwd = "fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel"
    bwd = "fbgemm_gpu::split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel"
    rows = [dict(kind="embedding", name=fwd, bytes_read=1e8),
            dict(kind="embedding", name=bwd, bytes_read=1e8)]
    for f, b in ((8000.0, 1000.0), (20000.0, 4000.0)):
        spec = load_spec("h100", ["cache.capacity_MB=0.000001", "hbm.gather_ceiling=0.8",
                                  f"hbm.gather_concurrency_GBps={f}",
                                  f"hbm.gather_backward_concurrency_GBps={b}"])
        c = model_for(spec, mode="roofline").cost(events(rows))
        t = c.compute_us + c.fetch_us
        side = 1 / (3350 * 0.8)
        assert t[0] == pytest.approx(1e8 / 1e3 * (side + 1 / f), rel=1e-9)
        assert t[1] / t[0] == pytest.approx((side + 1 / b) / (side + 1 / f), rel=1e-9)


def test_more_hbm_bandwidth_on_the_same_die_speeds_gathers_less() -> None:
    """H200 is H100's die with 4.8 instead of 3.35 TB/s: a streaming kernel speeds up by the
    bandwidth ratio, an embedding gather by less (its latency side, bytes in flight over memory
    latency, is the die's), and the latency-bound backward least; with unbounded concurrency a
    gather would also get the whole ratio."""
    rows = [dict(kind="elementwise", bytes_read=1e9),
            dict(kind="embedding", name="split_embedding_codegen_forward_kernel", bytes_read=1e9),
            dict(kind="embedding", name="split_embedding_backward_codegen_kernel", bytes_read=1e9)]
    off = ["cache.capacity_MB=0.000001"]

    def times(name: str, sets: list[str]) -> np.ndarray:
        c = model_for(load_spec(name, off + sets), mode="roofline").cost(events(rows))
        return c.compute_us + c.fetch_us

    speedup = times("h100", []) / times("h200", [])
    bw = 4800 / 3350
    assert speedup[0] == pytest.approx(bw, rel=1e-9)
    assert 1.0 < speedup[2] < speedup[1] < bw
    unbounded = ["hbm.gather_concurrency_GBps=1e7", "hbm.gather_backward_concurrency_GBps=1e7"]
    assert times("h100", unbounded)[1:] / times("h200", unbounded)[1:] == \
        pytest.approx([bw, bw], rel=1e-3)


def test_scaled_mode_keeps_measured_inefficiency() -> None:
    ev = events([dict(kind="elementwise", bytes_read=1e6, dur_us=100.0),
                 dict(kind="elementwise", dur_us=50.0)])  # no bytes: the kind's peak ratio
    c = model_for("mtia300", mode="scaled", source="h100").cost(ev)
    assert c.dur_us == pytest.approx([100.0 * 3350 / 6100, 50.0 * 3350 / 6100])
    assert c.notes["mode"] == "scaled"
    with pytest.raises(UsageError, match="--source-hw"):
        model_for("mtia300", mode="scaled").cost(ev)


def test_auto_mode_recorded() -> None:
    c = model_for("h100").cost(events([dict(kind="gemm", flops=1e9, dur_us=5.0)]))
    assert c.notes["mode"] == "roofline" and "100%" in str(c.notes["mode_reason"])
    assert "hbm.efficiency" in c.notes["assumed"]


def test_cpu_only_trace_keeps_host_ops_as_host_cost() -> None:
    rows = [dict(kind="host_op", is_device=False, dur_us=500.0, name="aten::linear"),
            dict(kind="gemm", is_device=False, dur_us=400.0, flops=1e9, dtype="float",
                 parent_id=0, name="aten::addmm"),
            dict(kind="elementwise", is_device=False, dur_us=30.0, name="aten::relu"),
            dict(coll("allreduce_", 1e6, 2), is_device=False)]
    for hw in ("mtia300", "h100"):
        c = model_for(hw).cost(events(rows))
        # every host op keeps its measured time as host cost, whatever its flops
        assert c.host_us[:3].tolist() == [500.0, 400.0, 30.0]
        assert c.compute_us[:3].tolist() == [0.0, 0.0, 0.0]
        assert c.collective_us[3] > 0 and c.resource[3] == 0  # collectives: the target's
        assert "only through launch and collective latencies" in str(c.notes["cpu_only"])


def _random_collectives(n: int = 300, seed: int = 3):
    rng = np.random.default_rng(seed)
    ops = np.array(["all_reduce", "all_to_all", "all_gather", "reduce_scatter", "broadcast"])
    return events([coll(str(rng.choice(ops)), float(rng.uniform(1e4, 1e8)),
                        int(rng.choice([2, 8, 16, 40, 100])), rank=int(rng.integers(0, 4)))
                   for _ in range(n)])


@pytest.mark.parametrize("hw", ["mtia300", "h100"])
@pytest.mark.parametrize("knob, lo, hi", [
    ("network.intra_node_GBps", 200, 2000), ("network.inter_node_GBps", 25, 400),
    ("hbm.bandwidth_GBps", 1000, 9000), ("comm.post_us", 2.0, 0.1),
])
def test_more_bandwidth_never_slower(hw: str, knob: str, lo: float, hi: float) -> None:
    ev = _random_collectives()
    slow = model_for(load_spec(hw, [f"{knob}={lo}"]), loss_rate=1e-4, seed=1).cost(ev).dur_us
    fast = model_for(load_spec(hw, [f"{knob}={hi}"]), loss_rate=1e-4, seed=1).cost(ev).dur_us
    assert (fast <= slow + 1e-9).all()


def test_more_engines_never_slower() -> None:
    ev = _random_collectives()
    prev_dur, prev_cap = None, 0
    for engines in (2, 4, 8, 16, 32):
        m = model_for(load_spec("mtia300", [f"comm.message_engines={engines}"]))
        c = m.cost(ev)
        if prev_dur is not None:
            assert (c.dur_us <= prev_dur + 1e-9).all()
        assert c.resource_capacity.min() >= prev_cap
        prev_dur, prev_cap = c.dur_us, c.resource_capacity.min()
    # fifo link sharing: one collective at a time however many engines (full link bandwidth each)
    assert prev_cap == 1 and m.slots() == 2


def test_split_link_sharing_conserves_link_bandwidth() -> None:
    ev = events([coll("all_to_all", 8e6, 4)])
    base = ["comm.message_engines=32", "comm.engines_per_collective=8"]
    fifo = model_for(load_spec("mtia300", PLAIN + base))
    split = model_for(load_spec("mtia300", PLAIN + base + ["comm.link_sharing=split"]))
    cf, cs = fifo.cost(ev), split.cost(ev)
    assert fifo.pool_capacity() == 1 and split.pool_capacity() == 4
    # 4 at once, each at a quarter of the link: the aggregate stays at the link's bandwidth
    assert cs.collective_us[0] == pytest.approx(4 * cf.collective_us[0])
    assert cs.resource_capacity.tolist() == [4]


@pytest.mark.parametrize("hw", ["mtia300", "h100"])
def test_less_loss_never_slower_and_deterministic(hw: str) -> None:
    ev = _random_collectives()
    r = [model_for(hw, loss_rate=q, seed=7).cost(ev).retry_us for q in (0.0, 1e-6, 1e-4, 1e-2)]
    assert (r[0] == 0).all()
    for a, b in zip(r, r[1:]):
        assert (a <= b + 1e-9).all()
    assert r[3].sum() > 0
    again = model_for(hw, loss_rate=1e-2, seed=7).cost(ev).retry_us
    other = model_for(hw, loss_rate=1e-2, seed=8).cost(ev).retry_us
    assert np.array_equal(again, r[3]) and not np.array_equal(other, r[3])


def test_go_back_n_vs_selective_repeat_expectations() -> None:
    """At the same loss rate the two schemes differ as their expectations say: per mid-stream
    loss go-back-N waits one RTT for the NAK and resends the window in flight, selective repeat
    resends one packet; tail losses cost the same RTO in both. Expectations by hand."""
    n, nbytes, q = 4000, 4e6, 1e-3
    ev = events([coll("all_to_all", nbytes * 40 / 39, 40, rank=i % 8) for i in range(n)])
    bw, mtu, rtt, rto = 1000e3 * 0.94, 4096.0, 10.0, 50.0
    t_pkt = mtu / bw
    packets = np.ceil(nbytes / mtu)
    mid, tail = q * (packets - 39), q * 39
    want = {"go_back_n": mid * (rtt + t_pkt) + tail * (rto + t_pkt),
            "selective_repeat": mid * t_pkt + tail * (rto + t_pkt)}
    for rec, w in want.items():
        spec = load_spec("mtia300", [f"loss.recovery={rec}", f"loss.rto_us={rto}",
                                     f"loss.rtt_us={rtt}", f"loss.mtu_bytes={mtu:g}"])
        c = model_for(spec, loss_rate=q, seed=0).cost(ev)
        assert expected_retry_us(spec, q, nbytes, 39, bw) == pytest.approx(w, rel=1e-12)
        assert c.retry_us.mean() == pytest.approx(w, rel=0.05)   # the draws (no instances)
    assert want["go_back_n"] - want["selective_repeat"] == pytest.approx(mid * rtt)


def test_gpu_rto_fixed_and_adaptive() -> None:
    from replay.hardware.retries import rto_us
    fixed = load_spec("h100", ["loss.rto_model=fixed"])
    assert rto_us(fixed) == pytest.approx(4.096 * 2**20)          # NCCL_IB_TIMEOUT = 20
    assert rto_us(load_spec("h100", ["loss.rto_model=fixed", "loss.ib_timeout=14"])) == \
        pytest.approx(4.096 * 2**14)
    adaptive = load_spec("h100")
    assert adaptive.value("loss.rto_model") == "adaptive"
    assert rto_us(adaptive) == float(adaptive.value("loss.adaptive_rto_us"))
    # the adaptive timer never exceeds the QP's timeout
    assert rto_us(load_spec("h100", ["loss.ib_timeout=5"])) == pytest.approx(4.096 * 2**5)


def test_poisson_quantile_monotone_and_mean() -> None:
    u = np.random.default_rng(0).random(20000)
    for lam in (0.3, 5.0, 200.0):
        k = poisson_quantile(u, np.full(len(u), lam))
        assert k.mean() == pytest.approx(lam, rel=0.05)
    lams = np.linspace(0, 60, 200)
    k = np.array([poisson_quantile(np.array([0.37]), np.array([x]))[0] for x in lams])
    assert (np.diff(k) >= 0).all()


def test_overlap_slowdown_offloaded_vs_on_compute() -> None:
    assert model_for("mtia300").overlap_slowdown() <= 0.005
    gpu = model_for("h100").overlap_slowdown()
    assert 0.12 <= gpu <= 0.25  # published mean 18.9% (max 40%), Aug-2026 "> 20%"
    more_ctas = model_for(load_spec("h100", ["comm.comm_ctas=32"])).overlap_slowdown()
    assert more_ctas > gpu


def test_resource_pools() -> None:
    # MTIA: one message-engine pool per rank, shared by in-rack and cross-rack collectives
    c = model_for("mtia300").cost(events([coll("all_reduce", 1e6, 8, rank=3),
                                          dict(kind="gemm", flops=1e9)]))
    assert c.resource.tolist() == [3, -1]
    assert len(c.resource_capacity) == 4 and (c.resource_capacity == 1).all()
    # GPU: in-node links and NICs are separate pools of each rank (rank r: 2r and 2r + 1)
    c = model_for("h100").cost(events([coll("all_reduce", 1e6, 8, rank=3),
                                       coll("all_to_all", 1e6, 16, rank=3)]))
    assert c.resource.tolist() == [6, 7]
    assert len(c.resource_capacity) == 8
