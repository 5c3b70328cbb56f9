"""The docs cannot drift: every command and option has help text and is in docs/cli.md, the
generated pages are current, the quickstart's shell blocks run, and the SQL cookbook's queries run."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _generate():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _generate()
COMMANDS = gen.cli_commands()


def _section(text: str, name: str) -> str:
    m = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"docs/cli.md has no section for `{name}`"
    return m.group(1)


@pytest.mark.parametrize("name,cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_command_has_help_and_is_in_cli_reference(name: str, cmd: object) -> None:
    assert (getattr(cmd, "help", None) or "").strip(), f"`{name}` has no help text"
    section = _section((DOCS / "cli.md").read_text(encoding="utf-8"), name)
    for param in cmd.params:  # type: ignore[attr-defined]
        if param.name == "help" or getattr(param, "hidden", False):  # old spellings: listed once
            continue
        label = param.opts[0] if param.param_type_name == "option" else param.name
        assert (getattr(param, "help", None) or "").strip(), f"`{name}` {label} has no help text"
        for opt in getattr(param, "opts", []):
            if param.param_type_name == "option":
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", section), \
                    f"`{name}` option {opt} is missing from docs/cli.md"
        if param.param_type_name == "argument":
            assert (param.metavar or param.name) in section or param.name in section, \
                f"`{name}` argument {param.name} is missing from docs/cli.md"


def test_every_registered_command_is_walked() -> None:
    names = {n for n, _ in COMMANDS}
    for expected in ("mtia-trace replay", "mtia-trace hw", "mtia-trace hw show", "mtia-trace hw list"):
        assert expected in names


def test_generated_docs_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    rc = gen.main(["--check"])
    assert rc == 0, capsys.readouterr().err


def test_check_detects_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in gen.GENERATED:  # README.md is ../README.md beside docs/
        shutil.copy(DOCS / name, docs / name)
    monkeypatch.setattr(gen, "DOCS", docs)
    assert gen.main(["--check"]) == 0
    (docs / "sql.md").write_text("stale\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    # README's validation table is generated too: a figure edited by hand is stale
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace("| the same |", "| x |", 1),
                      encoding="utf-8")
    assert gen.main(["--check"]) == 1


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    text = path.read_text(encoding="utf-8")
    return [(m.group(1).strip(), m.group(2))
            for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    return env


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory holding the bundled samples in which every ```sh block of the
    quickstart ran, in order (the ```sh install block, venv + pip, is what CI itself runs
    before the tests; it is only checked for the editable install)."""
    blocks = _blocks(DOCS / "quickstart.md")
    install = [b for info, b in blocks if info == "sh install"]
    assert len(install) == 1 and "pip install -e" in install[0]
    runnable = [b for info, b in blocks if info == "sh"]
    assert len(runnable) >= 4
    cwd = tmp_path_factory.mktemp("quickstart")
    shutil.copytree(ROOT / "sample_traces", cwd / "sample_traces")
    for body in runnable:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=cwd,
                              env=_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"quickstart block failed:\n{body}\n{proc.stdout}\n{proc.stderr}"
    return cwd


def test_quickstart_shell_blocks_run(quickstart: Path) -> None:
    assert (quickstart / "report.html").stat().st_size > 10_000
    assert sorted(p.name for p in (quickstart / "runs" / "quick").iterdir()) == [
        "dcnv2_train_2rank-h100", "dcnv2_train_2rank-mtia300"]


def test_sql_cookbook_lists_the_queries() -> None:
    text = (DOCS / "sql.md").read_text(encoding="utf-8")
    sql_blocks = [b.strip() for info, b in _blocks(DOCS / "sql.md") if info == "sql"]
    assert len(gen.QUERIES) >= 10
    assert sql_blocks == [q.strip() for _, _, q in gen.QUERIES]
    for view in ("events", "edges", "steps", "collectives", "summary", "runs"):
        assert f"### {view}\n" in text


@pytest.mark.parametrize("title,sql", [(t, q) for t, _, q in gen.QUERIES],
                         ids=[f"q{i}" for i in range(1, len(gen.QUERIES) + 1)])
def test_sql_cookbook_query_runs(quickstart: Path, title: str, sql: str) -> None:
    """Each query over the quickstart's two runs (h100 and mtia300 replays of the sample)."""
    from mtia_trace.runs import connect, query

    runs = quickstart / "runs" / "quick"
    table = query(connect([runs]), sql)
    assert table.num_columns >= 2
    if title == "The exact-sum invariant":
        assert table.num_rows == 0, table.to_pylist()[:3]
        steps = query(connect([runs]), "SELECT count(*) AS n FROM steps")
        assert steps.column("n")[0].as_py() > 0
    else:
        assert table.num_rows > 0, f"{title}: no rows on the bundled sample"
