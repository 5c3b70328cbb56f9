"""`mtia-trace synth`: structure, determinism, sizes per sharding, errors."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from mtia_trace.errors import RunExistsError, UsageError
from mtia_trace.synth import PRESETS, SynthOptions, synthesize
from mtia_trace.synth.model import DTYPES
from tests.synth_helpers import events, in_step, read_dir, steps

DCN = PRESETS["dlrm-dcnv2"]


def gen(tmp_path: Path, name: str = "t", **kw) -> dict[int, dict]:
    opts = dict(preset="dlrm-dcnv2", ranks=4, batch=1024, steps=2, seed=1)
    opts.update(kw)
    synthesize(SynthOptions(**opts), tmp_path / name)
    return read_dir(tmp_path / name)


def colls(doc: dict, step: int = 0) -> list[dict]:
    st = steps(doc)[step]
    return [e for e in events(doc, "cpu_op", "record_param_comms") if in_step(e, st)]


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = synthesize(SynthOptions(ranks=2, batch=512, seed=3), tmp_path / "a")
    b = synthesize(SynthOptions(ranks=2, batch=512, seed=3), tmp_path / "b")
    c = synthesize(SynthOptions(ranks=2, batch=512, seed=4), tmp_path / "c")
    for fa, fb, fc in zip(a.files, b.files, c.files, strict=True):
        assert fa.read_bytes() == fb.read_bytes()
        assert fa.read_bytes() != fc.read_bytes()


def test_kineto_shape_and_causality(tmp_path):
    docs = gen(tmp_path)
    doc = docs[0]
    assert doc["distributedInfo"]["world_size"] == 4 and doc["deviceProperties"]
    ev = doc["traceEvents"]
    runtime = {e["args"]["correlation"]: e for e in events(doc, "cuda_runtime")}
    flows_s = {e["id"] for e in ev if e.get("ph") == "s"}
    flows_f = {e["id"] for e in ev if e.get("ph") == "f"}
    dev = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "cuda_sync")]
    assert flows_s == flows_f == {e["args"]["correlation"] for e in dev}
    for e in dev:  # every device event starts after its launch call returned
        call = runtime[e["args"]["correlation"]]
        assert e["ts"] >= call["ts"] + call["dur"] - 1e-6
    by_stream = defaultdict(list)
    for e in dev:
        by_stream[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    assert len(by_stream) == 2  # compute and NCCL stream
    for iv in by_stream.values():
        iv.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(iv, iv[1:]))
    # the step ends after the device is idle (cudaDeviceSynchronize)
    for st in steps(doc):
        last = max(e["ts"] + e["dur"] for e in dev if in_step(e, st))
        assert last <= st[1]
    cpu = {e["name"] for e in events(doc, "cpu_op")}
    assert {"aten::addmm", "record_param_comms", "c10d::alltoall_base_", "c10d::allreduce_",
            "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"} <= cpu


def test_collectives_match_across_peers(tmp_path):
    docs = gen(tmp_path, sharding="twrw", ranks=16, batch=2048, steps=1)
    per_rank = {r: colls(d) for r, d in docs.items()}
    keys = {r: [(e["args"]["Process Group Name"], e["args"]["Seq"], e["args"]["Collective name"])
                for e in c] for r, c in per_rank.items()}
    by_pg: dict[tuple, list] = defaultdict(list)
    for r, cs in per_rank.items():
        for e in cs:
            a = e["args"]
            by_pg[(a["Process Group Name"], a["Seq"])].append((r, a))
    assert {a["Collective name"] for r in per_rank for a in (e["args"] for e in per_rank[r])} == \
        {"all_to_allv", "_reduce_scatter_base", "_allgather_base", "allreduce"}
    for (pg, seq), items in by_pg.items():
        size = items[0][1]["Group size"]
        assert len(items) == size, (pg, seq)
        assert len({a["Collective name"] for _, a in items}) == 1
        assert len({a["Process Group Ranks"] for _, a in items}) == 1
        assert sum(a["In msg nelems"] for _, a in items) == sum(a["Out msg nelems"] for _, a in items) \
            or items[0][1]["Collective name"] != "all_to_allv"
        if items[0][1]["Collective name"] == "allreduce":
            assert len({a["In msg nelems"] for _, a in items}) == 1
    # a collective's transfer starts once the last member has arrived: every member's kernel
    # ends after the last member's kernel started (each after its own cost)
    spans = defaultdict(list)
    for r, d in docs.items():
        for k in events(d, "kernel"):
            if "Seq" in k["args"]:
                spans[(k["args"]["Process Group Name"], k["args"]["Seq"])].append(
                    (k["ts"], k["ts"] + k["dur"]))
    assert spans and all(min(e for _, e in v) > max(s for s, _ in v) for v in spans.values())
    assert len(keys[0]) == len(keys[15])


def _pooled(doc: dict, coll: str) -> list[dict]:
    return [e["args"] for e in colls(doc) if e["args"]["Collective name"] == coll
            and e["args"]["dtype"] == DTYPES[DCN.dtype][1]]


def test_tw_pooled_all_to_all_bytes(tmp_path):
    R, B = 4, 1024
    docs = gen(tmp_path, sharding="tw", ranks=R, batch=B)
    d_sum = int(DCN.dims.sum())
    off_rank = 0
    for r, doc in docs.items():
        fwd, bwd = _pooled(doc, "all_to_allv")
        assert fwd["Out msg nelems"] == B // R * d_sum                  # what this rank receives
        assert bwd["In msg nelems"] == fwd["Out msg nelems"]            # adjoint
        splits = json.loads(fwd["In split size"])
        off_rank += (fwd["In msg nelems"] - splits[r]) * DCN.elem_bytes
    assert off_rank == pytest.approx(B * d_sum * DCN.elem_bytes * (R - 1) / R)


def test_rw_reduce_scatter_and_all_gather(tmp_path):
    R, B = 4, 1024
    docs = gen(tmp_path, sharding="rw", ranks=R, batch=B, zipf=1.05)
    d_sum = int(DCN.dims.sum())
    for doc in docs.values():
        (rs,) = _pooled(doc, "_reduce_scatter_base")
        (ag,) = _pooled(doc, "_allgather_base")
        assert (rs["In msg nelems"], rs["Out msg nelems"]) == (B * d_sum, B // R * d_sum)
        assert (ag["In msg nelems"], ag["Out msg nelems"]) == (B // R * d_sum, B * d_sum)
    # Zipf skew sends more ids to the first row block
    ids = [next(a for a in (e["args"] for e in colls(d)) if a["dtype"] == "Long")["Out msg nelems"]
           for _, d in sorted(docs.items())]
    assert ids[0] > ids[-1]


def test_twrw_intra_reduce_scatter_then_cross_all_to_all(tmp_path):
    R, B, L = 16, 2048, 8
    docs = gen(tmp_path, sharding="twrw", ranks=R, batch=B, steps=1)
    d_sum = int(DCN.dims.sum())
    got = 0
    for r, doc in docs.items():
        rs = [a for a in _pooled(doc, "_reduce_scatter_base")]
        a2a = _pooled(doc, "all_to_allv")
        assert len(rs) == 1 and rs[0]["Group size"] == L
        assert rs[0]["In msg nelems"] == L * rs[0]["Out msg nelems"]
        assert a2a[0]["Group size"] == R // L and a2a[0]["Out msg nelems"] == B // R * d_sum
        got += rs[0]["In msg nelems"]
    assert got == B * d_sum * L   # every host reduces the whole batch for its tables


def test_dp_embedding_gradient_allreduce_and_dense_buckets(tmp_path):
    docs = gen(tmp_path, sharding="dp", ranks=2, batch=256, steps=1)
    ar = [a for a in (e["args"] for e in colls(docs[0])) if a["Collective name"] == "allreduce"]
    assert sum(a["In msg nelems"] for a in ar) == DCN.dense_params + DCN.embedding_params
    docs = gen(tmp_path, "tw", sharding="tw", ranks=2, batch=256, steps=1, framework="torchrec")
    ar = [a for a in (e["args"] for e in colls(docs[0])) if a["Collective name"] == "allreduce"]
    assert sum(a["In msg nelems"] for a in ar) == DCN.dense_params == 16_044_545
    assert len(ar) > 1  # bucketed


def _kernels(doc: dict, step: int) -> list[dict]:
    st = steps(doc)[step]
    return sorted((e for e in events(doc, "kernel") if in_step(e, st)), key=lambda e: e["ts"])


def _ops(doc: dict) -> list[str]:
    return [e["name"] for e in events(doc, "cpu_op")]


def test_hugectr_dense_gradients_all_reduced_once_after_the_backward(tmp_path):
    # HugeCTR exchanges every dense gradient in one all-reduce after the bottom MLP's backward
    # (grouped_all_reduce); DDP all-reduces buckets as the backward fills them
    assert DCN.framework == "hugectr"
    doc = gen(tmp_path, sharding="tw", ranks=2, batch=256, steps=1)[0]
    ar = [e for e in _kernels(doc, 0) if "AllReduce" in e["name"]]
    assert len(ar) == 1
    ops = [a for a in (e["args"] for e in colls(doc)) if a["Collective name"] == "allreduce"]
    assert [a["In msg nelems"] for a in ops] == [DCN.dense_params]
    gemms = [e for e in _kernels(doc, 0) if "xmma_gemm" in e["name"]]
    assert ar[0]["ts"] >= gemms[-1]["ts"] + gemms[-1]["dur"]  # after the last dense GEMM


def test_hugectr_input_is_distributed_a_step_ahead(tmp_path):
    # HugeCTR's inter-iteration overlap: a step's lookup does not wait for the input
    # all-to-all issued in that step (it serves the next one); DDP waits for its own
    for framework, ahead in (("hugectr", True), ("torchrec", False)):
        doc = gen(tmp_path, framework, ranks=4, batch=1024, steps=2, framework=framework)[0]
        k = _kernels(doc, 1)
        tbe = next(e for e in k if "split_embedding_codegen_forward" in e["name"])
        a2a = [e for e in k if "SendRecv" in e["name"] and e["ts"] < tbe["ts"] + tbe["dur"]]
        first_a2a_end = min(e["ts"] + e["dur"] for e in a2a)
        assert (tbe["ts"] < first_a2a_end) is ahead, framework


def test_hugectr_dense_layers_fuse_bias_relu_and_cross_elementwise(tmp_path):
    # ReLU and bias gradients in the GEMM epilogues, one element-wise kernel per cross layer
    # forward (x0 .* h + x) and one per cross layer backward (fused_mul_fma3)
    hc = _ops(gen(tmp_path, "hc", ranks=1, batch=512, steps=1)[0])
    tr = _ops(gen(tmp_path, "tr", ranks=1, batch=512, steps=1, framework="torchrec")[0])
    for name in ("aten::relu", "aten::threshold_backward", "aten::sum"):
        assert name not in hc and name in tr
    assert hc.count("aten::addcmul") == 2 * DCN.dcn_layers
    assert tr.count("aten::mul") == 2 * DCN.dcn_layers and "aten::addcmul" not in tr


def test_framework_option_checked(tmp_path):
    with pytest.raises(UsageError, match="--framework 'jax' is unknown; allowed: torchrec, hugectr"):
        gen(tmp_path, framework="jax")


def test_embedding_bytes_and_dense_flops(tmp_path):
    R, B = 2, 512
    docs = gen(tmp_path, ranks=R, batch=B, steps=1)
    tbe = [e["args"] for d in docs.values() for e in events(
        d, "cpu_op", "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function")]
    gathered = sum(a["flops"] for a in tbe)   # ids x dim over all ranks
    L, D, T = DCN.pooling, DCN.dims, len(DCN.tables)
    assert gathered == pytest.approx(B * float(L @ D))
    # rows at the tables' type (FP32), ids as int64, pooled output at the compute type (FP16)
    assert sum(a["bytes"] for a in tbe) == pytest.approx(
        B * float(L @ D) * 4 + B * L.sum() * 8 + B * T * 128 * DCN.elem_bytes)
    doc = docs[0]
    fwd = next(e for e in events(doc, "user_annotation", "## forward ##"))
    gemm = [e for e in events(doc, "cpu_op") if e["name"] in ("aten::addmm", "aten::mm")
            and fwd["ts"] <= e["ts"] <= fwd["ts"] + fwd["dur"]]
    expect = 2 * (B // R) * sum(i * o for _, i, o in DCN.dense_layers())
    assert sum(e["args"]["flops"] for e in gemm) == expect
    assert expect / (B // R) == pytest.approx(32.1e6, rel=0.01)  # HARDWARE.md 1i


def test_inference_is_forward_only(tmp_path):
    docs = gen(tmp_path, ranks=2, batch=256, mode="infer", steps=1)
    names = {e["name"] for e in events(docs[0])}
    assert "## backward ##" not in names and "aten::_fused_adagrad_" not in names
    assert {a["Collective name"] for a in (e["args"] for e in colls(docs[0]))} == {"all_to_allv"}


def test_rec150b_holds_150b_params():
    m = PRESETS["rec-150b"]
    assert m.embedding_params == pytest.approx(150e9, rel=1e-6)
    assert len(m.tables) == 4 * 26 and m.ranks == 40 and m.batch == 6912 * 40


@pytest.mark.parametrize("opts,needle", [
    (dict(preset="nope"), "allowed: dlrm-kaggle"),
    (dict(ranks=0), "--ranks 0"),
    (dict(batch=-5), "--batch -5"),
    (dict(ranks=5), "not divisible"),
    (dict(ranks=32, batch=1024, sharding="tw"), "exceeds the 26 tables"),
    (dict(ranks=2048, batch=2048), "cannot be cut into 256 column shards"),
    (dict(ranks=12, batch=1200, sharding="twrw"), "not a multiple"),
    (dict(sharding="xx"), "allowed: auto, tw, rw, cw, twrw, dp"),
    (dict(mode="eval"), "allowed: train, infer"),
])
def test_bad_input_one_line_no_output(tmp_path, opts, needle):
    with pytest.raises(UsageError) as err:
        synthesize(SynthOptions(**opts), tmp_path / "out")
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(tmp_path):
    synthesize(SynthOptions(ranks=1, batch=64, steps=1), tmp_path / "o")
    with pytest.raises(RunExistsError):
        synthesize(SynthOptions(ranks=1, batch=64, steps=1), tmp_path / "o")
    synthesize(SynthOptions(ranks=1, batch=64, steps=1), tmp_path / "o", force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


def test_model_file_toml_and_missing_fields(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('batch = 256\nbottom_mlp = [64, 32]\ntop_mlp = [64, 1]\nranks = 2\n'
                 '[[tables]]\nrows = 1000\ndim = 32\npooling = 3\ncount = 4\n')
    synthesize(SynthOptions(model_file=str(f), steps=1), tmp_path / "o")
    docs = read_dir(tmp_path / "o")
    assert len(docs) == 2
    g = tmp_path / "bad.json"
    g.write_text(json.dumps({"batch": 8, "tables": [{"rows": 10, "dim": 4}]}))
    with pytest.raises(UsageError, match="missing field.*bottom_mlp, top_mlp"):
        synthesize(SynthOptions(model_file=str(g)), tmp_path / "x")
    g.write_text(json.dumps({"batch": 8, "bottom_mlp": [4], "top_mlp": [1],
                             "tables": [{"rows": 10, "dim": 4}]}))
    with pytest.raises(UsageError, match=r"tables\[0\] is missing pooling"):
        synthesize(SynthOptions(model_file=str(g)), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_cli_error_exit_code(tmp_path, capsys):
    from mtia_trace.cli import main

    assert main(["synth", "--preset", "nope", "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("mtia-trace: error: --preset 'nope' is unknown")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("zipf", [float("nan"), float("inf"), -0.5])
def test_zipf_must_be_finite_and_non_negative(tmp_path, zipf):
    with pytest.raises(UsageError, match="--zipf"):
        gen(tmp_path, zipf=zipf)
    assert not (tmp_path / "t").exists()


def test_auto_plan_balances_what_table_wise_leaves_uneven() -> None:
    """DCNv2's 100-lookup table on one of 8 ranks leaves that rank 3.7x the mean embedding work;
    the ``auto`` planner splits the heaviest tables column-wise and balances the shards: every
    column of every table placed once, no two shards of a table on one rank, the most-loaded
    rank within 10% of the mean."""
    from mtia_trace.synth import PRESETS
    from mtia_trace.synth.sharding import balanced_shards, plan

    m = PRESETS["dlrm-dcnv2"]
    tw = plan(m, 8, "tw", 55296, 8).tbe_gather
    auto = plan(m, 8, "auto", 55296, 8).tbe_gather
    assert tw.max() / tw.mean() > 3.0
    assert auto.max() / auto.mean() < 1.10
    assert auto.sum() == tw.sum()          # the same work, placed differently
    count, owner = balanced_shards(m.pooling, m.dims, 8, 12.0, 24.0)
    assert ((m.dims % count) == 0).all() and count.max() > 1
    table = np.repeat(np.arange(len(count)), count)
    pairs = set(zip(table.tolist(), owner.tolist(), strict=True))
    assert len(pairs) == len(table)        # a table's shards on distinct ranks
    # beyond one node the plan is per host, each host's shards split by rows over its ranks
    twrw = plan(m, 64, "twrw", 135168, 8).tbe_gather
    hier = plan(m, 64, "auto", 135168, 8)
    assert twrw.max() / twrw.mean() > 3.0
    assert hier.tbe_gather.max() / hier.tbe_gather.mean() < 1.10
    assert hier.tbe_gather.sum() == twrw.sum()
    assert [c.groups.kind for c in hier.fwd_output] == ["intra", "cross"]
