"""Read one Kineto JSON file into typed records, with one-line errors for bad input.

The decoder is msgspec with typed structs: it skips every key the reader does not use, so it is
several times faster than a generic JSON parse and holds a fraction of its memory (see
benchmarks/bench_ingest.py). Only the args the ingest needs are declared, and each event decodes
into the struct of its phase (`decode`): a metadata event holds a name and a thread, not the
thirty fields of a row's args. The ingest decodes a file a piece at a time (`Pieces`), so
neither its whole text nor all its decoded events are held at once; what the pieces cannot read
is read and decoded whole (`read_bytes`, `decode`, `decode_plain`), which words every error.

Hostile input is refused at this edge, each case in one line naming the file (and the JSON path
of the offending value): anything but a regular file (a FIFO, a device, a socket), a file or
gunzipped stream larger than `max_bytes` (default 4 GiB; ``MTIA_TRACE_MAX_BYTES=16G`` raises
it), JSON nested deeper than the decoder's recursion limit, integers outside int64 and
timestamps or durations beyond ``MAX_TIME_US``, and step numbers past int32.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
import os
import re
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

import msgspec

from mtia_trace.errors import TraceFormatError, UsageError

_HINT = "expected a PyTorch profiler export (.json or .json.gz)"

#: Environment variable that raises (or lowers) the per-file read limit, e.g. ``16G``.
MAX_BYTES_ENV = "MTIA_TRACE_MAX_BYTES"
#: Default largest file, and largest gunzipped JSON, one trace file may be.
DEFAULT_MAX_BYTES = 4 * 2**30
#: Largest |ts| or dur accepted, in us: 3e15 us is 95 years (a Unix-epoch trace is ~1.8e15,
#: year 2027). The graph keys times as int64 ns after subtracting the earliest start
#: (`replay.graph.events.time_keys`): a start, its distance from the earliest (2x) and an end
#: (3x) must stay below 2^63 ns = 9.22e15 us, so the bound is 9.22e15 / 3, rounded down.
MAX_TIME_US = 3e15
#: Largest step number (``ProfilerStep#N``) and rank: steps and ranks are int32 columns.
MAX_STEP = 2**31 - 1
_GZIP = b"\x1f\x8b"
#: JSON's insignificant whitespace (RFC 8259)
_WHITESPACE = b" \t\n\r"
#: bytes read, and at most gunzipped, at a time
_BLOCK = 2**20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
TimeUs = Annotated[float, msgspec.Meta(ge=-MAX_TIME_US, le=MAX_TIME_US)]


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The event args the ingest reads; every other key is skipped while decoding."""

    # ids default to -1, the columns' "none": read as int64 arrays in one pass (an explicit
    # null still reads as None)
    external_id: Int64 | None = msgspec.field(default=-1, name="External id")
    external_id_old: Int64 | None = msgspec.field(default=-1, name="external id")
    correlation: Int64 | None = -1
    device: Int64 | None = None
    stream: Int64 | str | None = None
    stream_id: Int64 | str | None = None
    # shapes stay raw JSON: they repeat massively, so they are decoded once per distinct value
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    flops: float | None = None
    bytes: float | None = None
    size: float | str | None = None
    mem_size: str | float | None = msgspec.field(default=None, name="mem size")
    direction: str | None = None
    packet_ptr: Int64 | None = None
    seq_num: Int64 | None = None  # MTIA event_record / event_wait: the event's sequence number
    wait_on_stream: Int64 | None = None
    wait_corr: Int64 | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    sync_kind: str | None = msgspec.field(default=None, name="cuda_sync_kind")
    coll_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: float | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: float | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: Int64 | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: str | list[Any] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: Int64 | None = msgspec.field(default=None, name="Seq")
    seq_lower: Int64 | None = msgspec.field(default=None, name="seq")
    name: str | None = None  # metadata events: process/thread name


_LIST = msgspec.json.Decoder()


class RawLists:
    """Decode raw JSON arrays (shape args) once per distinct value; non-arrays read as None."""

    def __init__(self) -> None:
        self._memo: dict[bytes, list[Any] | None] = {}

    def __call__(self, raw: msgspec.Raw | bytes | None) -> list[Any] | None:
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


class _EventFields(msgspec.Struct, gc=False):
    """The fields the ingest reads from a row (complete or instant) event."""

    name: str = ""
    cat: str | None = None
    pid: Int64 | str = 0
    tid: Int64 | str = 0
    ts: TimeUs | None = None
    dur: TimeUs | None = None
    id: Int64 | str | None = None
    args: Args | None = None


class Event(_EventFields, kw_only=True):
    """Any event, whatever its phase: the plain decode (`decode_plain`)."""

    ph: str


class Document(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[Any] | None = None


# The phased decode (`decode`): each event decodes into the struct of its phase, so the
# metadata and flow events (310k of the MTIA training trace's 456k events are metadata) carry
# only the fields the ingest reads of them, and other phases only their name. The phase is the
# struct's class attribute ``ph``, so the reader treats both decodes' events alike.

class Complete(_EventFields, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"


class Instant(Complete, tag="i"):
    ph: ClassVar[str] = "i"


class GlobalInstant(Complete, tag="I"):
    ph: ClassVar[str] = "I"


class MetaArgs(msgspec.Struct, gc=False):
    name: str | None = None  # process or thread name


class Meta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    ph: ClassVar[str] = "M"
    name: str = ""
    pid: Int64 | str = 0
    tid: Int64 | str = 0
    args: MetaArgs | None = None


class FlowStart(msgspec.Struct, gc=False, tag_field="ph", tag="s"):
    ph: ClassVar[str] = "s"
    name: str = ""
    cat: str | None = None
    pid: Int64 | str = 0
    tid: Int64 | str = 0
    ts: TimeUs | None = None
    id: Int64 | str | None = None


class FlowEnd(FlowStart, tag="f"):
    ph: ClassVar[str] = "f"


#: the Trace Event Format's other phases (duration begin/end, counters, async, object,
#: sample, mark, context...): counted and reported, only their names are read
OTHER_PHASES = "BECbnetPONDVvRc()"
_OTHER = tuple(msgspec.defstruct(f"Phase{ord(p)}", [("name", str, "")], gc=False,
                                 tag_field="ph", tag=p, namespace={"ph": p})
               for p in OTHER_PHASES)
#: every struct the phased decode makes, one per phase
PHASED_TYPES: tuple[type, ...] = (Complete, Instant, GlobalInstant, Meta, FlowStart, FlowEnd,
                                  *_OTHER)
PhasedEvent = functools.reduce(operator.or_, PHASED_TYPES)


class PhasedDocument(msgspec.Struct, gc=False):
    traceEvents: list[PhasedEvent]  # type: ignore[valid-type]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[Any] | None = None


_PHASED = msgspec.json.Decoder(PhasedDocument)


class _Tail(msgspec.Struct, gc=False):
    """The end of a file read in pieces (`Pieces`): a key it does not give stays unset."""

    traceEvents: list[PhasedEvent]  # type: ignore[valid-type]
    distributedInfo: dict[str, Any] | None | msgspec.UnsetType = msgspec.UNSET
    deviceProperties: list[Any] | None | msgspec.UnsetType = msgspec.UNSET


_TAIL = msgspec.json.Decoder(_Tail)


def max_bytes() -> int:
    """The per-file read limit: ``MTIA_TRACE_MAX_BYTES`` (bytes, or with K/M/G/T) or the default."""
    return env_size(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)


def env_size(name: str, default: int) -> int:
    """A size limit from environment variable ``name`` (bytes, or with K/M/G/T), else ``default``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    m = _SIZE.match(text)
    if m is None:
        raise UsageError(f"{name}={text}: not a size; give bytes or a number with K, "
                         "M, G or T (e.g. 16G)")
    scale = 1024 ** " kmgt".index((m.group(2) or " ").lower())
    return max(1, int(float(m.group(1)) * scale))


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _too_big(path: Path, what: str, limit: int) -> TraceFormatError:
    return TraceFormatError(
        f"{path}: {what} exceeds the {_size(limit)} read limit; if the trace is genuine, raise "
        f"it with {MAX_BYTES_ENV}=<size> (e.g. {MAX_BYTES_ENV}={max(2, 2 * limit // 2**30)}G)")


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR,
                                                                           "a directory"))


def not_regular(path: Path) -> str | None:
    """Why ``path`` cannot be a trace file (a FIFO, a device, a broken link...), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    return "is " + next((k for test, k in _KINDS if test(mode)), "not a regular file")


def _open_regular(path: Path) -> int:
    """A file descriptor on ``path``, refusing anything but a regular file (without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
        raise TraceFormatError(f"{path}: is {kind}, not a trace file; pass a .json or .json.gz "
                               "file (or a folder of them)")
    return fd


def _json_blocks(path: Path, digest: Any = None) -> Iterator[bytes]:
    """The file's JSON text in blocks of up to `_BLOCK` bytes, gunzipped as it is read when it
    starts with the gzip magic (every member; padding after the last is ignored, as gzip(1)
    does). Refused in one line past `max_bytes` (the file, or its text as it is produced), on
    corrupt or truncated gzip, or when unreadable. ``digest`` (a hashlib object) takes the
    file's bytes as stored."""
    limit = max_bytes()
    fd = _open_regular(path)
    try:
        if (stored := os.fstat(fd).st_size) > limit:
            raise _too_big(path, f"the file ({_size(stored)})", limit)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            blocks = iter(functools.partial(fh.read, _BLOCK), b"")

            def read() -> bytes:
                block = next(blocks, b"")
                if digest is not None:
                    digest.update(block)
                return block

            data = read()
            gz = data[:2] == _GZIP
            d = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
            size = 0
            while True:
                if d is None:
                    out, data = data, b""
                else:
                    out = d.decompress(data, _BLOCK)
                    data = d.unconsumed_tail
                size += len(out)
                if size > limit:
                    raise _too_big(path, "its gunzipped JSON" if gz else "the file", limit)
                if out:
                    yield out
                if d is not None and d.eof:  # a gzip member ends: another may follow
                    rest = d.unused_data
                    while len(rest) < 2 and (more := read()):
                        rest += more
                    if rest[:2] != _GZIP:
                        break
                    d, data = zlib.decompressobj(16 + zlib.MAX_WBITS), rest
                elif not data:
                    data = read()
                    if not data and not out:
                        break
            if d is not None and not d.eof:
                raise EOFError("stream ends before the end-of-stream marker")
            while digest is not None and read():  # what follows the last member is hashed too
                pass
    except (EOFError, zlib.error) as exc:
        raise TraceFormatError(
            f"{path}: corrupt or truncated gzip ({exc}); re-export or re-download the trace"
        ) from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror}); check the path") from None
    finally:
        os.close(fd)


def read_bytes(path: Path, digest: Any = None) -> bytes | bytearray:
    """The file's JSON bytes, gunzipped when it starts with the gzip magic (`_json_blocks`:
    bounded, and ``digest`` takes the file as stored)."""
    out = bytearray()
    for block in _json_blocks(path, digest):
        out += block.lstrip(_WHITESPACE) if not out else block  # leading whitespace: not kept
    return out


def json_bytes(path: Path) -> int:
    """The file's JSON size: its own size, or for gzip the size its trailer records (0 where
    it cannot be read: the read itself words why)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return 0  # never opened here (a FIFO would block): the read refuses it
        size = st.st_size
        with open(path, "rb") as fh:
            if fh.read(2) != _GZIP or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            # ISIZE is the last member's size mod 2**32: never below the compressed size here
            return max(size, struct.unpack("<I", fh.read(4))[0])
    except OSError:
        return 0


class NotStreamable(Exception):
    """The file is not read in pieces (`Pieces`): it is read whole, where every error is worded."""


#: Gunzipped JSON decoded at a time by `Pieces` (whole events: a piece ends between two): an
#: eighth of the file's JSON, between these two sizes. A piece's decoded events take about 3-4x
#: its JSON, the table about 1x the file's, so a piece of an eighth stays under half the table
#: beside it; below 1 MiB, pieces only add per-piece work, and above 4 MiB, memory.
PIECE_BYTES = 4 * 2**20
PIECE_MIN_BYTES = 2**20
PIECES_PER_FILE = 8
_TRACE_EVENTS = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
#: between two events of the array: the end of one, JSON whitespace, a comma, the next one
_BETWEEN = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
_EVENTS = msgspec.json.Decoder(list[PhasedEvent])  # type: ignore[valid-type]
_DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


#: Called with the bytes of JSON read so far from the file being read (a terminal's progress
#: line sets it; readers in other processes never call it).
on_bytes_read: Callable[[int], None] | None = None


class Pieces:
    """A trace file's events decoded a piece at a time (the phased decode, `decode`), so neither
    its whole JSON text nor all of its decoded events are held at once: iterate for lists of
    events in file order; then ``size`` (bytes of JSON), ``sha256`` (of the file as stored),
    ``distributedInfo`` and ``deviceProperties`` are set.

    The text is gunzipped as it is read and cut only between two events of the top-level
    ``traceEvents`` array (``}``, whitespace, a comma, ``{``); each piece, the part before the
    array (with an empty one) and the part after must each decode. A cut inside a string leaves
    an unterminated one, so it cannot decode. Anything else (bad or unusual JSON, a phase
    outside the Trace Event Format, a second traceEvents array) raises `NotStreamable` while
    iterating, and the reader reads the file whole (`read_bytes`, `decode`), which words every
    error as before. The text comes from the whole read's own reader (`_json_blocks`), so a
    file past the read limit, corrupt gzip or an unreadable file are refused in its words."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: JSON decoded at a time (see `PIECE_BYTES`)
        self.piece_bytes = min(PIECE_BYTES, max(PIECE_MIN_BYTES,
                                                json_bytes(path) // PIECES_PER_FILE))
        self.size = 0
        self.sha256 = ""
        self.distributedInfo: dict[str, Any] | None = None
        self.deviceProperties: list[Any] | None = None
        self._rest = bytearray()  # what follows the last piece `_take` cut

    def _text(self) -> Iterator[bytes]:
        digest = hashlib.sha256()
        for block in _json_blocks(self.path, digest):
            self.size += len(block)
            if on_bytes_read is not None:
                on_bytes_read(self.size)
            yield block
        self.sha256 = digest.hexdigest()

    def _take(self, buf: bytearray, cut: re.Match[bytes]) -> list[Any]:
        """The events of ``buf`` (``[``, then whole events of the array) up to ``cut``
        (`_cut`), decoded where they lie: the comma there becomes the piece's ``]``. The
        events' raw shape args are views of ``buf``, which is never resized again: what follows
        is copied out, starting with a ``[`` in place of the comma, as `_rest`."""
        comma = buf.index(b",", cut.start(), cut.end())
        buf[comma] = ord("]")
        self._rest = bytearray(b"[") + memoryview(buf)[comma + 1:]  # one copy
        try:
            return _EVENTS.decode(memoryview(buf)[:comma + 1])  # type: ignore[no-any-return]
        except _DECODE_ERRORS:
            raise NotStreamable from None

    def __iter__(self) -> Iterator[list[Any]]:
        text = self._text()
        buf = bytearray()
        start = None
        for block in text:  # the part before the array
            # the key is searched for in the new text (and the end of the old, where it may begin)
            lo = max(0, len(buf) - 64)
            buf += block.lstrip(_WHITESPACE) if not buf else block  # leading whitespace: not kept
            start = _TRACE_EVENTS.search(buf, lo)
            if start is not None:
                break
        if start is None:
            raise NotStreamable
        try:
            head = _PHASED.decode(bytes(buf[:start.end() - 1]) + b"[]}")
        except _DECODE_ERRORS:
            raise NotStreamable from None
        del buf[:start.end() - 1]  # the buffer starts at the array's "["
        cut_any = False
        for block in itertools.chain([b""], text):  # what the head's blocks held first
            buf += block
            while len(buf) >= self.piece_bytes and (
                    cut := _cut(buf, self.piece_bytes)) is not None:
                cut_any = True
                # yielded straight from the call: this frame keeps no reference to the events
                yield self._take(buf, cut)
                buf, self._rest = self._rest, bytearray()  # the only reference: for the tail
        # the last events, the array's end and the part after it: a document of its own. A
        # key given twice counts once, the last time, as in the whole decode; but a second
        # traceEvents array after pieces were cut would replace only the last piece's events
        if cut_any and b'"traceEvents"' in buf:
            raise NotStreamable
        try:
            tail = _TAIL.decode(b'{"traceEvents":' + buf)
        except _DECODE_ERRORS:
            raise NotStreamable from None
        for key in ("distributedInfo", "deviceProperties"):
            after = getattr(tail, key)
            setattr(self, key, getattr(head, key) if after is msgspec.UNSET else after)
        del buf
        yield _events(tail)


def _events(doc: _Tail) -> list[Any]:
    """The events a document held (it keeps none)."""
    events, doc.traceEvents = doc.traceEvents, []
    return events  # type: ignore[no-any-return]


def _cut(buf: bytearray, size: int) -> re.Match[bytes] | None:
    """Where to end a piece of about ``size`` bytes (`_BETWEEN`): the last place before
    ``size`` that may lie between two events, else the first after it, else None."""
    for lo in (max(0, size - 2**16), 0):
        found = None
        for found in _BETWEEN.finditer(buf, lo, size):
            pass
        if found is not None:
            return found
    return _BETWEEN.search(buf, size)


def decode(path: Path, raw: bytes | bytearray) -> PhasedDocument | Document:
    """The phased decode; input it refuses (a phase outside the Trace Event Format, a bad
    value, bad JSON) is decoded plainly (`decode_plain`), which accepts any phase and words
    the errors. The reader checks the step numbers (`check_steps`) on the names it collects
    anyway."""
    try:
        return _PHASED.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return decode_plain(path, raw)


def decode_plain(path: Path, raw: bytes | bytearray) -> Document:
    """Decode every event into one struct (`Event`) and check the top level; field-level type
    errors name the JSON path."""
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
    except RecursionError:
        raise TraceFormatError(f"{path}: JSON nested too deeply to be a profiler trace (over "
                               f"{sys.getrecursionlimit()} levels); {_HINT}") from None
    return doc


def check_steps(path: Path, names: Iterable[str]) -> None:
    """Refuse ``ProfilerStep#N`` with N past int32 (steps are an int32 column); ``names``: the
    distinct event names of the file (names repeat: each is tested once)."""
    for name in (n for n in names if n.startswith("ProfilerStep#")):
        digits = name[len("ProfilerStep#"):]
        if digits.isdigit() and (len(digits) > 10 or int(digits) > MAX_STEP):
            raise TraceFormatError(f"{path}: event {name[:40]!r} numbers a step past {MAX_STEP}; "
                                   "fix the step annotation or re-export the trace")
