"""Run directories: one Parquet file per canonical table plus ``run.json``, written atomically.

A run is built in a hidden temporary directory beside its destination and renamed into place, so
an interrupted write leaves no partial run. Replacing an existing run (``force=True``) swaps the
new directory in first and deletes the old one afterwards: an existing run is never lost.
`views_sql` is the SQL text of the views over runs: written into each run as ``views.sql`` and
used by `mtia_trace.runs` to query them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from mtia_trace import __version__, run_meta, schema
from mtia_trace.derived_views import derived_views_sql
from mtia_trace.destinations import (
    RUN_MARKER,
    check_parent,
    enclosing_run,
    temporary_dir,
)
from mtia_trace.errors import (
    RunExistsError,
    RunNotFoundError,
    SchemaVersionError,
    UsageError,
)
from mtia_trace.run_meta import AS_MEASURED, RunMeta

#: The tables of a run, in file order, with their canonical schemas.
TABLES: dict[str, pa.Schema] = {
    "events": schema.REPLAYED_EVENTS_SCHEMA,
    "edges": schema.EDGES_SCHEMA,
    "steps": schema.STEPS_SCHEMA,
    "collectives": schema.COLLECTIVES_SCHEMA,
    "summary": schema.SUMMARY_SCHEMA,
}
META_FILE = RUN_MARKER
VIEWS_FILE = "views.sql"
#: Rows per Parquet row group: small enough that a point query decodes little, large enough
#: that a full scan stays fast and the per-group overhead small.
ROW_GROUP_ROWS = 64 * 1024
#: Parquet files are written with a CRC per page and read verifying it, so a flipped byte inside
#: a data page is an unreadable run, not a silently different number (runs written before the
#: CRCs were added have none to check).
PARQUET_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))


@dataclass(frozen=True)
class Run:
    """A stored run: its directory, display name and metadata."""

    path: Path
    name: str
    meta: RunMeta

    def table_path(self, table: str) -> Path:
        """``<table>.parquet``, or the ``<table>/`` directory of a partitioned table."""
        part = self.path / table
        return part if part.is_dir() else self.path / f"{table}.parquet"

    def table_files(self, table: str) -> list[Path]:
        """The Parquet files holding ``table`` (one, or the partitions in name order)."""
        return table_files(self.table_path(table))

    def read(self, table: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The whole table, or only its ``columns`` (in that order; the others are not decoded);
        a file that fails to decode raises `RunNotFoundError` (one line)."""
        parts = []
        for f in self.table_files(table):
            try:
                parts.append(pq.read_table(f, columns=None if columns is None else list(columns),
                                            page_checksum_verification=True))
            except (OSError, ValueError, pa.ArrowException) as exc:  # ValueError: bad UTF-8
                raise unreadable(self.path, f"{f.relative_to(self.path)}: {_first_line(exc)}"
                                 ) from None
        if len(parts) == 1:
            return parts[0]
        return pa.concat_tables(parts).replace_schema_metadata(TABLES[table].metadata)

    def dataset(self, table: str) -> ds.Dataset:
        """The table as a lazily read Arrow dataset (pages checked as they are decoded)."""
        return ds.dataset([str(f) for f in self.table_files(table)], format=PARQUET_FORMAT)


def table_files(path: Path) -> list[Path]:
    """A table's files: the file itself, or a partition directory's ``*.parquet`` sorted."""
    return sorted(path.glob("*.parquet")) if path.is_dir() else [path]


def partition_path(tmp: Path, table: str, rank: int) -> Path:
    """Where a distributed replay writes ``table``'s partition for ``rank`` inside a run."""
    return tmp / table / f"rank-{rank:06d}.parquet"


def write_partition(name: str, table: pa.Table, path: Path) -> None:
    """Write one partition atomically (a retried task overwrites it whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        write_table(name, table, part)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def _conform(name: str, table: pa.Table) -> pa.Table:
    """Canonical columns in schema order (extra columns appended) with the schema's metadata."""
    target = TABLES[name]
    missing = [f.name for f in target if f.name not in table.column_names]
    assert not missing, f"{name} table lacks columns {missing}"
    extra = [c for c in table.column_names if c not in target.names]
    table = table.select(target.names + extra)
    fields = [target.field(f.name) if f.name in target.names else f for f in table.schema]
    conformed = table.cast(pa.schema(fields))
    return conformed.replace_schema_metadata(target.metadata)


def _dictionary_columns(schema_: pa.Schema) -> list[str]:
    """Columns written dictionary-encoded: the strings (names, kinds, tracks repeat). Numbers
    are written plain: their values rarely repeat, and zstd packs them smaller than dictionary
    pages do (events table of 799k rows: 17.8 vs 24.7 MB, written in about half the time)."""
    return [f.name for f in schema_ if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_dictionary(f.type)]


def write_table(name: str, table: pa.Table, path: Path) -> None:
    """Write one canonical table as zstd Parquet with its schema version in the metadata."""
    table = _conform(name, table)
    pq.write_table(
        table,
        path,
        use_dictionary=_dictionary_columns(table.schema),
        compression="zstd",
        compression_level=3,
        row_group_size=ROW_GROUP_ROWS,
        write_statistics=True,
        write_page_index=True,
        write_page_checksum=True,
    )


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def _swap_into_place(tmp: Path, dest: Path) -> None:
    """Move ``tmp`` to ``dest``; an existing ``dest`` is replaced only after the new one is in."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    if _exchange(tmp, dest):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old run
        return
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_destination(dest: Path, force: bool) -> None:
    """Refuse a run destination that may not be written: an existing run without ``force``,
    anything but a run or an empty folder, a folder inside another run, an uncreatable path."""
    folder = Path(os.path.abspath(dest)).parent
    if os.path.lexists(folder) and not folder.is_dir():
        raise UsageError(f"{dest.parent}: exists and is not a folder (it is "
                         f"{_what_is_there(folder) or 'not a directory'}); -o/--output names the "
                         "folder runs are written in, choose another")
    run = enclosing_run(folder)
    if run == folder:
        raise UsageError(f"{dest.parent}: is a run directory; -o/--output names the folder that "
                         f"holds runs (this one would go to {dest}), pass {dest.parent.parent} "
                         "or another folder")
    if run is not None:
        raise UsageError(f"{dest}: is inside the run directory {run}; runs are never modified, "
                         "choose an -o/--output outside it")
    check_parent(dest, "-o/--output")
    if not os.path.lexists(dest):
        return
    what = _what_is_there(dest)
    if what is not None:
        raise UsageError(f"{dest}: exists and is not a run directory (it is {what}); refusing "
                         "to replace it even with --force, choose another -o/--output")
    if not force:
        there = ("a run already exists there" if (dest / META_FILE).is_file()
                 else "an empty directory is there")
        raise RunExistsError(f"{dest}: {there}; pass --force to replace it or -o/--output to "
                             "choose another directory")


def _what_is_there(dest: Path) -> str | None:
    """What occupies ``dest`` when a run may not replace it (None: a run or an empty folder)."""
    try:
        st = os.lstat(dest)
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link"
        if stat.S_ISREG(st.st_mode):
            return "a file"
        if not stat.S_ISDIR(st.st_mode):
            return ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a named pipe" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a directory")
        if (dest / META_FILE).is_file() or not any(dest.iterdir()):
            return None
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return "a directory holding other files"


def begin_run(dest: str | Path, force: bool = False) -> Path:
    """A fresh hidden temporary directory beside ``dest`` to build a run in (see `write_run`)."""
    dest = Path(dest)
    check_destination(dest, force)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_dir(dest)
    except OSError as exc:
        raise UsageError(f"{dest}: cannot create ({exc.strerror or exc}); choose another -o/--output"
                         ) from None
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; a run is an ordinary dir
    return tmp


def _rows(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(path))


def write_run(tables: dict[str, pa.Table], dest: str | Path, meta: RunMeta | dict, *,
              force: bool = False, tmp: Path | None = None) -> Run:
    """Write ``tables`` (name -> table, all of `TABLES`) and ``meta`` as a run at ``dest``.

    ``meta`` (a `RunMeta`, or a dict of its fields) goes into ``run.json`` with the tool and
    schema versions, row counts and write time filled in. Raises `RunExistsError` when ``dest`` exists and ``force`` is false. With ``tmp`` (from
    `begin_run`), tables already written there as partition directories may be left out of
    ``tables``; the run is finished and moved into place (or ``tmp`` removed on failure).
    """
    dest = Path(dest)
    done = {t for t in TABLES if tmp is not None and (tmp / t).is_dir()}
    missing = [t for t in TABLES if t not in tables and t not in done]
    assert not missing, f"write_run needs tables {missing}"
    try:
        if tmp is None:
            tmp = begin_run(dest, force)
        else:
            check_destination(dest, force)
        t0 = time.perf_counter()
        for name in TABLES:
            if name not in done:
                write_table(name, tables[name], tmp / f"{name}.parquet")
        given = meta if isinstance(meta, RunMeta) else run_meta.from_dict(meta)
        full = msgspec.structs.replace(
            given, tool_version=__version__, schema_version=schema.SCHEMA_VERSION,
            created_unix=round(time.time(), 3),
            rows={name: _rows(tmp / name) if name in done else tables[name].num_rows
                  for name in TABLES},
            timings_s={**given.timings_s, "write": round(time.perf_counter() - t0, 4)})
        (tmp / META_FILE).write_bytes(run_meta.encode(full))
        run = Run(dest.resolve(), dest.name, full)
        (tmp / VIEWS_FILE).write_text(_views_file(run))
        check_destination(dest, force)
        _swap_into_place(tmp, dest)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Columns of the ``runs`` view: (name, SQL type); `_run_row` reads them from `RunMeta`.
_RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "VARCHAR"), ("path", "VARCHAR"), ("hardware", "VARCHAR"), ("mode", "VARCHAR"),
    ("seed", "BIGINT"), ("loss_rate", "DOUBLE"), ("traces", "VARCHAR"), ("events", "BIGINT"),
    ("tool_version", "VARCHAR"), ("schema_version", "VARCHAR"), ("created_unix", "DOUBLE"),
)


def sql_literal(value: object) -> str:
    """``value`` as a SQL literal (NULL, TRUE/FALSE, a number or a quoted string)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def used_mode(meta: RunMeta) -> str | None:
    """The costing mode a run used (``roofline``, ``scaled``, ``as-measured``), from the cost
    model's notes; the requested one (e.g. ``auto``) for runs written without them."""
    model = (meta.assumptions.model or {}) if meta.assumptions else {}
    if model.get("mode"):
        return str(model["mode"])
    if model.get("costing") == "as-measured" or meta.hardware == AS_MEASURED:
        return AS_MEASURED
    return meta.options.mode


def _run_row(run: Run, path: str) -> dict[str, object]:
    m = run.meta
    return {
        "run": run.name, "path": path, "hardware": m.hardware, "mode": used_mode(m),
        "seed": m.seed, "loss_rate": m.options.loss_rate,
        "traces": ", ".join(t.path for t in m.traces), "events": m.rows.get("events"),
        "tool_version": m.tool_version, "schema_version": m.schema_version,
        "created_unix": m.created_unix,
    }


def views_sql(runs: Sequence[Run], *, relative: bool = False) -> str:
    """``CREATE VIEW`` statements over ``runs``; ``relative`` names files relative to the run."""
    out = []
    for table in TABLES:
        parts = []
        for run in runs:
            fs = [str(f.relative_to(run.path)) if relative else str(f)
                  for f in run.table_files(table)]
            src = (sql_literal(fs[0]) if len(fs) == 1
                   else "[" + ", ".join(map(sql_literal, fs)) + "]")
            parts.append(f"SELECT {sql_literal(run.name)} AS run, * FROM read_parquet({src})")
        out.append(f"CREATE OR REPLACE VIEW {table} AS\n  "
                   + "\n  UNION ALL BY NAME\n  ".join(parts) + ";")
    rows = []
    for run in runs:
        row = _run_row(run, "." if relative else str(run.path))
        rows.append("(" + ", ".join(f"CAST({sql_literal(row[c])} AS {t})" for c, t in _RUN_COLUMNS)
                    + ")")
    names = ", ".join(c for c, _ in _RUN_COLUMNS)
    out.append("CREATE OR REPLACE VIEW runs AS\n  SELECT * FROM (VALUES\n    "
               + ",\n    ".join(rows) + f"\n  ) AS t({names});")
    return "\n".join(out) + "\n" + derived_views_sql()


def _views_file(run: Run) -> str:
    header = (f"-- Views over the run in this directory (mtia-trace {__version__}, schema "
              f"{schema.SCHEMA_VERSION}).\n-- Run from this directory: duckdb -init views.sql\n")
    return header + views_sql([run], relative=True)


def _version(text: object) -> tuple[int, int] | None:
    """``"MAJOR.MINOR"`` as a pair of ints, or None when it is not a version."""
    major, _, minor = str(text).partition(".")
    if not (major.isdigit() and (minor or "0").isdigit()) or len(str(text)) > 20:
        return None
    return int(major), int(minor or "0")


def _check_version(path: Path, where: str, version: object) -> None:
    """Refuse a run (or one of its files) written by another schema than this reader's.

    A newer major may change any column: upgrade mtia-trace. An older version lacks columns,
    or names them differently, than the readers use (a minor version adds columns): re-run.
    """
    ours = _version(schema.SCHEMA_VERSION)
    got = _version(version)
    assert ours is not None
    if got is None:
        raise unreadable(path, f"{where}: schema_version {str(version)[:40]!r} is not a "
                               "MAJOR.MINOR version")
    if got[0] > ours[0]:
        raise SchemaVersionError(
            f"{path}: {where} written with schema {version}, newer than this mtia-trace "
            f"({__version__}, schema {schema.SCHEMA_VERSION}); upgrade mtia-trace to read it")
    if got < ours:
        raise SchemaVersionError(
            f"{path}: {where} was written by schema {version}, this mtia-trace ({__version__}) "
            f"reads schema {schema.SCHEMA_VERSION}; re-run `mtia-trace replay --force` to "
            "rewrite the run")


def unreadable(path: Path, why: str) -> RunNotFoundError:
    """The one error for a run whose files cannot be read (``why``: which file, what failed)."""
    return RunNotFoundError(f"{path}: not a readable mtia-trace run ({why}); re-run "
                            "`mtia-trace replay --force` to rewrite it")


def _check_table(path: Path, table: str, files: list[Path]) -> None:
    """Each file of ``table`` opens as Parquet (footer, schema) and has the canonical columns."""
    if not files:
        raise unreadable(path, f"{table}/ holds no Parquet partitions")
    need = TABLES[table].names
    for f in files:
        rel = f.relative_to(path)
        try:
            if not f.is_file():
                raise OSError(f"{rel} is not a regular file")
            arrow = pq.ParquetFile(f).schema_arrow
        except (OSError, ValueError, pa.ArrowException) as exc:  # ValueError: bad UTF-8
            raise unreadable(path, f"{rel}: {_first_line(exc)}") from None
        names, tags = arrow.names, arrow.metadata or {}
        version = tags.get(b"mtia_trace.schema_version")
        if version is None:
            raise unreadable(path, f"{rel} has no mtia-trace schema version (not written by "
                                   "mtia-trace)")
        _check_version(path, str(rel), version.decode(errors="replace"))
        lacking = [c for c in need if c not in names]
        if lacking:
            raise unreadable(path, f"{rel} lacks columns {', '.join(lacking[:4])}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def open_run(path: str | Path) -> Run:
    """Read a run directory's metadata; refuse non-runs, unreadable runs and other schemas.

    Every table file's Parquet footer and columns are checked, so a truncated, emptied or
    foreign file fails here in one line instead of deep inside a query.
    """
    path = _the_run_in(Path(path))
    meta_path = path / META_FILE
    if not meta_path.is_file():
        what = "does not exist" if not path.exists() else f"is not a run (no {META_FILE})"
        raise RunNotFoundError(
            f"{path}: {what}; pass a directory written by `mtia-trace replay` or a folder of runs")
    try:
        meta = run_meta.decode(meta_path.read_bytes())
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise unreadable(path, f"{META_FILE}: {exc}") from None
    except OSError as exc:
        raise unreadable(path, f"{META_FILE}: {exc.strerror or exc}") from None
    except RecursionError:
        raise unreadable(path, f"{META_FILE}: nested too deeply") from None
    _check_version(path, META_FILE, meta.schema_version)
    absent = [f"{t}.parquet" for t in TABLES
              if not (path / f"{t}.parquet").exists() and not (path / t).is_dir()]
    if absent:
        raise RunNotFoundError(f"{path}: incomplete run, missing {', '.join(absent)}; "
                               "rewrite it with `mtia-trace replay --force`")
    run = Run(path.resolve(), path.resolve().name, meta)
    for t in TABLES:
        _check_table(run.path, t, run.table_files(t))
    return run


def _child_runs(folder: Path) -> list[Path]:
    try:
        return sorted(c for c in folder.iterdir()
                      if c.is_dir() and not c.name.startswith(".") and (c / META_FILE).is_file())
    except OSError:
        return []


def _the_run_in(path: Path) -> Path:
    """``path`` itself when it is a run (or not a folder); the one run inside a folder that
    holds exactly one (what `mtia-trace replay -o FOLDER` wrote for one target)."""
    if (path / META_FILE).is_file() or not path.is_dir():
        return path
    children = _child_runs(path)
    if len(children) == 1:
        return children[0]
    if len(children) > 1:
        names = ", ".join(c.name for c in children[:4]) + (", ..." if len(children) > 4 else "")
        raise RunNotFoundError(f"{path}: holds {len(children)} runs ({names}); pass one of them, "
                               f"e.g. {children[0]}")
    return path


def find_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Runs named by ``paths``: each a run directory, or a folder whose child directories are runs.

    Names are the directory names, made unique by prefixing the parent when they collide.
    """
    runs: list[Run] = []
    for p in map(Path, paths):
        if (p / META_FILE).is_file() or not p.is_dir():
            runs.append(open_run(p))
            continue
        children = _child_runs(p)
        if not children:
            raise RunNotFoundError(
                f"{p}: neither a run nor a folder of runs (no {META_FILE} in it or its "
                "subdirectories); pass a directory written by `mtia-trace replay`")
        runs.extend(open_run(c) for c in children)
    if not runs:
        raise UsageError("no run given; pass a run directory written by `mtia-trace replay`")
    return _unique_names(runs)


def _unique_names(runs: Sequence[Run]) -> list[Run]:
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.name] = seen.get(r.name, 0) + 1
    out: list[Run] = []
    used: set[str] = set()
    for r in runs:
        name = r.name if seen[r.name] == 1 else f"{r.path.parent.name}/{r.name}"
        if name in used:
            name = str(r.path)
        if r.path in {u.path for u in out}:
            continue  # the same run named twice
        used.add(name)
        out.append(Run(r.path, name, r.meta))
    return out
