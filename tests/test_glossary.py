"""One meaning per word: analyzer columns and report wording use the glossary's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runfixture import tiny_meta, tiny_tables

from analyzers import ANALYZERS
from analyzers.report.glossary import GLOSSARY, TERMS
from mtia_trace.runs import connect
from mtia_trace.storage import write_run

#: Words that meant a second thing somewhere: ``memory`` (a copy, or the fetch cost?), ``comm``
#: (collective), ``untracked`` (unexplained), ``*_rank`` for a list position (place).
RETIRED = ("memory_", "comm_", "untracked", "times_late", "critical_rank", "busy_rank")
#: Columns ending in ``_rank`` that are process ranks.
PROCESS_RANKS = {"rank", "late_rank"}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory):
    run = write_run(tiny_tables(), tmp_path_factory.mktemp("runs") / "tiny", tiny_meta())
    con = connect([run])
    return {name: a.run(con) for name, a in ANALYZERS.items()}


def test_no_analyzer_column_uses_a_retired_word(tables) -> None:
    for name, t in tables.items():
        for col in t.column_names:
            assert not any(w in col for w in RETIRED), f"{name}.{col}"
            assert not col.endswith("_rank") or col in PROCESS_RANKS, f"{name}.{col}"


def test_renamed_columns_are_in_the_glossary(tables) -> None:
    cols = {c for t in tables.values() for c in t.column_names}
    for col in ("kernel_us", "collective_us", "copy_us", "critical_place", "busy_place",
                "times_last"):
        assert col in cols and col in GLOSSARY, col


def test_device_time_and_attribution_do_not_share_a_word_for_different_things(tables) -> None:
    """``fetch`` is a cost component (embedding gathers included); the device view's stream
    shares are kernel / collective / copy, so no ``memory 0.0%`` next to a 38% fetch."""
    dt = set(tables["device_time"].column_names)
    assert {"kernel_us", "collective_us", "copy_us"} <= dt
    assert not dt & {"compute_us", "fetch_us", "memory_us"}
    assert "embedding" in TERMS["fetch"] and "embedding" in GLOSSARY["kernel_us"]


def test_report_json_and_text_say_unexplained_not_untracked(tmp_path: Path, cli) -> None:
    from conftest import SAMPLES
    run = tmp_path / "run"
    code, _, err = cli("replay", SAMPLES / "synth" / "dcnv2_train_2rank", "--hw", "mtia300",
                       "-o", run, "-q")
    assert code == 0, err
    code, out, err = cli("report", run, "--format", "json")
    assert code == 0, err
    assert "untracked" not in out and "unexplained" in json.dumps(json.loads(out))
    code, out, _ = cli("report", run, "--format", "md", "-o", tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text()
    assert "memory 0.0%" not in text and "copies" in text
