"""`mtia-trace hw list / show`: every number printed with its source; bad input is one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mtia_trace.cli import hw_cmd
from mtia_trace.errors import HardwareSpecError
from replay.hardware import load_spec


def test_hw_list_names_every_bundled_spec() -> None:
    r = CliRunner().invoke(hw_cmd.app, ["list"])
    assert r.exit_code == 0
    for name in ("mtia300", "h100", "h200", "mtia200"):
        assert name in r.output


def test_hw_show_prints_every_key_with_confidence() -> None:
    r = CliRunner().invoke(hw_cmd.app, ["show", "mtia300", "--set", "comm.message_engines=8"])
    assert r.exit_code == 0, r.output
    spec = load_spec("mtia300")
    lines = r.output.splitlines()
    for key in spec.keys():
        row = next(ln for ln in lines if ln.startswith(key + " "))
        want = "override" if key == "comm.message_engines" else spec.confidence(key)
        assert want in row
    assert "0.5%" in r.output  # offloaded overlap slowdown


def test_hw_show_bad_set_raises_spec_error() -> None:
    r = CliRunner().invoke(hw_cmd.app, ["show", "mtia300", "--set", "comm.message_engines=x"])
    assert isinstance(r.exception, HardwareSpecError)


def test_hw_errors_through_main(capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("mtia_trace.cli")
    assert cli.main(["hw", "show", "tpu9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtia-trace: error: tpu9: no such hardware spec") and "\n" not in err
