"""Golden outputs through the real pipeline: a small generated trace -> `mtia-trace replay`
(ingest, graph, schedule, attribution, storage) -> every analyzer's table, compared with the
reviewed CSVs in ``tests/golden/pipeline/``.

The hand-built run in `test_analyzers.py` pins the SQL; these pin everything upstream of it, so a
change in ingest, the graph or the scheduler shows up here as a diff. The replay is as-measured
(no hardware spec), so spec edits do not move these files. After an intended change:
``pytest tests/test_pipeline_golden.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pytest

from analyzers import ANALYZERS
from mtia_trace.cli import main
from mtia_trace.runs import connect
from mtia_trace.storage import open_run
from mtia_trace.synth import SynthOptions, synthesize

GOLDEN = Path(__file__).parent / "golden" / "pipeline"
#: rows kept per table: enough to see a change, small enough to review
MAX_ROWS = 25


def golden_csv(table: pa.Table) -> str:
    """Deterministic CSV: floats rounded to 1 ns (us columns) and then 6 significant digits, so
    summation-order noise near zero does not show as a change; nulls empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    for row in table.to_pylist():
        w.writerow(["" if v is None else format(round(v, 3) + 0.0, ".6g") if isinstance(v, float)
                    else v for v in row.values()])
    return buf.getvalue()


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pipeline")
    synthesize(SynthOptions(preset="dlrm-dcnv2", ranks=2, steps=2, seed=0),
               root / "trace")
    assert main(["replay", str(root / "trace"), "--out", str(root / "run"), "--quiet"]) == 0
    c = connect([open_run(root / "run")])
    yield c
    c.close()


@pytest.mark.parametrize("name", list(ANALYZERS))
def test_pipeline_analyzer_matches_golden(name: str, con, update_golden: bool) -> None:
    table = ANALYZERS[name].run(con)
    assert isinstance(table, pa.Table)
    text = golden_csv(table.slice(0, MAX_ROWS))
    path = GOLDEN / f"{name}.csv"
    if update_golden:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing; run pytest with --update-golden"
    assert text == path.read_text(), f"{name} changed; rerun with --update-golden and review"
