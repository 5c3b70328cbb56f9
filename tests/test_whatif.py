"""Op-level what-ifs (`--whatif`), the causal profile (`whatif`) and the causal diff (`diff`)."""

from __future__ import annotations

import fnmatch
from functools import cache

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES, only_run

from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from replay.counterfactual import candidate_groups, causal_profile, prepare
from replay.diff import diff_traces, match_events
from replay.run import as_trace, replay_events
from replay.whatif import (
    Change,
    WhatIf,
    _match_strings,
    apply_whatifs,
    nested,
    parse_whatif,
    select,
)

CPU = SAMPLES / "torch_cpu_dlrm"      # 2 ranks, gloo, CPU-only
GPU = SAMPLES / "synth" / "dcnv2_train_2rank"


@cache
def _events(path: str) -> pa.Table:
    return load(path).events


@cache
def _prepared(path: str):
    return prepare(_events(path))


def _mean(steps: pa.Table) -> float:
    st = steps.column("step").to_numpy()
    return float(steps.column("total_us").to_numpy()[st >= 0].mean())


# ---- parsing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, op, value", [
    ("kind=gemm:x0.5", "scale", 0.5), ("name=aten::mm:-20%", "scale", 0.8),
    ("rank=0-1,kind=embedding:+10%", "scale", 1.1), ("name=data_wait:=120us", "set", 120.0),
    ("scope=backward:+5ms", "add", 5000.0), ("*:-2ms", "add", -2000.0), ("all:=1s", "set", 1e6),
])
def test_parse_changes(text: str, op: str, value: float) -> None:
    w = parse_whatif(text)
    assert (w.change.op, w.change.value) == (op, pytest.approx(value))


def test_parse_selector_terms() -> None:
    w = parse_whatif("rank=3|5,kind=embedding,scope=*backward*,name=/^aten::(mm|bmm)$/:x0.5")
    assert dict(w.terms) == {"rank": ("3", "5"), "kind": ("embedding",),
                             "scope": ("*backward*",), "name": ("/^aten::(mm|bmm)$/",)}
    assert parse_whatif("aten::mm:x2").terms == (("name", ("aten::mm",)),)


@pytest.mark.parametrize("text", ["kind=gemm", "kind=gemm:fast", "color=red:x2", "rank=a:x2",
                                  "kind=gemm:x-1", "name=/(/:x2", ":x2", "kind=gemm:-200%"])
def test_bad_whatif_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--whatif"):
        parse_whatif(text)


def test_bad_whatif_on_the_cli_is_one_line_exit_2(cli, tmp_path) -> None:
    code, out, err = cli("replay", CPU, "--whatif", "kind=gemm:fast", "--out", tmp_path / "r")
    assert code == 2 and err.count("\n") == 1 and "--whatif" in err
    assert not (tmp_path / "r").exists()
    code, _, err = cli("replay", CPU, "--whatif", "name=no_such_op:x2", "--out", tmp_path / "r")
    assert code == 2 and "selects no event" in err and not (tmp_path / "r").exists()


# ---- selection and the edit ----------------------------------------------------------------------

@pytest.mark.parametrize("glob", ["[[]memory]", "*Backward*", "aten::mm", "a?c", "[!a]b", "x[]]y",
                                  "autograd::engine::evaluate_function: TBackward0", "a|b"])
def test_globs_match_like_fnmatch(glob: str) -> None:
    names = ["[memory]", "MmBackward0", "aten::mm", "aten::mmx", "abc", "ac", "bb", "ab", "x]y",
             "autograd::engine::evaluate_function: TBackward0", "a", "b", "a|b"]
    alts = (glob,) if glob != "a|b" else ("a", "b")
    got = _match_strings(pa.array(names), alts).tolist()
    assert got == [any(fnmatch.fnmatchcase(n, a) for a in alts) for n in names]


def test_selectors_pick_what_they_name() -> None:
    ev = _events(str(CPU))
    g = _prepared(str(CPU)).graph
    kind = ev.column("kind").to_numpy(zero_copy_only=False)
    rank = ev.column("rank").to_numpy()
    m = select(ev, g, parse_whatif("rank=1,kind=gemm:x2"))
    assert m.any() and (kind[m] == "gemm").all() and (rank[m] == 1).all()
    assert m.sum() == ((kind == "gemm") & (rank == 1)).sum()
    inside = select(ev, g, parse_whatif("scope=embedding_lookup:x2"))
    names = ev.column("name").to_numpy(zero_copy_only=False)
    assert inside.any() and not (names[inside] == "embedding_lookup").any()
    assert "aten::embedding_bag" in set(names[inside].tolist())
    star = select(ev, g, parse_whatif("name=*Backward*:x2"))
    assert star.sum() == sum("Backward" in n for n in names.tolist()) > 0


def test_identity_whatif_changes_nothing() -> None:
    ev = _events(str(CPU))
    base = replay_events(ev)
    same = replay_events(ev, whatifs=[parse_whatif("*:x1")])
    np.testing.assert_array_equal(base.steps.column("total_us").to_numpy(),
                                  same.steps.column("total_us").to_numpy())
    assert same.notes["whatif"][0]["events"] == ev.num_rows


@pytest.mark.parametrize("group", ["kind=gemm", "scope=grad_all_reduce", "rank=1", "kind=collective",
                                   "name=aten::embedding_bag"])
def test_faster_never_slower(group: str) -> None:
    """The least schedule is monotone in durations: shrinking a group cannot lengthen the step,
    growing it cannot shorten it."""
    p = _prepared(str(CPU))
    terms = parse_whatif(f"{group}:x1").terms
    steps = [p.predict([WhatIf(group, terms, Change("scale", k))]) for k in (0.0, 0.5, 1.0, 2.0)]
    assert steps[2] == pytest.approx(p.step_mean(), rel=1e-12)
    assert steps[0] <= steps[1] + 1e-6 <= steps[2] + 2e-6 <= steps[3] + 3e-6


def test_added_time_moves_the_step_by_at_most_the_added_time() -> None:
    ev = _events(str(GPU))
    base = _mean(replay_events(ev).steps)
    # one GEMM kernel per rank and step gets 5 ms more
    r = replay_events(ev, whatifs=[parse_whatif("kind=gemm,name=*:+5ms")])
    n_sel = r.notes["whatif"][0]["events"]
    assert n_sel > 0
    grown = _mean(r.steps)
    assert base < grown
    steps = len(set(ev.column("step").to_numpy()[ev.column("step").to_numpy() >= 0].tolist()))
    ranks = len(set(ev.column("rank").to_numpy().tolist()))
    assert grown - base <= 5000.0 * n_sel / (steps * ranks) * ranks + 1e-6


def test_faster_device_shortens_a_device_bound_synth_step() -> None:
    ev = _events(str(GPU))
    base = _mean(replay_events(ev).steps)
    fast = _mean(replay_events(ev, whatifs=[parse_whatif("kind=gemm|embedding|elementwise"
                                                         ":x0.1")]).steps)
    assert fast < base


def test_container_set_scales_its_inside() -> None:
    """``=`` on an op with children sets its whole span: the region's busy time becomes it."""
    p = _prepared(str(CPU))
    ev = p.events
    w = parse_whatif("kind=annotation,name=embedding_lookup:=10us")
    ed = apply_whatifs(ev, p.graph, p.comps, [w])
    sel = select(ev, p.graph, w)
    # replayed spans of the selected annotations are ~10 us (their children scaled with them)
    r = replay_events(ev, whatifs=[w])
    span = (r.events.column("end_us").to_numpy() - r.events.column("start_us").to_numpy())[sel]
    assert np.all(span < 10.0 + 1e-6 + 50.0)  # waits inside (none here) would be kept
    assert ed.notes[0]["busy_after_us"] <= ed.notes[0]["busy_before_us"]


# ---- CLI: replay, compare, sweep -----------------------------------------------------------------

def test_replay_records_whatifs_in_run_json(cli, tmp_path) -> None:
    code, out, err = cli("replay", CPU, "--whatif", "kind=gemm:x0.5", "--whatif",
                         "rank=1,scope=emb_all_to_all_fwd:-20%", "--out", tmp_path / "r", "-q")
    assert code == 0, err
    meta = orjson.loads((only_run(tmp_path / "r") / "run.json").read_bytes())
    assert meta["options"]["whatif"] == ["kind=gemm:x0.5", "rank=1,scope=emb_all_to_all_fwd:-20%"]
    notes = meta["assumptions"]["model"]["whatif"]
    assert [n["whatif"] for n in notes] == meta["options"]["whatif"]
    assert notes[0]["busy_after_us"] == pytest.approx(notes[0]["busy_before_us"] * 0.5, rel=1e-6)


def test_compare_trace_with_a_whatif(cli) -> None:
    code, out, err = cli("compare", CPU, "--whatif", "kind=collective:x0", "--format", "json",
                         "--threshold", "1000%")
    assert code == 0, err
    d = orjson.loads(out)
    text = orjson.dumps(d).decode()
    assert "step" in text


def test_compare_runs_of_different_traces_points_to_diff(cli, tmp_path) -> None:
    assert cli("replay", CPU, "--out", tmp_path / "a", "-q")[0] == 0
    assert cli("replay", GPU, "--out", tmp_path / "b", "-q")[0] == 0
    code, out, err = cli("compare", tmp_path / "a", tmp_path / "b", "--threshold", "1000%")
    assert "mtia-trace diff" in err


def test_sweep_has_a_whatif_axis(cli, tmp_path) -> None:
    out_file = tmp_path / "s.parquet"
    code, out, err = cli("sweep", GPU, "--hw", "h100", "--whatif", "kind=gemm:x0.5",
                         "--whatif", "kind=gemm:x0", "--out", out_file, "-q")
    assert code == 0, err
    t = pq.read_table(out_file)
    assert t.column("whatif").to_pylist() == ["none", "kind=gemm:x0.5", "kind=gemm:x0"]
    s = t.column("step_us").to_numpy()
    assert s[2] <= s[1] + 1e-6 <= s[0] + 2e-6


# ---- the causal profile --------------------------------------------------------------------------

def test_causal_profile_ranks_groups_by_gain(cli) -> None:
    p = _prepared(str(CPU))
    t = causal_profile(p, top=6)
    assert t.num_rows == 6
    gain = t.column("gain_2x_us").to_numpy()
    assert np.all(np.diff(gain) <= 1e-9)
    assert np.all(t.column("gain_zero_us").to_numpy() >= gain - 1e-6)
    assert np.all(t.column("step_us").to_numpy() == pytest.approx(p.step_mean()))
    code, out, err = cli("whatif", CPU, "--top", "3", "--format", "json", "-q")
    assert code == 0, err
    rows = orjson.loads(out)
    assert len(rows) == 3 and {"group", "gain_2x_us", "gain_zero_us"} <= set(rows[0])


def test_profile_row_equals_a_replay_with_its_selector() -> None:
    """Each profile row is what `replay --whatif GROUP:x0.5` predicts."""
    p = _prepared(str(CPU))
    row = causal_profile(p, top=3).to_pylist()[0]
    r = replay_events(p.events, whatifs=[parse_whatif(f"{row['group']}:x0.5")])
    assert _mean(r.steps) == pytest.approx(row["step_2x_us"], rel=1e-9)


# ---- the causal diff -----------------------------------------------------------------------------

def test_diff_of_a_trace_with_itself_predicts_it() -> None:
    ev = _events(str(CPU))
    r = diff_traces(ev, ev)
    assert r.matched_fraction == 1.0
    assert r.predicted_step_us == pytest.approx(r.new_step_us, rel=1e-9)
    assert sum(d for _, d in r.contributions) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("change", ["kind=annotation,name=embedding_lookup:x3",
                                    "rank=1,kind=gemm:x4", "kind=collective:x0.5"])
def test_diff_recovers_a_known_change(change: str) -> None:
    """NEW = BASE replayed with a what-if: the diff predicts NEW's step and its parts add up."""
    base = _events(str(CPU))
    new = as_trace(replay_events(base, whatifs=[parse_whatif(change)]).events)
    r = diff_traces(base, new, group_by="scope")
    assert r.matched_fraction == 1.0
    assert abs(r.error) < 0.01, (r.predicted_step_us, r.new_step_us)
    total = sum(d for _, d in r.contributions)
    assert total == pytest.approx(r.predicted_step_us - r.base_replayed_us, abs=1e-6)


def test_diff_tolerates_inserted_events() -> None:
    base = _events(str(CPU))
    # drop a few host ops from NEW: the rest still matches
    drop = np.zeros(base.num_rows, dtype=bool)
    leaf_ops = np.flatnonzero(pc.equal(base.column("name"), "aten::view").to_numpy(
        zero_copy_only=False))
    drop[leaf_ops[::7]] = True
    keep = np.flatnonzero(~drop)
    new = base.take(pa.array(keep))
    new = new.set_column(new.schema.get_field_index("event_id"), "event_id",
                         pa.array(np.arange(new.num_rows), pa.int64()))
    m = match_events(base, new)
    assert len(m.base) == new.num_rows
    names_b = base.column("name").to_numpy(zero_copy_only=False)[m.base]
    names_n = new.column("name").to_numpy(zero_copy_only=False)[m.new]
    assert (names_b == names_n).all()
    assert sum(m.unmatched_base.values()) == drop.sum()


def test_diff_cli_json_and_different_programs(cli) -> None:
    code, out, err = cli("diff", CPU, CPU, "--format", "json", "-q")
    assert code == 0, err
    d = orjson.loads(out)
    for k in ("base_step_us", "new_step_us", "predicted_step_us", "error", "matched_fraction",
              "contributions"):
        assert k in d
    assert d["error"] == pytest.approx(0.0, abs=1e-9)
    code, out, err = cli("diff", CPU, GPU, "-q")
    assert code == 2 and err.count("\n") == 1 and "different programs" in err


def test_report_lists_the_whatifs(cli, tmp_path) -> None:
    assert cli("replay", CPU, "--whatif", "kind=gemm:x0.5", "--out", tmp_path / "r", "-q")[0] == 0
    code, out, err = cli("report", tmp_path / "r")
    assert code == 0, err
    assert "kind=gemm:x0.5" in out


# ---- what a profile row selects ----------------------------------------------------------------

def test_a_launch_call_selects_its_own_cost_not_its_kernels() -> None:
    """`name=cudaLaunchKernel` is the calls' own time; their kernels are `launched_by=`."""
    p = _prepared(str(GPU))
    ev, g = p.events, p.graph
    is_dev = ev.column("is_device").to_numpy(zero_copy_only=False).astype(bool)
    call = select(ev, g, parse_whatif("name=cudaLaunchKernel:x1"))
    kernels = select(ev, g, parse_whatif("launched_by=cudaLaunchKernel:x1"))
    assert call.any() and not is_dev[call].any()
    assert kernels.any() and is_dev[kernels].all()
    assert not is_dev[nested(ev, g, call)].any()
    # inside a selected op, its launches come with it (aten::mm's GEMM kernel)
    mm = nested(ev, g, select(ev, g, parse_whatif("name=aten::mm:x1")))
    assert is_dev[mm].any()
    # the call's own time is small next to its kernels': halving it gains little
    own = p.predict([parse_whatif("name=cudaLaunchKernel:x0.5")])
    ker = p.predict([parse_whatif("launched_by=cudaLaunchKernel:x0.5")])
    base = p.step_mean()
    assert base - own < 0.1 * (base - ker)


def test_profile_labels_what_each_group_selects() -> None:
    t = causal_profile(_prepared(str(GPU)), top=40).to_pylist()
    by_group = {r["group"]: r for r in t}
    assert by_group["launched_by=cudaLaunchKernel"]["selects"] == \
        "kernels launched by cudaLaunchKernel"
    assert "name=cudaLaunchKernel" not in by_group or \
        by_group["name=cudaLaunchKernel"]["selects"] == "cudaLaunchKernel calls (own time)"
    assert by_group.get("kind=runtime", {"selects": "runtime calls (own time, not their kernels)"}
                        )["selects"] == "runtime calls (own time, not their kernels)"


def test_profile_has_no_whole_rank_rows_on_one_rank() -> None:
    one = SAMPLES / "synth" / "dcnv2_infer_1rank"
    groups = candidate_groups(prepare(_events(str(one))))
    assert not [s for d, s in groups if d == "rank"]
    assert [s for d, s in candidate_groups(_prepared(str(GPU))) if d == "rank"] == \
        ["rank=0", "rank=1"]


def test_profile_skips_profiler_spans_as_scopes() -> None:
    ev = _events(str(GPU))
    names = ev.column("name").to_pylist()
    kind = ev.column("kind").to_pylist()
    i = next(i for i, k in enumerate(kind) if k == "annotation"
             and not names[i].startswith("ProfilerStep"))
    for span in ("__MTIA_CCP_events__ (-1)", "MTIA Activity Trace (-1)"):
        renamed = ev.set_column(ev.schema.get_field_index("name"), "name",
                                pa.array(names[:i] + [span] + names[i + 1:]))
        groups = candidate_groups(prepare(renamed), ("scope",))
        assert not [s for _, s in groups if "MTIA" in s], span


def test_profile_says_when_host_ops_bring_their_kernels() -> None:
    rows = {r["group"]: r["selects"] for r in causal_profile(_prepared(str(GPU)), top=40).to_pylist()}
    assert rows["kind=host_op"] == "every host_op event and the device work they launch"
    assert rows["kind=gemm"] == "every gemm event"


# ---- many predictions in one pass ----------------------------------------------------------------

def _one_at_a_time(p, t: pa.Table) -> tuple[list[float], list[float]]:
    """The profile's predictions made one what-if at a time (`Prepared.predict`)."""
    fast, zero = [], []
    for sel in t.column("group").to_pylist():
        terms = parse_whatif(f"{sel}:x1").terms
        fast.append(p.predict([WhatIf(sel, terms, Change("scale", 0.5))]))
        zero.append(p.predict([WhatIf(sel, terms, Change("scale", 0.0))]))
    return fast, zero


def _synth4(tmp_path_factory) -> pa.Table:
    from mtia_trace.synth import SynthOptions, synthesize

    d = tmp_path_factory.mktemp("synth4") / "t"
    synthesize(SynthOptions(preset="dlrm-dcnv2", ranks=4, steps=2, seed=5), d)
    return load(d).events


@pytest.mark.parametrize("trace", ["cpu", "gpu", "synth4", "synth4-pools", "synth4-mtia300"])
def test_profile_in_one_pass_equals_one_prediction_at_a_time(trace, tmp_path_factory) -> None:
    """The profile schedules all its predictions together (a column each); every one is, bit
    for bit, the prediction made by itself: CPU ranks over gloo, GPU ranks with collectives, a
    target whose collectives hold resource pools (queueing itself is checked where it happens
    often, in test_scheduler's many-scenario test), and that target whole (its compute
    stretched where it overlaps communication, scheduled again)."""
    if trace in ("cpu", "gpu"):
        p = prepare(_events(str(CPU if trace == "cpu" else GPU)))
    else:
        from mtia_trace.replay_job import ReplayOptions, cost_model

        model = None
        if trace != "synth4":
            model, _, _ = cost_model("mtia300", ReplayOptions(hws=["mtia300"]))
        p = prepare(_synth4(tmp_path_factory), model)  # type: ignore[arg-type]
        if trace == "synth4-mtia300":
            assert p.costs.interference is not None
        if trace == "synth4-pools":
            assert (np.asarray(p.costs.resource) >= 0).any()
            # no stretch of overlapped compute: the predictions take the one-pass path
            p.slow, p.costs.interference = 0.0, None
    t = causal_profile(p, top=8)
    assert t.num_rows >= 4
    fast, zero = _one_at_a_time(p, t)
    assert t.column("step_2x_us").to_pylist() == fast
    assert t.column("step_zero_us").to_pylist() == zero


def test_diff_predictions_in_one_pass_equal_one_at_a_time() -> None:
    """The diff's transplants (costs, self times, waits' returns, launch lags) scheduled
    together are each what one schedule by itself predicts."""
    from replay.diff import apply_transplant, transplant

    base = _events(str(CPU))
    new = as_trace(replay_events(base, whatifs=[parse_whatif("kind=collective:x0.5"),
                                                parse_whatif("rank=1,kind=gemm:x4")]).events)
    pb, pn = prepare(base), prepare(new)
    tp = transplant(pb, pn, match_events(base, new))
    pb.step_mean()  # records the rounds
    rng = np.random.default_rng(1)
    masks = [rng.random(pb.graph.n) < q for q in (0.1, 0.5, 0.9, 1.0)]
    edits = [apply_transplant(pb, tp, m) for m in masks]
    want = [pb.step_mean(g, c) for g, c in edits]  # type: ignore[arg-type]
    assert pb.step_means(iter(edits), len(edits)) == want  # type: ignore[arg-type]
    assert len(set(want)) > 1
