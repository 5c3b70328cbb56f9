"""Bounded fuzz suite: hypothesis over trace mutations, spec values and SQL write attempts, plus
one seeded draw of every hostile-input family (tests/fuzzcases.py; the larger campaign is
benchmarks/fuzz_campaign.py). Every invocation must end cleanly: exit 0, or exit 2 with one
error; never a traceback, a hang, a write through `query` or a silently accepted bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from fuzzcases import (
    FAMILIES,
    FORK_ONLY,
    HOSTILE,
    SPEC_VALUES,
    SQL_WRITES,
    Case,
    Workspace,
    classify,
    mutate,
    trace_doc,
    tree,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtia_trace.cli.output import Format, for_file
from replay.hardware import load_spec

FAST = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("fuzz") / "ws").build()


def outcome(case: Case, cli) -> tuple[str, str]:
    code, out, err = cli(*case.argv)
    problem = case.check() if case.check is not None else None
    return classify(case, code, out, err, crashed=False, timed_out=False, problem=problem)


CLEAN = ("clean exit 2", "clean exit 0")


@FAST
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3))
def test_trace_mutations_never_crash(ws: Workspace, cli, seed: int, n: int) -> None:
    doc, what = mutate(trace_doc(steps=2), random.Random(seed), n)
    d = ws.fresh("hyp")
    path = d / "t.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli("inspect", path)
    got, detail = classify(Case("ingest", [], "clean", what), code, out, err, False, False)
    assert got in CLEAN, (what, detail, err)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_traces_replay_cleanly(ws: Workspace, cli, seed: int) -> None:
    doc, what = mutate(trace_doc(steps=2), random.Random(seed), 2)
    d = ws.fresh("hyprep")
    path = d / "t.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli("replay", path, "--hw", "mtia300", "--out", d / "run", "-q")
    got, detail = classify(Case("ingest", [], "clean", what), code, out, err, False, False)
    assert got in CLEAN, (what, detail, err)
    assert not [p for p in d.iterdir() if ".tmp-" in p.name]
    assert code != 0 or [p for p in (d / "run").iterdir() if (p / "run.json").is_file()]


@FAST
@given(key=st.sampled_from(sorted(load_spec("mtia300").keys())),
       value=st.sampled_from(SPEC_VALUES) | st.floats(allow_nan=True).map(repr)
       | st.integers(-(2**70), 2**70).map(str))
def test_spec_values_are_validated_on_load(cli, key: str, value: str) -> None:
    code, out, err = cli("hw", "show", "mtia300", "--set", f"{key}={value}")
    got, detail = classify(Case("spec", [], "clean", value), code, out, err, False, False)
    assert got in CLEAN, (key, value, err)
    if code == 2:
        assert key.split(".")[0] in err or "key=value" in err
    else:  # accepted: the value is what the spec now holds, and it is in range
        shown = load_spec("mtia300", [f"{key}={value}"]).value(key)
        if isinstance(shown, float):
            assert shown == shown and abs(shown) != float("inf")


@FAST
@given(stmt=st.sampled_from(SQL_WRITES),
       prefix=st.sampled_from(["", "EXPLAIN ", "EXPLAIN ANALYZE ", "SELECT 1; ",
                               "/* x */ ", "EXPLAIN (FORMAT json) "]),
       lower=st.booleans(), where=st.sampled_from(["run file", "run dir", "cwd", "elsewhere"]))
def test_sql_cannot_write_anything(ws: Workspace, cli, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, stmt: str, prefix: str,
                                   lower: bool, where: str) -> None:
    d = ws.fresh("hypsql")
    monkeypatch.chdir(d)
    target = {"run file": ws.run / "events.parquet", "run dir": ws.run / "x.csv",
              "cwd": Path("rel.csv"), "elsewhere": d / "out.parquet"}[where]
    sql = prefix + (stmt.lower() if lower else stmt).format(t=target)
    before, here = tree(ws.run), tree(d)
    code, out, err = cli("query", ws.run, sql)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (sql, err)
    assert tree(ws.run) == before and tree(d) == here, sql


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("seed", range(2))
def test_every_family_ends_cleanly(ws: Workspace, cli, monkeypatch: pytest.MonkeyPatch,
                                   family: str, seed: int) -> None:
    if family in FORK_ONLY:
        pytest.skip(f"{family}: changes the process (benchmarks/fuzz_campaign.py runs it)")
    case = FAMILIES[family](ws, random.Random(1000 * seed + len(family)))
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    if case.setup is not None:
        case.setup(monkeypatch.setattr)
    got, detail = outcome(case, cli)
    assert got in CLEAN, (case.argv, got, detail)


@pytest.mark.parametrize("sql", [
    "SELECT [1,2] AS l, {'a': 1} AS s, INTERVAL 1 DAY AS i, union_value(k := 1) AS u, "
    "MAP {'k': 1} AS m",
])
@pytest.mark.parametrize("fmt", ["csv", "json", "table", "markdown", "parquet"])
def test_nested_interval_and_union_columns_render(ws: Workspace, cli, tmp_path: Path, sql: str,
                                                  fmt: str) -> None:
    extra = ["-o", tmp_path / "r.parquet"] if fmt == "parquet" else []
    code, out, err = cli("query", ws.run, sql, "--format", fmt, *extra)
    assert (code, err) == (0, "")
    if fmt == "csv":
        assert out.splitlines()[1].startswith('"[1,2]","{""a"":1}"')


def test_duplicate_column_names_are_kept_apart(ws: Workspace, cli) -> None:
    code, out, _ = cli("query", ws.run, "SELECT 1 AS a, 2 AS a", "--format", "json")
    assert code == 0 and json.loads(out) == [{"a": 1, "a_2": 2}]
    import pyarrow as pa
    t = pa.table([[1], [2]], names=["a", "a"])
    assert for_file(t, Format.parquet).column_names == ["a", "a_2"]


@pytest.mark.parametrize("argv,needle", [
    (["--hw", ""], "--hw ''"), (["--hw", ","], "names no hardware"),
    (["--hw", "mtia300", "--seed", "-1"], "--seed"),
    (["--hw", "mtia300", "--seed", str(2**64)], "--seed"),
])
def test_bad_replay_arguments(ws: Workspace, cli, tmp_path: Path, argv: list[str],
                              needle: str) -> None:
    code, _, err = cli("replay", ws.good, *argv, "--out", tmp_path / "r", "-q")
    assert code == 2 and needle in err and "Traceback" not in err


def test_hostile_values_pool_covers_the_classes() -> None:
    kinds = {type(v).__name__ for v in HOSTILE}
    assert {"int", "float", "str", "NoneType", "bool", "list", "dict"} <= kinds
