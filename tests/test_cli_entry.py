"""The entry point: `--version`, exit codes returned by `main`, and lazy command registration."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import mtia_trace
from mtia_trace import cli
from mtia_trace.cli import COMMANDS, load_command

CLI_DIR = Path(cli.__file__).parent
#: Libraries that only some commands need; `--help`, `--version` and `hw list` must not load them.
HEAVY = ("pandas", "matplotlib", "duckdb", "pyarrow", "analyzers", "mtia_trace.ingest")


def test_version_prints_the_package_version(cli) -> None:
    code, out, err = cli("--version")
    assert (code, out, err) == (0, f"mtia-trace {mtia_trace.__version__}\n", "")


def test_main_returns_exit_codes(cli) -> None:
    assert cli("--help")[0] == 0
    code, _, err = cli("no-such-command")
    assert code == 2 and "No such command 'no-such-command'" in err


def test_python_m_exits_with_the_commands_code(tmp_path: Path) -> None:
    """`python -m mtia_trace` passes `main`'s exit code to the shell, like the console script."""
    missing = tmp_path / "missing.json"
    r = subprocess.run([sys.executable, "-m", "mtia_trace", "inspect", str(missing)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "missing.json" in r.stderr
    ok = subprocess.run([sys.executable, "-m", "mtia_trace", "--version"],
                        capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0


def test_help_lists_every_command_with_its_summary(cli) -> None:
    code, out, _ = cli("--help")
    rows = out.split("Commands:\n", 1)[1].splitlines()
    # a row starts with its name; a long summary wraps onto indented continuation lines
    listed = [line.split()[0] for line in rows if line[:2] == "  " and line[2:3] != " "]
    assert code == 0 and listed == [c[0] for c in COMMANDS]


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_summary_is_the_first_paragraph_of_the_command_help(name: str) -> None:
    summary = next(c[3] for c in COMMANDS if c[0] == name)
    cmd = load_command(name)
    first = inspect.cleandoc(cmd.help or "").split("\n\n")[0]
    assert summary == first, f"update the summary of `{name}` in mtia_trace.cli.COMMANDS"


def test_every_command_module_is_registered() -> None:
    modules = {p.stem for p in CLI_DIR.glob("*_cmd.py")}
    assert modules == {c[1] for c in COMMANDS}


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["hw", "list"]])
def test_light_commands_do_not_import_heavy_libraries(argv: list[str]) -> None:
    code = ("import sys\nfrom mtia_trace.cli import main\nrc = main(sys.argv[1:])\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\nsys.exit(rc)\n")
    root = Path(mtia_trace.__file__).parent.parent
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       cwd=root, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"
