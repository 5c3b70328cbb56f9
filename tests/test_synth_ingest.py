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
        assert np.ptp((g.ts_us + g.dur_us).to_numpy()) < 1e-3   # ends together


def test_embedding_bytes_from_ingested_table(tw):
    e = tw[(~tw.is_device) & (tw.kind == "embedding") & (tw.step == 1)
           & tw.name.str.contains("lookup")]
    rows = B * float(DCN.pooling @ DCN.dims) * 4
    assert e.bytes_read.sum() + e.bytes_written.sum() == pytest.approx(
        rows + B * DCN.pooling.sum() * 8 + B * len(DCN.tables) * 128 * 4)
