"""Run directories: round trip, metadata, atomic and non-destructive writes, bad runs."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runfixture import tiny_meta, tiny_tables

from mtia_trace import schema, storage
from mtia_trace.errors import RunExistsError, RunNotFoundError, SchemaVersionError, UsageError
from mtia_trace.storage import TABLES, find_runs, open_run, write_run


@pytest.fixture
def tables() -> dict[str, pa.Table]:
    return tiny_tables()


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_round_trip_keeps_rows_types_units_and_version(tmp_path: Path, tables) -> None:
    run = write_run(tables, tmp_path / "r", tiny_meta())
    assert listing(run.path) == sorted([f"{t}.parquet" for t in TABLES] + ["run.json", "views.sql"])
    for name, expected in TABLES.items():
        got = pq.read_table(run.path / f"{name}.parquet")
        assert got.schema.equals(expected, check_metadata=True)  # units and docs included
        assert got.equals(tables[name].cast(expected))
        assert got.schema.metadata[b"mtia_trace.schema_version"] == schema.SCHEMA_VERSION.encode()
    ev = pq.read_table(run.path / "events.parquet").schema
    assert ev.field("start_us").metadata[b"unit"] == b"us"
    assert pq.ParquetFile(run.path / "events.parquet").metadata.row_group(0).column(0) \
        .compression == "ZSTD"


def test_run_json_records_versions_rows_and_meta(tmp_path: Path, tables) -> None:
    write_run(tables, tmp_path / "r", tiny_meta())
    meta = orjson.loads((tmp_path / "r" / "run.json").read_bytes())
    assert meta["schema_version"] == schema.SCHEMA_VERSION
    assert meta["rows"] == {t: tables[t].num_rows for t in TABLES}
    assert meta["hardware"] == "as-measured" and meta["traces"][0]["sha256"] == "0" * 64
    assert meta["timings_s"]["write"] >= 0
    assert open_run(tmp_path / "r").meta.to_dict() == meta


def test_extra_columns_are_kept_after_the_canonical_ones(tmp_path: Path, tables) -> None:
    steps = tables["steps"]
    tables["steps"] = steps.append_column("note", pa.array(["x"] * steps.num_rows))
    write_run(tables, tmp_path / "r", {})
    got = pq.read_table(tmp_path / "r" / "steps.parquet")
    assert got.column_names == schema.STEPS_SCHEMA.names + ["note"]


def test_row_groups_bound_point_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      tables) -> None:
    monkeypatch.setattr(storage, "ROW_GROUP_ROWS", 16)
    write_run(tables, tmp_path / "r", {})
    md = pq.ParquetFile(tmp_path / "r" / "events.parquet").metadata
    assert md.num_row_groups == -(-tables["events"].num_rows // 16)
    stats = md.row_group(1).column(schema.REPLAYED_EVENTS_SCHEMA.names.index("event_id")).statistics
    assert (stats.min, stats.max) == (16, 31)


def test_refuses_to_overwrite_without_force(tmp_path: Path, tables) -> None:
    write_run(tables, tmp_path / "r", {"seed": 1})
    with pytest.raises(RunExistsError, match=r"r: a run already exists there; pass --force"):
        write_run(tables, tmp_path / "r", {"seed": 2})
    assert open_run(tmp_path / "r").meta.seed == 1


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_force_replaces_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables,
                                exchange: bool) -> None:
    if not exchange:
        monkeypatch.setattr(storage, "_exchange", lambda a, b: False)
    write_run(tables, tmp_path / "r", {"seed": 1})
    write_run(tables, tmp_path / "r", {"seed": 2}, force=True)
    assert open_run(tmp_path / "r").meta.seed == 2
    assert listing(tmp_path) == ["r"]  # no temporary or old directories left behind


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_interrupted_write_leaves_nothing_and_keeps_the_old_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables, exc: type[BaseException]) -> None:
    write_run(tables, tmp_path / "r", {"seed": 1})
    real = storage.write_table

    def failing(name: str, table: pa.Table, path: Path) -> None:
        if name == "steps":
            raise exc("interrupted")
        real(name, table, path)

    monkeypatch.setattr(storage, "write_table", failing)
    for dest in ("r", "new"):
        with pytest.raises(exc):
            write_run(tables, tmp_path / dest, {"seed": 2}, force=True)
    assert listing(tmp_path) == ["r"]
    assert open_run(tmp_path / "r").meta.seed == 1


def test_force_refuses_to_replace_a_directory_that_is_not_a_run(tmp_path: Path, tables) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("keep me")
    with pytest.raises(UsageError, match="exists and is not a run directory"):
        write_run(tables, tmp_path / "src", {}, force=True)
    assert (tmp_path / "src" / "main.py").read_text() == "keep me"


def test_run_directory_permissions_follow_umask(tmp_path: Path, tables) -> None:
    run = write_run(tables, tmp_path / "r", {})
    mask = os.umask(0)
    os.umask(mask)
    assert run.path.stat().st_mode & 0o777 == 0o777 & ~mask


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunNotFoundError, match=r"nope: does not exist; pass a directory"):
        open_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunNotFoundError, match=r"empty: is not a run \(no run.json\)"):
        open_run(tmp_path / "empty")
    with pytest.raises(RunNotFoundError, match="neither a run nor a folder of runs"):
        find_runs([tmp_path / "empty"])


def test_incomplete_and_corrupt_runs(tmp_path: Path, tables) -> None:
    run = write_run(tables, tmp_path / "r", {})
    (run.path / "edges.parquet").unlink()
    with pytest.raises(RunNotFoundError, match="incomplete run, missing edges.parquet"):
        open_run(run.path)
    (run.path / "run.json").write_text("{not json")
    with pytest.raises(RunNotFoundError, match=r"not a readable mtia-trace run \(run.json: "):
        open_run(run.path)


def test_newer_schema_is_refused(tmp_path: Path, tables) -> None:
    run = write_run(tables, tmp_path / "r", {})
    meta = orjson.loads((run.path / "run.json").read_bytes())
    meta["schema_version"] = "99.0"
    (run.path / "run.json").write_bytes(orjson.dumps(meta))
    with pytest.raises(SchemaVersionError, match=r"written with schema 99.0, newer than"):
        open_run(run.path)


def test_find_runs_in_a_folder_names_them_uniquely(tmp_path: Path, tables) -> None:
    for d in ("a/x", "a/y", "b/x"):
        write_run(tables, tmp_path / d, {})
    (tmp_path / "a" / ".x.tmp-123").mkdir()  # leftover of a killed write: ignored
    assert [r.name for r in find_runs([tmp_path / "a"])] == ["x", "y"]
    assert [r.name for r in find_runs([tmp_path / "a", tmp_path / "b" / "x"])] == \
        ["a/x", "y", "b/x"]
    assert len(find_runs([tmp_path / "a" / "x", tmp_path / "a" / "x"])) == 1
