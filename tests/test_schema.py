from __future__ import annotations

import re
from itertools import combinations
from pathlib import Path

import pytest

from mtia_trace import schema


def test_every_column_has_unit_and_doc():
    for table in (schema.EVENTS_SCHEMA, schema.REPLAYED_EVENTS_SCHEMA, schema.STEPS_SCHEMA,
                  schema.EDGES_SCHEMA, schema.COLLECTIVES_SCHEMA):
        assert table.metadata[b"mtia_trace.schema_version"] == schema.SCHEMA_VERSION.encode()
        for field in table:
            assert field.metadata[b"doc"], field.name
            assert b"unit" in field.metadata


def test_from_columns_fills_absent_values():
    t = schema.from_columns({"rank": [0, 0], "event_id": [0, 1], "name": ["a", "b"],
                             "kind": ["gemm", "other"], "ts_us": [0.0, 1.0], "dur_us": [1.0, 2.0]})
    assert t.schema == schema.EVENTS_SCHEMA
    assert t.column("correlation").to_pylist() == [-1, -1]
    assert t.column("flops").to_pylist() == [0.0, 0.0]
    assert t.column("dtype").null_count == 2
    schema.validate_events(t)


def test_validate_events_rejects_bad_ids_and_kinds():
    base = {"rank": [0, 0], "name": ["a", "b"], "ts_us": [0.0, 1.0], "dur_us": [1.0, 2.0]}
    with pytest.raises(AssertionError, match="row position"):
        schema.validate_events(schema.from_columns({**base, "event_id": [1, 0], "kind": ["gemm", "gemm"]}))
    with pytest.raises(AssertionError, match="unknown kinds"):
        schema.validate_events(schema.from_columns({**base, "event_id": [0, 1], "kind": ["gemm", "nope"]}))


def test_attribution_columns_present_in_steps():
    names = schema.STEPS_SCHEMA.names
    for a in schema.ATTRIBUTION:
        assert f"{a}_us" in names


def test_kind_groups_partition_the_kinds():
    top = (schema.DEVICE_KINDS, schema.HOST_KINDS, schema.CONTROL_KINDS, schema.PASSIVE_KINDS)
    device = (schema.COMPUTE_KINDS, schema.MEMORY_KINDS, schema.COMM_KINDS)
    for parts, whole in ((top, schema.KINDS), (device, schema.DEVICE_KINDS)):
        flat = [k for part in parts for k in part]
        assert len(flat) == len(set(flat)), f"kind groups overlap: {flat}"
        assert set(flat) == set(whole)
    assert set(schema.GEMM_KINDS) <= set(schema.COMPUTE_KINDS)
    assert set(schema.SHAPE_KINDS) <= set(schema.COMPUTE_KINDS)
    assert set(schema.FETCH_KINDS) <= set(schema.DEVICE_KINDS)


def test_sql_kind_lists_are_schema_groups():
    """A literal SQL ``kind IN ('...', ...)`` list (analyzer SQL files, SQL in the code) is one
    of the schema's kind groups, or a union of them."""
    groups = {n: set(v) for n, v in vars(schema).items() if n.endswith("_KINDS") and n != "KINDS"}
    unions = {frozenset().union(*c) for r in (1, 2, 3) for c in combinations(groups.values(), r)}
    root = Path(__file__).parent.parent
    lists = []
    for pkg in ("mtia_trace", "replay", "analyzers"):
        for f in sorted((root / pkg).rglob("*")):
            if f.suffix not in (".sql", ".py"):
                continue
            text = f.read_text(encoding="utf-8")
            for m in re.finditer(r"\bkind\s+(?:NOT\s+)?IN\s*\(('[^)]*)\)", text, re.I):
                lists.append((f.name, frozenset(re.findall(r"'([^']*)'", m.group(1)))))
    assert len(lists) >= 3, "kind lists not found in the analyzer SQL (the pattern is stale)"
    bad = [(f, sorted(k)) for f, k in lists if k not in unions]
    assert not bad, f"kind lists that are no schema group: {bad}"
