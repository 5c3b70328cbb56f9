"""Bad input through the CLI entry point: exit code 2, one line naming the file, no traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mtia_trace.cli import main


def _ev(**kw: object) -> dict:
    base = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0}
    base.update(kw)
    return base


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    bad_gz = tmp / "corrupt.json.gz"
    bad_gz.write_bytes(gzip.compress(json.dumps({"traceEvents": [_ev()]}).encode())[:30])
    garbage_gz = tmp / "garbage.json.gz"
    garbage_gz.write_bytes(b"\x1f\x8b" + b"not really gzip data" * 4)
    (tmp / "empty_dir").mkdir()
    dup = tmp / "dup"
    dup.mkdir()
    for name in ("a.json", "b.json"):
        _write(dup / name, {"distributedInfo": {"rank": 3}, "traceEvents": [_ev()]})
    not_json = tmp / "notjson.json"
    not_json.write_text("this is not json {")
    return {
        "not JSON": (not_json, "not valid JSON"),
        "truncated gzip": (bad_gz, "corrupt or truncated gzip"),
        "corrupt gzip": (garbage_gz, "corrupt or truncated gzip"),
        "no traceEvents": (_write(tmp / "noev.json", {"foo": []}), 'no "traceEvents"'),
        "list top level": (_write(tmp / "list.json", [_ev()]), "not a JSON object"),
        "empty trace": (_write(tmp / "empty.json", {"traceEvents": []}), "empty"),
        "only metadata": (_write(tmp / "meta.json", {"traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "x"}}]}), "empty"),
        "missing ph": (_write(tmp / "noph.json", {"traceEvents": [{"name": "a", "ts": 1}]}), "`ph`"),
        "missing ts": (_write(tmp / "nots.json", {"traceEvents": [_ev(ts=None)]}), '"ts"'),
        "missing dur": (_write(tmp / "nodur.json", {"traceEvents": [_ev(dur=None)]}), '"dur"'),
        "string dur": (_write(tmp / "strdur.json", {"traceEvents": [_ev(dur="5")]}), "dur"),
        "string args": (_write(tmp / "strargs.json", {"traceEvents": [_ev(args="x")]}), "args"),
        "negative dur": (_write(tmp / "neg.json", {"traceEvents": [_ev(), _ev(dur=-3.0)]}),
                         "negative durations"),
        "empty directory": (tmp / "empty_dir", "no trace files"),
        "duplicate ranks": (dup, "rank 3 also comes from"),
        "missing path": (tmp / "nope.json", "no such file"),
    }


IDS = ["not JSON", "truncated gzip", "corrupt gzip", "no traceEvents", "list top level",
       "empty trace", "only metadata", "missing ph", "missing ts", "missing dur", "string dur",
       "string args", "negative dur", "empty directory", "duplicate ranks", "missing path"]


@pytest.mark.parametrize("case", IDS)
def test_bad_input_is_one_line_exit_2(case: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, fragment = _cases(tmp_path)[case]
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"mtia-trace: error: {path}") or (
        case == "duplicate ranks" and str(path) in lines[0])
    assert fragment in lines[0]
    assert "Traceback" not in err
