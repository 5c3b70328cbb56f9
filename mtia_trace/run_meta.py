"""`RunMeta`: the typed record of a run, stored as ``run.json`` beside the run's Parquet tables.

One struct, built by the replay job and completed by `storage.write_run` (versions, row counts,
write time); every reader (the report, the ``runs`` SQL view, compare) reads its fields.

Adding a field is one line in `RunMeta` (or in one of the small structs below) with a default, so
runs written before it still decode. ``meta_version`` counts changes of meaning; `decode` upgrades
older layouts (before version 1, ``hardware`` could hold the spec itself). Unknown keys in a
stored ``run.json`` (a newer writer's fields) are ignored when reading; `from_dict` refuses them,
so a writer cannot drop a field silently.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

import msgspec
import orjson

#: Version of the run.json layout this code writes.
META_VERSION = 1
AS_MEASURED = "as-measured"


# The small structs default every field to None and omit None when written, so a run.json keeps
# exactly the keys its writer gave (older and partial records round-trip unchanged).


class TraceFile(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One input trace file."""

    path: str
    rank: int | None = None
    sha256: str | None = None
    bytes: int | None = None
    n_events: int | None = None
    #: ``deviceProperties`` names the file declares
    devices: list[str] | None = None


class RunOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The replay options the run was made with."""

    hw: str | None = None
    mode: str | None = None
    loss_rate: float | None = None
    seed: int | None = None
    overrides: list[str] | None = None
    source_hw: str | None = None
    #: op-level what-ifs applied before scheduling (``SELECTOR:CHANGE``, `replay.whatif`)
    whatif: list[str] | None = None


class Assumptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the numbers rest on: assumed spec values and the cost model's notes."""

    #: spec key -> value, for every value the spec marks ``assumed`` (or overridden)
    spec: dict[str, Any] | None = None
    #: the cost model's notes (`replay.costs.CostModel` ``notes``: mode, coverage, reasons)
    model: dict[str, Any] | None = None


class RunMeta(msgspec.Struct, kw_only=True):
    """The contents of ``run.json``."""

    meta_version: int = META_VERSION
    tool: str = "mtia-trace"
    tool_version: str = ""
    schema_version: str = "0"
    created_unix: float = 0.0
    #: target name (a bundled spec, a .toml stem, or ``as-measured``)
    hardware: str = AS_MEASURED
    #: the full hardware spec with a source per number (`HardwareSpec.to_dict`)
    spec: dict[str, Any] = msgspec.field(default_factory=dict)
    options: RunOptions = msgspec.field(default_factory=RunOptions)
    seed: int = 0
    traces: list[TraceFile] = msgspec.field(default_factory=list)
    assumptions: Assumptions = msgspec.field(default_factory=Assumptions)
    warnings: list[str] = msgspec.field(default_factory=list)
    #: stage -> seconds (ingest, replay, write)
    timings_s: dict[str, float] = msgspec.field(default_factory=dict)
    #: table -> rows
    rows: dict[str, int] = msgspec.field(default_factory=dict)
    #: shards, workers, coupling iterations of a Dask replay; None for a local one
    distributed: dict[str, Any] | None = None
    #: step time no dependency and no modelled latency explains (DESIGN §10): ``mean_step_us``
    #: (us, mean of steps.unexplained_us over ranks and steps) and ``fraction_of_step``
    #: (its share of the replayed step time); None for runs written before it was counted
    unexplained: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (field order as declared)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @property
    def trace_names(self) -> list[str]:
        """Trace file names only (run.json may hold absolute paths; reports must not)."""
        return [PurePath(t.path).name for t in self.traces if t.path]


FIELDS = frozenset(RunMeta.__struct_fields__)


def _upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """An older run.json layout in today's shape."""
    out = dict(raw)
    hw = out.get("hardware")
    if isinstance(hw, dict):  # before version 1: the spec itself under "hardware"
        out.setdefault("spec", hw)
        out["hardware"] = str(hw.get("name", "?"))
    elif hw is None:
        out.pop("hardware", None)
    out["traces"] = [t if isinstance(t, dict) else {"path": str(t)}
                     for t in out.get("traces") or []]
    return out


def _plain(value: object) -> bytes:
    """JSON bytes of ``value``: numpy scalars/arrays via orjson, paths and the rest as str."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
                        default=str)


def from_dict(meta: dict[str, Any]) -> RunMeta:
    """A `RunMeta` from a writer's dict; a key that is not a field is a bug (add the field)."""
    unknown = sorted(set(meta) - FIELDS)
    assert not unknown, f"run.json fields {unknown} are not in RunMeta; add them there"
    return msgspec.json.decode(_plain(meta), type=RunMeta)


def decode(data: bytes) -> RunMeta:
    """Read a stored ``run.json`` (any version this code knows; unknown keys are ignored).

    Raises `msgspec.ValidationError` or `msgspec.DecodeError` on a file that is not one.
    """
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict):
        raise msgspec.ValidationError("run.json: expected an object")
    return msgspec.convert(_upgrade(raw), type=RunMeta, strict=False)


def encode(meta: RunMeta) -> bytes:
    """``run.json`` bytes: indented, fields in declaration order."""
    return orjson.dumps(meta.to_dict(), option=orjson.OPT_INDENT_2)
