"""The embedding working set behind the cache-hit estimate is each device's own shard, read
from the trace's embedding shapes (ingest records it per rank), not one global table size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mtia_trace import schema
from mtia_trace.ingest import load
from mtia_trace.synth import PRESETS, SynthOptions, synthesize
from mtia_trace.synth.sharding import plan
from replay.hardware import load_spec, model_for
from replay.hardware.compute import zipf_hit_ratio
from replay.hardware.model import table_shard

DCN = PRESETS["dlrm-dcnv2"]
R, B = 8, 1024


@pytest.fixture(scope="module")
def tw(tmp_path_factory):
    d = tmp_path_factory.mktemp("ws") / "t"
    synthesize(SynthOptions(ranks=R, batch=B, steps=1, sharding="tw", seed=3), d)
    return load(d).events


def test_ingest_records_each_ranks_table_shard(tw) -> None:
    shards = {int(k): v for k, v in json.loads(tw.schema.metadata[schema.TABLE_BYTES_KEY]).items()}
    p = plan(DCN, R, "tw", B, 8)
    assert sorted(shards) == list(range(R))
    assert [shards[r] for r in range(R)] == pytest.approx((p.tbe_weights * 4).tolist())
    assert sum(shards.values()) == pytest.approx(DCN.table_bytes)  # tw: every table once


def test_hit_ratio_follows_the_shard(tw) -> None:
    spec = load_spec("h100", ["cache.zipf_alpha=1.05"])  # L2 faster than HBM gathers
    shard = table_shard(tw)
    rank = tw.column("rank").to_numpy()
    per_rank = {r: float(shard[rank == r][0]) for r in range(R)}
    small, big = min(per_rank, key=per_rank.get), max(per_rank, key=per_rank.get)
    cache = float(spec.value("cache.capacity_MB")) * 2**20
    assert per_rank[small] < cache < per_rank[big]
    assert zipf_hit_ratio(spec, per_rank[small]) == 1.0       # the whole shard is cached
    assert 0 < zipf_hit_ratio(spec, per_rank[big]) < 1.0
    # the rank with the small shard gathers faster than it would with the spec's working set
    c = model_for(spec, mode="roofline").cost(tw)
    no_meta = tw.replace_schema_metadata({k: v for k, v in tw.schema.metadata.items()
                                          if k != schema.TABLE_BYTES_KEY})
    c0 = model_for(spec, mode="roofline").cost(no_meta)
    assert c0.notes["embedding_working_set"]["from"].startswith("spec")
    emb = (tw.column("kind").to_numpy(zero_copy_only=False) == "embedding") & \
        tw.column("is_device").to_numpy(zero_copy_only=False) & (rank == small)
    assert emb.any()
    assert (c.fetch_us[emb] + c.compute_us[emb] < c0.fetch_us[emb] + c0.compute_us[emb]).all()
    assert np.isnan(table_shard(no_meta)).all()
