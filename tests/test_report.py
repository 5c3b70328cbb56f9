"""`report`: golden Markdown for the fixed sample run, the headline's numbers, the CLI, progress."""

from __future__ import annotations

import io
import re
from pathlib import Path

import orjson
import pytest
import report_sample

from analyzers.report.build import build_report, report_dict
from analyzers.report.headline import attribution, findings
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import load_run, run_from_result
from mtia_trace.progress import Progress
from mtia_trace.schema import ATTRIBUTION
from tests.conftest import invoke_cli as cli
from tests.conftest import real_file, requires_real

GOLDEN = Path(__file__).parent / "golden" / "report_sample.md"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report_sample.write_run(report_sample.build_run(),
                                   tmp_path_factory.mktemp("runs") / "sample")




def test_golden_markdown(run_dir: Path, update_golden: bool) -> None:
    # GIVEN the fixed sample run, without the analyzers (their tables have their own goldens)
    text = render_markdown(build_report(load_run(run_dir, analyses=False), with_figures=False))
    # THEN it is deterministic and leaks no absolute paths
    assert str(run_dir) not in text and "/abs/path" not in text
    if update_golden:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "report changed; rerun with --update-golden and review"


def test_attribution_sums_to_step_time() -> None:
    a = attribution(run_from_result(report_sample.build_run(), name="s"))
    assert sum(a.per_step_us.values()) == pytest.approx(a.step_us, rel=1e-9)
    assert a.ranks == 4 and a.steps == 3 and a.per_step_us["peer_wait"] == pytest.approx(112.5)


def test_headline_names_the_collective_and_the_straggler() -> None:
    run = run_from_result(report_sample.build_run(late_us=600.0), name="late")
    found = findings(run)
    keys = [f.key for f in found]
    # waiting for the late rank (450 µs per rank-step) outweighs the transfers themselves
    assert keys[:2] == ["straggler", "collective"]
    assert "all_to_all on pg 0" in found[1].text
    straggler = found[0]
    assert "1 of 4 ranks arrive late" in straggler.text and "600.0 µs" in straggler.text
    assert "rank 3 last in 3 of 6" in straggler.text
    assert [f.us_per_step for f in found] == sorted((f.us_per_step for f in found), reverse=True)


def test_no_straggler_when_ranks_arrive_together() -> None:
    run = run_from_result(report_sample.build_run(late_us=0.0), name="even")
    assert "straggler" not in [f.key for f in findings(run)]


def test_full_report_has_a_section_per_analyzer(run_dir: Path) -> None:
    from analyzers import ANALYZERS

    text = render_markdown(build_report(load_run(run_dir), with_figures=False))
    for name in ANALYZERS:
        assert f"\n### {name}\n" in text


def test_json_report_matches_the_attribution(run_dir: Path) -> None:
    d = report_dict(load_run(run_dir))
    parts = d["attribution_us_per_rank_step"]
    assert list(parts) == list(ATTRIBUTION)
    assert sum(parts.values()) == pytest.approx(d["step_time_us"]["mean"])
    assert len(d["bottlenecks"]) == 3 and len(d["per_rank"]) == 4


def test_cli_markdown_and_json(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["report", str(run_dir), "--quiet"], capsys)
    assert code == 0 and out.startswith("# mtia-trace report: sample") and err == ""
    code, out, _ = cli(["report", str(run_dir), "--format", "json"], capsys)
    assert code == 0 and orjson.loads(out)["ranks"] == 4


def test_cli_writes_file_and_refuses_to_overwrite(run_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "r.md"
    assert cli(["report", str(run_dir), "-o", str(dest)], capsys)[0] == 0
    assert dest.read_text().startswith("# mtia-trace report")
    code, _, err = cli(["report", str(run_dir), "-o", str(dest)], capsys)
    assert code == 2 and err.startswith("mtia-trace: error:") and "--force" in err
    assert cli(["report", str(run_dir), "-o", str(dest), "--force"], capsys)[0] == 0


def test_cli_missing_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["report", str(tmp_path / "nope")], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does not exist" in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stream", "quiet", "shown"),
                         [(_Tty(), False, True), (_Tty(), True, False), (io.StringIO(), False, False)],
                         ids=["terminal", "quiet", "pipe"])
def test_progress_only_on_a_terminal(stream: io.StringIO, quiet: bool, shown: bool) -> None:
    with Progress("replay", total=2, quiet=quiet, stream=stream) as p:
        p.update("h100")
        p.update("mtia300")
    written = stream.getvalue()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", written)
    assert ("mtia-trace: replay [2/2] mtia300" in plain) is shown
    assert written == "" if not shown else written.endswith("\x1b[2K")  # the line is cleared


def _sweep(path: Path, axes: dict[str, list[str]], step: list[float]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(step)
    cols = {"point": list(range(n)), "hw": ["mtia300"] * n, **axes, "step_us": step}
    for c in ATTRIBUTION:
        cols[f"{c}_us"] = [s / len(ATTRIBUTION) for s in step]
    cols["speedup_vs_point0"] = [step[0] / s for s in step]
    pq.write_table(pa.table(cols), path)
    return path


def test_sweep_report_names_the_best_point(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    one = _sweep(tmp_path / "engines.parquet", {"comm.message_engines": ["4", "8", "16"]},
                 [1500.0, 1200.0, 1100.0])
    code, out, _ = cli(["report", str(one)], capsys)
    assert code == 0 and out.startswith("# mtia-trace sweep report: engines")
    assert ("Fastest step **1,100.0 µs** at comm.message_engines=16; slowest 1,500.0 µs at "
            "comm.message_engines=4 (1.36× slower)") in out
    two = _sweep(tmp_path / "grid.parquet", {"a": ["1", "1", "2", "2"], "b": ["x", "y", "x", "y"]},
                 [4.0, 3.0, 2.0, 1.0])
    for path in (one, two):
        code, out, _ = cli(["report", str(path), "--format", "html"], capsys)
        assert code == 0 and out.count("data:image/png;base64,") == 1


def test_report_refuses_a_parquet_that_is_not_a_sweep(run_dir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["report", str(run_dir / "steps.parquet")], capsys)
    assert code == 2 and out == "" and "not a sweep table" in err


def test_costing_line_names_the_effective_mode_and_its_coverage() -> None:
    from analyzers.report.build import costing_line
    from mtia_trace.run_meta import from_dict

    meta = {"options": {"mode": "auto"},
            "assumptions": {"model": {"mode": "roofline", "priced_work_time_fraction": 0.089,
                                      "mode_reason": "no source hardware (none given); events "
                                                     "with flops/bytes cover 9% of device-work "
                                                     "time"}}}
    line = costing_line(from_dict(meta))
    assert line is not None and line.startswith("Costing: **roofline**")
    assert "`--mode auto` chose it: no source hardware (none given)" in line
    assert "cover **8.9%** of device-work time; the other 91.1% keep their measured" in line
    # older runs: the coverage comes from the reason text
    del meta["assumptions"]["model"]["priced_work_time_fraction"]
    assert "cover **9.0%**" in (costing_line(from_dict(meta)) or "")
    assert costing_line(from_dict({})) is None
    assert "as measured" in (costing_line(from_dict(
        {"assumptions": {"model": {"costing": "as-measured"}}})) or "")


def test_identical_targets_are_flagged() -> None:
    from mtia_trace.cli.replay_cmd import identical_targets

    steps = report_sample.build_run().steps
    other = report_sample.build_run(gemm_us=440.0).steps
    assert "identical" in (identical_targets({"a": steps, "b": steps}, ["a", "b"]) or "")
    assert identical_targets({"a": steps, "b": other}, ["a", "b"]) is None
    assert identical_targets({"a": steps}, ["a"]) is None


@pytest.mark.real
@requires_real
def test_mtia_training_trace_headline_says_what_is_true(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The MTIA training trace is host-bound: its largest findings are host time (the main
    thread's 5.7 s inside ``## backward ##`` is a wait on the autograd engine thread, a
    ``thread`` edge, so the engine thread's waits and ops take the critical path), and it falls
    back to roofline costing with flops known for a small share."""
    trace = real_file("hta/mtia_trace_single_rank")
    code = cli(["replay", str(trace), "--hw", "mtia300", "--out", str(tmp_path / "run"), "-q"],
               capsys)[0]
    assert code == 0
    run = load_run(tmp_path / "run")
    d = report_dict(run)
    top = d["bottlenecks"][0]
    assert top["key"] in ("host_wait", "host_ops", "host_untracked") and top["share"] > 0.5
    assert d["costing"]["mode"] == "roofline" and 0 < d["costing"]["priced_work_time_fraction"] < 0.5
    assert d["host_bound"] is True
    text = render_markdown(build_report(run, with_figures=False))
    head = text.split("### Where the time went")[0]
    assert "Costing: **roofline**" in head and "of device-work time" in head
    assert "**Host-bound" in head
    assert "Devices busy **5" in head  # about half: HTA reports 54.8% on the whole trace span


def test_heat_map_colour_scale_does_not_magnify_noise() -> None:
    from analyzers.report.figures import MIN_COLOUR_SPAN, colour_range

    lo, hi = colour_range(1000.0, 1000.5)  # a 0.05% spread
    assert hi - lo == pytest.approx(MIN_COLOUR_SPAN * 1000.25)
    assert (1000.5 - 1000.0) / (hi - lo) < 0.02  # the points differ by < 2% of the scale
    assert colour_range(100.0, 300.0) == (100.0, 300.0)  # a real spread keeps full contrast


def test_timeline_draws_every_rank_or_states_the_selection() -> None:
    from analyzers.report.figures import time_unit, timeline_ranks

    run = run_from_result(report_sample.build_run(late_us=600.0), name="late")
    assert timeline_ranks(run, 16) == ([0, 1, 2, 3], "every rank")
    ranks, why = timeline_ranks(run, 2)
    assert 3 in ranks and len(ranks) == 2 and "2 of 4 ranks" in why  # the late rank is kept
    assert time_unit(13e6) == ("s", 1e6) and time_unit(1440.0) == ("µs", 1.0)
    assert time_unit(5e3) == ("ms", 1e3)
