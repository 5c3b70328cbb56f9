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
    assert (fwd.coll_bytes_out == B // R * d_sum * 4).all()
    assert fwd.coll_bytes_in.sum() == B * d_sum * 4


def test_dense_gradient_allreduce_bytes(tw):
    ar = tw[tw.is_device & (tw.coll_op == "all_reduce") & (tw.step == 1)]
    per_rank = ar.groupby("rank").coll_bytes_in.sum()
    assert (per_rank == DCN.dense_params * 4).all()


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
        rows + B * DCN.pooling.sum() * 8 + B * len(DCN.tables) * 128 * 4)
