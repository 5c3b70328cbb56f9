"""The dependency graph of fixed traces, pinned field by field: every array of the `Graph` (dtype,
shape and a hash of its bytes), its edges table, ``t0`` and its notes, for the bundled samples and
a generated trace (a train preset on several ranks: launches, stream waits, host syncs, matched
collectives; the CPU sample: gloo enqueues, worker threads and ``work.wait()`` gaps).

Small hand-built graphs (tests/known_traces.py, whose replays tests/test_known_answers.py derives
by hand) are stored value by value, so a change to them reads as values in the diff.

A refactoring of `replay.graph` must leave these unchanged. After an intended change to the graph
(or to ingest or synth, which feed it): ``pytest tests/test_graph_golden.py --update-golden``, and
say in the commit which fields moved and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mtia_trace.ingest import load
from mtia_trace.synth import SynthOptions, synthesize
from replay.graph import Graph, build_graph
from tests.known_traces import SMALL

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "graph.json"
SAMPLES = {
    "dcnv2_train_2rank": ROOT / "sample_traces" / "synth" / "dcnv2_train_2rank",
    "dcnv2_infer_1rank": ROOT / "sample_traces" / "synth" / "dcnv2_infer_1rank",
    "torch_cpu_dlrm": ROOT / "sample_traces" / "torch_cpu_dlrm",
}
SYNTH = {"synth_dlrm-dcnv2_4rank": SynthOptions(preset="dlrm-dcnv2", ranks=4, steps=2, seed=3)}


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()[:20]


def _table(t: pa.Table) -> dict[str, str]:
    out = {"schema": ", ".join(f"{f.name}: {f.type}" for f in t.schema)}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        if pa.types.is_string(col.type):
            out[name] = _digest(np.array(col.to_pylist(), dtype=object).astype(str))
        else:
            out[name] = _digest(col.to_numpy(zero_copy_only=False))
    return out


def _values(a: np.ndarray | list) -> dict[str, object]:
    """An array's dtype and values (NaN as null), for a golden a reviewer can read."""
    arr = np.asarray(a)
    vals = [None if isinstance(x, float) and x != x else x for x in arr.tolist()]
    return {"dtype": arr.dtype.str if arr.dtype != object else "str", "values": vals}


#: graphs of at most this many events are stored value by value
SMALL_N = 16


def fingerprint(g: Graph) -> dict[str, object]:
    """Every field of ``g``: arrays by digest (by value for a graph of at most `SMALL_N`
    events), the edges table by column, scalars and notes as is."""
    out: dict[str, object] = {}
    small = g.n <= SMALL_N
    for f in dataclasses.fields(g):
        v = getattr(g, f.name)
        if isinstance(v, np.ndarray):
            out[f.name] = _values(v) if small else _digest(v)
        elif isinstance(v, pa.Table) and small:
            out[f.name] = {"schema": ", ".join(f"{x.name}: {x.type}" for x in v.schema),
                           **{c: _values(v.column(c).to_pylist()) for c in v.column_names}}
        elif isinstance(v, pa.Table):
            out[f.name] = _table(v)
        elif f.name == "notes":
            out[f.name] = {k: v[k] for k in sorted(v)}
        else:
            out[f.name] = v if v is None else repr(v)
    return out


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    traces = dict(SAMPLES)
    root = tmp_path_factory.mktemp("graph-golden")
    for name, opts in SYNTH.items():
        traces[name] = synthesize(dataclasses.replace(opts, compress_level=1), root / name).out_dir
    out = {name: fingerprint(build_graph(load(path).events)) for name, path in traces.items()}
    # a small ready-lag cap (starts the graph cannot explain) and none
    events = load(SAMPLES["dcnv2_train_2rank"]).events
    out["dcnv2_train_2rank_cap_0.1us"] = fingerprint(build_graph(events, max_ready_lag_us=0.1))
    out["dcnv2_train_2rank_no_cap"] = fingerprint(build_graph(events, max_ready_lag_us=None))
    out.update({name: fingerprint(build_graph(make())) for name, make in SMALL.items()})
    return out


def test_graph_matches_golden(graphs: dict[str, dict[str, object]], update_golden: bool) -> None:
    if update_golden:
        GOLDEN.write_text(json.dumps(graphs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(graphs) == sorted(want)
    for name, got in graphs.items():
        diff = sorted(k for k in set(got) | set(want[name]) if got.get(k) != want[name].get(k))
        assert not diff, f"{name}: graph fields differ from tests/golden/graph.json: {diff}"


def test_fingerprint_sees_a_one_element_change(graphs: dict[str, dict[str, object]],
                                               tmp_path: Path) -> None:
    g = build_graph(load(SAMPLES["dcnv2_infer_1rank"]).events)
    before = fingerprint(g)
    assert before == graphs["dcnv2_infer_1rank"]
    g.lag[0] = np.nextafter(g.lag[0], np.inf)
    after = fingerprint(g)
    assert {k for k in before if before[k] != after[k]} == {"lag"}
