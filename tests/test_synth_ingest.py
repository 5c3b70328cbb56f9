"""Synthetic traces through the real ingest path: sizes from the canonical table match the formulas."""

from __future__ import annotations

import numpy as np
import pytest

from mtia_trace.ingest import load
from mtia_trace.synth import PRESETS, SynthOptions, synthesize

DCN = PRESETS["dlrm-dcnv2"]
R, B = 4, 1024


@pytest.fixture(scope="module")
def tw(tmp_path_factory):
    d = tmp_path_factory.mktemp("tw") / "t"
    synthesize(SynthOptions(ranks=R, batch=B, steps=2, sharding="tw", seed=2), d)
    return load(d).events.to_pandas()


def test_tw_pooled_all_to_all_bytes_per_rank(tw):
    a2a = tw[tw.is_device & (tw.coll_op == "all_to_all") & (tw.step == 1)]
    d_sum = int(DCN.dims.sum())
    # per rank and step: KJT lengths, KJT ids, pooled embeddings (fwd), pooled gradients (bwd)
    fwd = a2a.sort_values("ts_us").groupby("rank").nth(2)
    assert len(fwd) == R
    assert (fwd.coll_bytes_out == B // R * d_sum * DCN.elem_bytes).all()
    assert fwd.coll_bytes_in.sum() == B * d_sum * DCN.elem_bytes


def test_dense_gradient_allreduce_bytes(tw):
    ar = tw[tw.is_device & (tw.coll_op == "all_reduce") & (tw.step == 1)]
    per_rank = ar.groupby("rank").coll_bytes_in.sum()
    assert (per_rank == DCN.dense_params * DCN.elem_bytes).all()


def test_dense_flops_match_mlp_sizes(tw):
    k = tw[tw.is_device & (tw.kind == "gemm") & (tw.step == 1) & (tw["rank"] == 0)]
    b = B // R
    fwd = 2 * b * sum(i * o for _, i, o in DCN.dense_layers())
    first = 2 * b * DCN.dense_features * DCN.bottom_mlp[0]   # no input gradient for the data
    assert k.flops.sum() == pytest.approx(3 * fwd - first)


def test_every_rank_matches_its_peers(tw):
    c = tw[tw.is_device & tw.coll_op.notna()]
    for (pg, seq), g in c.groupby(["pg", "coll_seq"]):
        assert sorted(g["rank"]) == list(range(R)), (pg, seq)
        assert g.coll_op.nunique() == 1 and g.group_size.nunique() == 1
        assert g.coll_bytes_in.sum() == g.coll_bytes_out.sum()
        if g.coll_op.iloc[0] == "all_reduce":
            assert g.coll_bytes_in.nunique() == 1
        # the transfer starts when the last rank arrives
        assert (g.ts_us + g.dur_us).min() > g.ts_us.max()


def test_transfer_is_the_replay_models_cost(tw):
    """One world stream per rank (tw), so no collective waits for the link pool: each rank's
    transfer (end - last arrival) is the replay model's cost of its event (transfer + NIC post)
    on the source hardware, times the device jitter."""
    import pyarrow as pa

    from replay.hardware import collectives as coll_mod
    from replay.hardware import load_spec

    c = tw[tw.is_device & tw.coll_op.notna()].copy()
    last = c.groupby(["pg", "coll_seq"]).ts_us.transform("max")
    xfer = (c.ts_us + c.dur_us - last).to_numpy()
    spec = load_spec("h100")
    rank = c["rank"].to_numpy()
    _, L, N = coll_mod.placement(pa.array(c.pg_ranks.tolist(), pa.string()), rank,
                                 int(spec.value("network.ranks_per_node")))
    cost = coll_mod.collective_costs(
        spec, coll_mod.op_codes(pa.chunked_array([pa.array(c.coll_op.tolist(), pa.string())])),
        c.coll_bytes_in.to_numpy(float), c.coll_bytes_out.to_numpy(float),
        c.group_size.to_numpy(), local=L, nodes=N)
    ratio = xfer / (cost.collective_us + cost.post_us)
    assert len(ratio) > 10 and np.all(np.abs(np.log(ratio)) < 6 * 0.03), ratio


def test_embedding_bytes_from_ingested_table(tw):
    e = tw[(~tw.is_device) & (tw.kind == "embedding") & (tw.step == 1)
           & tw.name.str.contains("lookup")]
    rows = B * float(DCN.pooling @ DCN.dims) * 4
    assert e.bytes_read.sum() + e.bytes_written.sum() == pytest.approx(
        rows + B * DCN.pooling.sum() * 8 + B * len(DCN.tables) * 128 * DCN.elem_bytes)


# -- interference of on-compute communication (the replay's overlap slowdown) --------------------
@pytest.fixture(scope="module")
def h100_2rank(tmp_path_factory):
    d = tmp_path_factory.mktemp("ov") / "t"
    synthesize(SynthOptions(ranks=2, batch=2048, steps=2, seed=0, source_hw="h100"), d)
    return load(d).events


def _overlap(events):
    from mtia_trace.schema import COMPUTE_KINDS
    from replay.intervals import overlap_fraction

    df = events.to_pandas()
    ts = df.ts_us.to_numpy()
    f = overlap_fraction(events, ts, ts + df.dur_us.to_numpy())
    compute = (df.is_device & df.kind.isin(COMPUTE_KINDS)).to_numpy()
    return df, f, compute


def test_compute_overlapping_nccl_is_slowed_by_the_interference_model(h100_2rank):
    """h100 runs NCCL on its SMs: a compute kernel alone takes its roofline time (from the
    ingested flops and bytes) up to the 3 % jitter; one overlapping an NCCL kernel of its rank
    is longer, by the replay's per-kernel interference model."""
    from mtia_trace.synth.costing import SourceHardware

    df, f, compute = _overlap(h100_2rank)
    hw = SourceHardware.load("h100")
    roof = np.full(len(df), np.nan)
    for kind in df.kind[compute].unique():
        m = compute & (df.kind == kind).to_numpy()
        roof[m] = hw.kernel_us(kind, df.flops[m], df.bytes_read[m] + df.bytes_written[m],
                               DCN.dtype != "float")
    log_ratio = np.log(df.dur_us.to_numpy() / roof)
    ov, alone = compute & (f > 0), compute & (f == 0)
    assert ov.sum() >= 20 and alone.sum() >= 100 and (f[ov] > 0.5).mean() > 0.5
    assert abs(log_ratio[alone].mean()) < 0.01
    assert log_ratio[ov].mean() > 0.05 and log_ratio[ov].min() > -0.15


def test_stretch_is_one_correction_pass_on_the_same_jitter(h100_2rank, tmp_path, monkeypatch):
    """Without the stretch the same seed gives the same jitter; each compute kernel is then
    longer by exactly the replay's interference factor on that unstretched schedule (one pass,
    as the replay applies a target's interference), up to the nanosecond rounding."""
    from mtia_trace.synth import generate
    from replay.graph import build_graph
    from replay.hardware import load_spec
    from replay.hardware.compute import kind_codes, kind_mask
    from replay.hardware.model import HardwareModel
    from replay.pipeline import costing_input

    monkeypatch.setattr(generate, "overlap_stretch", lambda tl: None)
    synthesize(SynthOptions(ranks=2, batch=2048, steps=2, seed=0, source_hw="h100"), tmp_path / "t")
    ev = load(tmp_path / "t").events
    spec = load_spec("h100")
    c = HardwareModel(spec, mode="scaled", source=spec).cost(ev)  # no measured schedule: no removal
    ci = costing_input(ev, build_graph(ev))
    ts, dur = ev.column("ts_us").to_numpy(), ev.column("dur_us").to_numpy()
    comm = kind_mask(kind_codes(ev.column("kind")), "collective")
    start = np.where(comm, ts + dur - ci.column("dur_us").to_numpy(), ts)
    c1, f1 = c.interference.apply(c.compute_us, c.fetch_us, ts, start, ts + dur)
    before = c.compute_us + c.fetch_us
    factor = np.divide(c1 + f1, before, out=np.ones_like(before), where=before > 0)
    base, f, compute = _overlap(ev)
    base = base[compute].assign(factor=factor[compute], f=f[compute])
    df, _, compute = _overlap(h100_2rank)
    m = df[compute].merge(base, on=["rank", "correlation"], suffixes=("", "_base"))
    assert len(m) == compute.sum() == len(base) and (m.factor > 1).sum() >= 20
    np.testing.assert_allclose(m.dur_us, m.dur_us_base * m.factor, rtol=0, atol=1.5e-3)
    assert (m.dur_us[m.f == 0] == m.dur_us_base[m.f == 0]).all()


@pytest.mark.parametrize("preset", ["dlrm-kaggle", "dlrm-dcnv2"])
def test_every_kernel_costs_what_its_recorded_shapes_cost_in_the_replay(tmp_path, preset):
    """One rank (no communication, no interference): each kernel above the generator's floor
    lasts what the replay's roofline on the same spec gives for the flops and bytes the trace
    records, up to the 3 % jitter. A kernel priced on other operands than it records (the dot
    interaction's backward bmm once cost two bmms under one bmm's shapes: 0.49x) fails."""
    from mtia_trace.synth.costing import MIN_KERNEL_US
    from replay.hardware import load_spec, model_for
    from replay.run import replay_events

    d = tmp_path / "t"
    synthesize(SynthOptions(preset=preset, ranks=1, batch=16384, steps=1), d)
    events = load(d).events
    out = replay_events(events, model_for(load_spec("h100"), mode="roofline")).events.to_pandas()
    k = out[out.is_device & (out.dur_us > 3 * MIN_KERNEL_US)]
    assert len(k) >= 20 and set(k.kind) >= {"gemm", "embedding", "elementwise"}
    ratio = (k.end_us - k.start_us) / k.dur_us
    assert ratio.between(0.86, 1.16).all(), k.loc[~ratio.between(0.86, 1.16), ["name", "dur_us"]]
