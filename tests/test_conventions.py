"""One meaning per option and one shape per output, whatever the input."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import orjson
import pytest
from conftest import SAMPLES
from runfixture import tiny_meta, tiny_tables

from mtia_trace.cli import COMMANDS, load_command
from mtia_trace.storage import write_run

GPU = SAMPLES / "synth" / "dcnv2_train_2rank"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("runs") / "tiny"
    write_run(tiny_tables(), d, tiny_meta())
    return d


@pytest.mark.parametrize("name", [c[0] for c in COMMANDS])
def test_usage_lines_have_no_braces(name: str) -> None:
    cmd = load_command(name)
    ctx = cmd.context_class(cmd, info_name=name)
    usage = cmd.get_usage(ctx)
    assert "{" not in usage and "}" not in usage, usage


def test_f_is_format_or_nothing_visible(cli) -> None:
    """``-f`` is listed nowhere: query's SQL file is ``--file`` (``-f`` still accepted)."""
    for name, *_ in COMMANDS:
        cmd = load_command(name)
        shown = [o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts]
        assert "-f" not in shown, name


def test_query_file_and_its_old_short_spelling(run_dir: Path, tmp_path: Path, cli) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text("SELECT count(*) AS n FROM steps")
    for flag in ("--file", "-f"):
        code, out, err = cli("query", run_dir, flag, sql, "--format", "csv")
        assert (code, out) == (0, '"n"\n4\n'), err


def test_synth_phase_and_its_old_spelling(tmp_path: Path, cli) -> None:
    opts = {o for p in load_command("synth").params if not getattr(p, "hidden", False)
            for o in p.opts}
    assert "--phase" in opts and "--mode" not in opts
    for flag in ("--phase", "--mode"):
        out = tmp_path / flag.strip("-")
        code, _, err = cli("synth", "--ranks", "1", "--steps", "1", flag, "infer", "-o", out)
        assert code == 0, err
    a = sorted(p.read_bytes() for p in (tmp_path / "phase").iterdir())
    b = sorted(p.read_bytes() for p in (tmp_path / "mode").iterdir())
    assert a == b


def test_analyze_json_is_one_shape(run_dir: Path, cli) -> None:
    code, one, _ = cli("analyze", run_dir, "idle", "--format", "json")
    code2, two, _ = cli("analyze", run_dir, "idle", "overlap", "--format", "json")
    assert code == code2 == 0
    one_d, two_d = orjson.loads(one), orjson.loads(two)
    assert isinstance(one_d, dict) and set(one_d) == {"idle"}
    assert one_d["idle"] == two_d["idle"]


def test_report_and_export_say_what_they_wrote(run_dir: Path, tmp_path: Path, cli) -> None:
    code, _, err = cli("report", run_dir, "-o", tmp_path / "r.md")
    assert code == 0 and f"report written to {tmp_path / 'r.md'}" in err
    code, _, err = cli("export", run_dir, "--perfetto", tmp_path / "t.json")
    assert code == 0 and f"timeline written to {tmp_path / 't.json'}" in err


def test_an_execution_trace_beside_a_kineto_trace_is_skipped_with_a_note(tmp_path: Path,
                                                                         cli) -> None:
    d = tmp_path / "trace"
    d.mkdir()
    shutil.copy(next(GPU.glob("*rank0*")), d)
    et = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "2024-01-01", "start_ts": 1,
          "nodes": [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]",
                     "ctrl_deps": 0, "inputs": {}, "outputs": {}, "attrs": []}],
          "finish_ts": 2}
    (d / "rank0_et.json.gz").write_bytes(gzip.compress(json.dumps(et).encode()))
    code, out, err = cli("inspect", d, "--format", "json")
    assert code == 0, err
    s = orjson.loads(out)
    assert s["ranks"] == [0] and len(s["files"]) == 1
    assert any("rank0_et.json.gz: a PyTorch execution trace" in w for w in s["warnings"])


def test_hardware_table_has_plain_keys_units_only_if_any_and_whole_sources(tmp_path: Path,
                                                                          cli) -> None:
    from analyzers.report.build import _hardware_blocks
    from analyzers.report.document import Table
    from analyzers.report.run_data import load_run
    code, _, err = cli("replay", GPU, "--hw", "mtia300", "-o", tmp_path / "run", "-q")
    assert code == 0, err
    table = next(b for b in _hardware_blocks(load_run(tmp_path / "run", analyses=False))
                 if isinstance(b, Table) and "parameter" in b.columns)
    keys = [r[0] for r in table.rows]
    assert keys and not any(k.startswith("values.") for k in keys)
    assert "unit" not in table.columns or any(r[table.columns.index("unit")] for r in table.rows)
    sources = [r[table.columns.index("source")] for r in table.rows]
    assert not any(s.endswith("…") for s in sources) and max(map(len, sources)) > 90
