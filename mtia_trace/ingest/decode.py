"""Read one Kineto JSON file into typed records, with one-line errors for bad input.

The decoder is msgspec with typed structs: it skips every key the reader does not use, so it is
several times faster than a generic JSON parse and holds a fraction of its memory (see
benchmarks/bench_ingest.py). Only the args the ingest needs are declared.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import msgspec

from mtia_trace.errors import TraceFormatError

_HINT = "expected a PyTorch profiler export (.json or .json.gz)"


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The event args the ingest reads; every other key is skipped while decoding."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_old: int | None = msgspec.field(default=None, name="external id")
    correlation: int | None = None
    device: int | None = None
    stream: int | str | None = None
    stream_id: int | str | None = None
    # shapes stay raw JSON: they repeat massively, so they are decoded once per distinct value
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    flops: float | None = None
    bytes: float | None = None
    size: float | str | None = None
    mem_size: str | float | None = msgspec.field(default=None, name="mem size")
    direction: str | None = None
    packet_ptr: int | None = None
    seq_num: int | None = None  # MTIA event_record / event_wait: the event's sequence number
    wait_on_stream: int | None = None
    wait_corr: int | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    sync_kind: str | None = msgspec.field(default=None, name="cuda_sync_kind")
    coll_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: float | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: float | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: str | list[Any] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: int | None = msgspec.field(default=None, name="Seq")
    seq_lower: int | None = msgspec.field(default=None, name="seq")
    name: str | None = None  # metadata events: process/thread name


_LIST = msgspec.json.Decoder()


class RawLists:
    """Decode raw JSON arrays (shape args) once per distinct value; non-arrays read as None."""

    def __init__(self) -> None:
        self._memo: dict[bytes, list[Any] | None] = {}

    def __call__(self, raw: msgspec.Raw | None) -> list[Any] | None:
        if raw is None:
            return None
        key = bytes(raw)
        got = self._memo.get(key, _MISSING)
        if got is _MISSING:
            try:
                v = _LIST.decode(key)
            except msgspec.DecodeError:
                v = None
            got = self._memo[key] = v if isinstance(v, list) else None
        return got  # type: ignore[return-value]


_MISSING = object()


class Event(msgspec.Struct, gc=False):
    ph: str
    name: str = ""
    cat: str | None = None
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: Args | None = None


class Document(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[Any] | None = None


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it starts with the gzip magic."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(
                f"{path}: corrupt or truncated gzip ({exc}); re-export or re-download the trace"
            ) from None
    return raw


def decode(path: Path, raw: bytes) -> Document:
    """Decode and check the top level; field-level type errors name the JSON path."""
    try:
        doc = msgspec.json.decode(raw, type=Document)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if "missing required field `traceEvents`" in msg:
            raise TraceFormatError(f'{path}: no "traceEvents" array; {_HINT}') from None
        if "Expected `object`, got" in msg and "`$`" not in msg and "$." not in msg:
            raise TraceFormatError(f"{path}: top level is not a JSON object; {_HINT}") from None
        raise TraceFormatError(
            f"{path}: malformed trace event ({msg}); fix or re-export the trace"
        ) from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc}); {_HINT}") from None
    return doc
