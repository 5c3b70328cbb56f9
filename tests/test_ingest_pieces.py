"""The ingest decodes a file a piece at a time (`decode.Pieces`): the pieces give exactly the
table, facts and warnings of a whole read, and input they cannot read is read whole."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest import decode, kineto, load
from mtia_trace.ingest.kineto import _Columns


def _events(n: int = 600) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 10.0 * n}]
    for i in range(n):
        t = 10.0 * i
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
             "dur": 8, "args": {"External id": i, "Input Dims": [[8, i % 5 + 1], [i % 5 + 1, 8]],
                                "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 1, "dur": 2, "args": {"External id": i, "correlation": i}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": t + 1},
            {"ph": "X", "cat": "kernel", "name": f"gemm_{i % 7}", "pid": 0, "tid": 7,
             "ts": t + 4, "dur": 3, "args": {"device": 0, "stream": 7}},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 0, "tid": 7, "ts": t + 4,
             "bp": "e"},
            {"ph": "C", "name": "counter", "pid": 1, "tid": 1, "ts": t, "args": {"v": i}},
        ]
    return ev


_DI = {"rank": 3, "world_size": 4}
_DP = [{"id": 0, "name": "NVIDIA A100"}]


def _pretty(ev: list[dict[str, Any]]) -> str:
    """Laid out as Kineto writes it: keys first, then one event after another over lines."""
    body = ",\n".join("  " + json.dumps(e, indent=1) for e in ev)
    return ('{\n  "schemaVersion": 1,\n  "deviceProperties": ' + json.dumps(_DP)
            + ',\n  "distributedInfo": ' + json.dumps(_DI) + ',\n  "traceEvents": [\n' + body
            + '\n  ],\n  "traceName": "t", "displayTimeUnit": "ms"\n}')


def _tricky_names() -> list[dict[str, Any]]:
    ev = _events()
    ev[300]["name"] = "a},{b"          # a cut's pattern inside a string
    ev[900]["name"] = 'q"},\n  {"x'
    return ev


#: files the pieces read: (name, bytes)
READ: dict[str, Callable[[], bytes]] = {
    "kineto layout": lambda: _pretty(_events()).encode(),
    "kineto layout, gzip": lambda: gzip.compress(_pretty(_events()).encode()),
    "compact": lambda: json.dumps({"traceEvents": _events(), "distributedInfo": _DI},
                                  separators=(",", ":")).encode(),
    "keys after the events": lambda: json.dumps(
        {"traceEvents": _events(), "deviceProperties": _DP, "distributedInfo": _DI}).encode(),
    "cut pattern in names": lambda: json.dumps({"traceEvents": _tricky_names()}).encode(),
    "two gzip members": lambda: (lambda t: gzip.compress(t[:40_000]) + gzip.compress(t[40_000:]))(
        _pretty(_events()).encode()),
    "padding after gzip": lambda: gzip.compress(_pretty(_events()).encode()) + b"\0" * 64,
    "no events": lambda: b'{"distributedInfo": {"rank": 0}, "traceEvents": [ ]}',
    # the last time a key is given counts, as in the whole decode
    "key given twice": lambda: (json.dumps({"distributedInfo": {"rank": 1}})[:-1]
                                + ', "traceEvents": ' + json.dumps(_events())
                                + ', "distributedInfo": {"rank": 2}}').encode(),
    # one piece (nothing cut): the array given last counts, as in the whole decode
    "traceEvents twice, small": lambda: (b'{"traceEvents": ' + json.dumps(_events(3)).encode()
                                         + b', "traceEvents": ' + json.dumps(_events(5)).encode()
                                         + b"}"),
    "key given null after": lambda: (json.dumps({"distributedInfo": {"rank": 1}})[:-1]
                                     + ', "traceEvents": ' + json.dumps(_events())
                                     + ', "distributedInfo": null}').encode(),
}

#: files the pieces refuse, read whole: (name, bytes)
WHOLE: dict[str, Callable[[], bytes]] = {
    "form feed between events": lambda: _pretty(_events()).replace("},\n", "}\f,\n", 1).encode(),
    "trailing comma": lambda: json.dumps({"traceEvents": _events()})[:-2].encode() + b",]}",
    "a phase outside the format": lambda: json.dumps(
        {"traceEvents": [*_events(), {"ph": "Z", "name": "z", "ts": 1}]}).encode(),
    "traceEvents twice": lambda: (b'{"traceEvents": ' + json.dumps(_events()[:900]).encode()
                                  + b', "traceEvents": ' + json.dumps(_events()[900:]).encode()
                                  + b"}"),
    "events under another key first": lambda: (
        b'{"meta": {"traceEvents": [1]}, "traceEvents": ' + json.dumps(_events()).encode() + b"}"),
    "top level array": lambda: json.dumps(_events()).encode(),
    "a bad timestamp": lambda: json.dumps(
        {"traceEvents": [*_events(), {"ph": "X", "name": "a", "ts": "soon", "dur": 1}]}).encode(),
}


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pieces of about 16 KB (the files here are ~200-400 KB); the events per piece decoded."""
    monkeypatch.setattr(decode, "PIECE_BYTES", 16 * 2**10)
    sizes: list[int] = []
    add = _Columns.add
    monkeypatch.setattr(_Columns, "add", lambda self, ev: (sizes.append(len(ev)), add(self, ev))[1])
    return sizes


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, *, whole: bool) -> tuple[Any, bool]:
    """(what the ingest gives or the error it words, whether the file was read whole)."""
    read_whole: list[Path] = []
    real = kineto.read_bytes
    with monkeypatch.context() as m:
        m.setattr(kineto, "read_bytes", lambda p, d=None: (read_whole.append(p), real(p, d))[1])
        if whole:
            def refuse(self: decode.Pieces) -> Any:
                raise decode.NotStreamable
            m.setattr(decode.Pieces, "__iter__", refuse)
        try:
            tr = load(path)
        except TraceFormatError as exc:
            return str(exc), bool(read_whole)
    facts = [{k: v for k, v in vars(f).items()} for f in tr.files]
    return (tr.events, facts, tr.warnings, tr.counts), bool(read_whole)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a[0].equals(b[0]) and a[0].schema.metadata == b[0].schema.metadata
    assert a[1:] == b[1:]


@pytest.mark.parametrize("case", sorted(READ))
def test_pieces_give_what_a_whole_read_gives(case: str, tmp_path: Path, small_pieces: list[int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ("t_rank3.json.gz" if "gzip" in case else "t_rank3.json")
    path.write_bytes(READ[case]())
    got, fell_back = _read(path, monkeypatch, whole=False)
    assert not fell_back
    if case not in ("no events", "traceEvents twice, small"):  # several pieces, none whole
        assert len(small_pieces) > 3 and max(small_pieces) < sum(small_pieces) / 3
    small_pieces.clear()
    want, fell_back = _read(path, monkeypatch, whole=True)
    assert fell_back and len(small_pieces) == 1
    _same(got, want)


@pytest.mark.parametrize("case", sorted(WHOLE))
def test_input_the_pieces_refuse_is_read_whole(case: str, tmp_path: Path, small_pieces: list[int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ("t.json.gz" if "gzip" in case else "t.json")
    path.write_bytes(WHOLE[case]())
    got, fell_back = _read(path, monkeypatch, whole=False)
    assert fell_back
    want, _ = _read(path, monkeypatch, whole=True)
    _same(got, want)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_file_is_read_in_about_eight_pieces(name: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A piece is an eighth of the file's JSON (a gzip file's from its trailer), so a piece's
    decoded events stay a fraction of the table whatever the file's size."""
    monkeypatch.setattr(decode, "PIECE_MIN_BYTES", 2**10)
    monkeypatch.setattr(decode, "PIECE_BYTES", 2**30)
    text = _pretty(_events(2000)).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    pieces = decode.Pieces(path)
    assert pieces.piece_bytes == len(text) // 8
    sizes = [len(ev) for ev in pieces]
    # eight pieces and the tail: the events after the last cut, under a piece's worth
    assert len(sizes) == 9 and max(sizes) < sum(sizes) / 6 and sizes[-1] <= max(sizes)


def test_the_file_facts_are_those_of_the_file(tmp_path: Path, small_pieces: list[int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    text = _pretty(_events()).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text) + b"\0" * 10)
    (f,) = load(path).files
    assert f.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert f.bytes == len(text) and f.rank == 3
    assert f.distributed_info == _DI and f.device_properties == _DP


def test_a_device_row_runs_where_its_args_say(tmp_path: Path) -> None:
    """args.device and args.stream place a kernel even when no later step reads its args (they
    are read before the spent args are dropped)."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 1, "dur": 2,
           "args": {"device": 3, "stream": 9, "correlation": 5}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    t = load(path).events.to_pydict()
    k = t["name"].index("k")
    assert (t["device"][k], t["stream"][k], t["track"][k]) == (3, 9, "dev:3:9")


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
def test_a_file_past_the_read_limit_is_refused_once_without_a_whole_read(
        gz: bool, tmp_path: Path, small_pieces: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    text = _pretty(_events()).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    limit = len(text) // 2 if gz else len(text) - 1
    monkeypatch.setenv(decode.MAX_BYTES_ENV, str(limit))
    got, fell_back = _read(path, monkeypatch, whole=False)
    assert not fell_back and isinstance(got, str)
    what = "its gunzipped JSON" if gz else f"the file ({len(text) / 2**20:.1f} MiB)"
    assert f"{what} exceeds the" in got and decode.MAX_BYTES_ENV in got
    want, _ = _read(path, monkeypatch, whole=True)
    assert got == want


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_bad_gzip_is_refused_in_the_whole_read_s_words_without_one(
        damage: str, tmp_path: Path, small_pieces: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(gzip.compress(_pretty(_events()).encode()))
    if damage == "truncated":
        data = data[:-300]
    else:
        data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    got, fell_back = _read(path, monkeypatch, whole=False)
    assert not fell_back and isinstance(got, str) and "corrupt or truncated gzip" in got
    want, _ = _read(path, monkeypatch, whole=True)
    assert got == want
