from __future__ import annotations

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
