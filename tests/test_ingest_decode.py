"""Decoding: the phased decode reads what the plain one does, and the ingest keeps an event's
args exactly when a later step may read one of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mtia_trace.errors import TraceFormatError
from mtia_trace.ingest import kineto, load
from mtia_trace.ingest.decode import (
    OTHER_PHASES,
    Args,
    Complete,
    Meta,
    NotStreamable,
    decode,
    decode_plain,
)
from mtia_trace.ingest.kineto import _LATE_FIELDS, _none_late


def test_no_args_set_is_spent() -> None:
    assert _none_late(Args())


@pytest.mark.parametrize("field", _LATE_FIELDS)
def test_each_late_arg_keeps_the_args(field: str) -> None:
    assert not _none_late(msgspec.structs.replace(Args(), **{field: 1}))


@pytest.mark.parametrize("field", sorted(set(Args.__struct_fields__) - set(_LATE_FIELDS)))
def test_args_read_into_columns_do_not_keep_them(field: str) -> None:
    assert _none_late(msgspec.structs.replace(Args(), **{field: 1}))


def _trace(tmp_path: Path, extra: list[dict]) -> Path:
    ev = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,
           "ts": 0, "dur": 100},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10,
           "dur": 20, "args": {"External id": 4, "Input Dims": [[8, 8], [8, 8]],
                               "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 12, "dur": 5, "args": {"External id": 4}},
          {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 1, "tid": 1, "ts": 12},
          {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 8,
           "args": {"device": 0, "stream": 7}},
          {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 20,
           "bp": "e"},
          {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": 40,
           "s": "t"},
          {"ph": "I", "name": "global", "pid": 1, "tid": 1, "ts": 41}, *extra]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


_OTHERS = [{"ph": p, "name": f"other {p}", "pid": 1, "tid": 1, "ts": 50, "cat": "x"}
           for p in OTHER_PHASES]


@pytest.mark.parametrize("unknown", [False, True], ids=["phased", "plain fallback"])
def test_every_phase_is_counted_and_only_complete_and_instant_are_rows(
        tmp_path: Path, unknown: bool) -> None:
    extra = _OTHERS + ([{"ph": "Z", "name": "z", "ts": 1}] if unknown else [])
    path = _trace(tmp_path, extra)
    doc = decode(path, path.read_bytes())
    assert (type(doc.traceEvents[0]) is Meta) is not unknown  # Z sends it to the plain decode
    tr = load(path)
    assert tr.events.num_rows == 6
    counts = {"M": 1, "X": 4, "s": 1, "f": 1, "i": 1, "I": 1, **dict.fromkeys(OTHER_PHASES, 1)}
    if unknown:
        counts["Z"] = 1
    assert tr.files[0].phase_counts == counts
    (warning,) = [w for w in tr.warnings if "are not rows" in w]
    assert all(f"'{p}': 1" in warning for p in [*OTHER_PHASES, *("Z" if unknown else "")])


def test_phased_and_plain_decodes_give_the_same_table(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = _trace(tmp_path, _OTHERS)
    phased = load(path)
    assert type(decode(path, path.read_bytes()).traceEvents[1]) is Complete
    monkeypatch.setattr(kineto, "decode", decode_plain)
    monkeypatch.setattr(kineto.Pieces, "__iter__", _refuse)  # read whole, so decoded plainly
    plain = load(path)
    assert phased.events.equals(plain.events)
    assert phased.warnings == plain.warnings
    assert phased.files[0].phase_counts == plain.files[0].phase_counts
    assert phased.files[0].thread_names == plain.files[0].thread_names


def _refuse(self: Any) -> Any:
    raise NotStreamable


@pytest.mark.parametrize("bad, words", [
    ({"ph": "X", "name": "a", "ts": "soon", "dur": 1}, "Expected `float | null`, got `str`"),
    ({"ph": 3, "name": "a", "ts": 1}, "Expected `str`, got `int`"),
    ({"name": "a", "ts": 1}, "missing required field `ph`"),
])
def test_bad_events_are_refused_in_the_plain_decode_s_words(tmp_path: Path, bad: dict,
                                                            words: str) -> None:
    path = _trace(tmp_path, [bad])
    with pytest.raises(TraceFormatError, match="malformed trace event") as err:
        load(path)
    assert words in str(err.value) and "$.traceEvents[9]" in str(err.value)
