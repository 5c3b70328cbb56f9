"""CLI conventions every command follows: Ctrl-C in one line, help without Python types, one
spelling per option (old spellings still accepted, not listed)."""

from __future__ import annotations

import re

import pytest

from mtia_trace.cli import COMMANDS, INTERRUPTED, load_command
from tests.conftest import SAMPLES, only_run

TRACE = SAMPLES / "synth" / "dcnv2_infer_1rank"


def _interrupt(*_a: object, **_k: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv,target", [
    (["replay", str(TRACE), "--hw", "h100", "-q"], "mtia_trace.cli.replay_cmd.replay_trace"),
    (["inspect", str(TRACE)], "mtia_trace.cli.inspect_cmd.load"),
    (["hw", "list"], "mtia_trace.cli.hw_cmd.list_specs"),
])
def test_ctrl_c_exits_130_with_one_line(argv: list[str], target: str, cli,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    load_command(argv[0])  # the command's module is imported, so its names can be patched
    monkeypatch.setattr(target, _interrupt)
    code, out, err = cli(*argv)
    assert code == 130
    assert err == INTERRUPTED + "\n" and "Traceback" not in out + err


#: A Python type in a help row: <str>, <int range>, <list[str]>, <path>, ...
PY_TYPE = re.compile(r"<(?:list\[|int|float|str|path|Path|bool)[^>]*>")


def _help(name: str) -> list[tuple[str, str]]:
    """(command path, --help text) of a command and its sub-commands."""
    cmd = load_command(name)
    out = []

    def walk(path: str, c: object) -> None:
        ctx = c.context_class(c, info_name=path, terminal_width=100)  # type: ignore[attr-defined]
        out.append((path, c.get_help(ctx)))  # type: ignore[attr-defined]
        for sub_name, sub in getattr(c, "commands", {}).items():
            walk(f"{path} {sub_name}", sub)

    walk(name, cmd)
    return out


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_help_shows_no_python_types(name: str) -> None:
    for path, text in _help(name):
        found = PY_TYPE.findall(text)
        assert not found, f"{path}: {found}"


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_one_spelling_per_option(name: str) -> None:
    for path, text in _help(name):
        assert "--out " not in text and "--out," not in text, path  # -o/--output everywhere
        assert not re.search(r"-f, --format|--format, -f", text), path  # -f is query's --file


def test_old_spellings_still_work(cli, tmp_path) -> None:
    # --out (replay) and -f (report) and --format markdown (query) are hidden aliases
    assert cli("replay", TRACE, "--hw", "h100", "--out", tmp_path / "r", "-q")[0] == 0
    code, out, _ = cli("report", tmp_path / "r", "-f", "json")
    assert code == 0 and out.lstrip().startswith("{")
    code, old, _ = cli("query", tmp_path / "r", "SELECT 1 AS a", "--format", "markdown")
    code2, new, _ = cli("query", tmp_path / "r", "SELECT 1 AS a", "--format", "md")
    assert code == code2 == 0 and old == new == "| a |\n|---:|\n| 1 |\n"
    assert cli("replay", TRACE, "--hw", "h100", "-o", tmp_path / "r2", "-q")[0] == 0
    assert (only_run(tmp_path / "r2") / "run.json").is_file()


def test_unknown_format_is_a_usage_error(cli, tmp_path) -> None:
    code, _, err = cli("query", SAMPLES, "SELECT 1", "--format", "xml")
    assert code == 2 and "'xml' is not one of table, csv, json, parquet, md" in err



def test_command_list_shows_every_summary_whole(cli) -> None:
    code, out, _ = cli("--help")
    assert code == 0
    listing = " ".join(out.split("Commands:", 1)[1].split())
    for name, _, _, summary in COMMANDS:
        assert " ".join(summary.split()) in listing, name  # wrapped, never cut
