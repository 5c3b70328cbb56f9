"""The headline verdict is decided from the critical path and checked against what the trace
measures (devices busy, launch-queue depth) before it is printed; identical targets say why."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest
import report_sample

from analyzers.report.build import build_report
from analyzers.report.headline import BUSY_DEVICE_SHARE, identical_reason, verdict
from analyzers.report.render_markdown import render_markdown
from analyzers.report.run_data import run_from_result
from mtia_trace.ingest import load
from mtia_trace.run_meta import Assumptions, RunMeta
from replay.run import replay_events
from tests.conftest import REAL, SAMPLES

NEUTRAL = "the hardware does not change this step"


def _polling_trace(path: Path) -> Path:
    """One step: the host launches a 1000 us kernel, then polls cudaEventQuery (20 calls of
    50 us) until it is done: no synchronize call, so no dependency tells the graph that the host
    waits on the device. Devices are busy ~95% of the step."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 0, "dur": 1060},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 5, "dur": 10, "args": {"correlation": 1, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": 20,
           "dur": 1000, "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}}]
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 1,
            "ts": 15 + 50 * i, "dur": 50, "args": {"correlation": 10 + i}} for i in range(21)]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_host_time_waiting_on_a_busy_device_is_not_called_host_bound(tmp_path: Path) -> None:
    """The critical path is all host time (the polling calls), the device is busy ~95% of the
    step: the report must not say the hardware does not change the step."""
    events = load(_polling_trace(tmp_path / "poll.json")).events
    run = run_from_result(replay_events(events), name="poll")
    v = verdict(run)
    assert v.critical["host"] > 0.9
    assert v.devices_busy is not None and v.devices_busy > 0.9
    assert v.label == "unsettled" and not v.hardware_neutral
    head = render_markdown(build_report(run, with_figures=False)).split("### ")[0]
    assert NEUTRAL not in head and "Host-bound" not in head
    assert "Verdict unsettled" in head and "devices busy 9" in head


def test_a_device_bound_run_is_not_called_host_bound_on_a_faster_target(tmp_path: Path) -> None:
    """Measured devices busy > 80%: on a target that makes the kernel 20x shorter (the replay
    leaves the device mostly idle) the critical path is host time, but the run stays unsettled,
    never host-bound; a target replay of a run measured below `BUSY_DEVICE_SHARE` busy may be
    host-bound."""
    from replay.whatif import parse_whatifs

    events = load(_polling_trace(tmp_path / "poll.json")).events
    faster = replay_events(events, whatifs=parse_whatifs(["track=dev:*:x0.05"]))
    run = run_from_result(faster, name="poll-fast")
    run = dataclasses.replace(run, meta=msgspec.structs.replace(run.meta, hardware="h100"))
    v = verdict(run)
    assert v.critical["host"] > 0.9 and v.devices_busy is not None and v.devices_busy > 0.9
    assert v.label == "unsettled" and not v.hardware_neutral


def _meta(hardware: str, **model: object) -> RunMeta:
    return RunMeta(hardware=hardware, assumptions=Assumptions(model=dict(model)))


def test_identical_targets_say_costing_fell_back_with_coverage_and_fix() -> None:
    res = report_sample.build_run()
    a = run_from_result(res, name="a", meta=_meta("mtia300", mode="roofline",
                                                   priced_work_time_fraction=0.09))
    b = run_from_result(res, name="b", meta=_meta("h100", mode="roofline",
                                                   priced_work_time_fraction=0.09))
    text = identical_reason(a, [b])
    assert "because costing fell back" in text and "9.0% of device-work time" in text
    assert "--source-hw" in text and "--mode scaled" in text and "spec" in text
    assert "host-bound" not in text


def test_identical_targets_with_busy_devices_are_not_hardware_neutral() -> None:
    """The sample's devices are busy ~75% of the step: identical targets are not explained as
    'the hardware does not change it'."""
    res = report_sample.build_run()
    a = run_from_result(res, name="a", meta=_meta("mtia300", mode="scaled",
                                                   priced_work_time_fraction=0.9))
    b = run_from_result(res, name="b", meta=_meta("h100", mode="scaled",
                                                   priced_work_time_fraction=0.9))
    assert verdict(a).devices_busy > BUSY_DEVICE_SHARE  # type: ignore[operator]
    text = identical_reason(a, [b])
    assert "does not change" not in text and "fell back" not in text


def test_runs_mode_is_the_mode_used(cli, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "r"
    code, _o, err = cli("replay", SAMPLES / "synth" / "dcnv2_infer_1rank", "--hw", "h100",
                        "-o", out, "-q")
    assert code == 0, err
    code, o, err = cli("query", out, "SELECT mode FROM runs", "--format", "json")
    assert code == 0, err
    assert json.loads(o)[0]["mode"] == "scaled"  # --mode auto: the synth trace names its source


def _traces() -> list[Path | list[Path]]:
    out: list[Path | list[Path]] = [SAMPLES / "torch_cpu_dlrm",
                                    SAMPLES / "synth" / "dcnv2_train_2rank",
                                    SAMPLES / "synth" / "dcnv2_infer_1rank"]
    if REAL.is_dir():
        folders: dict[Path, list[Path]] = {}
        for p in sorted(REAL.rglob("*.json.gz")):
            folders.setdefault(p.parent, []).append(p)
        for folder, files in sorted(folders.items()):
            if folder.name == "torch_cpu":
                out += [[f] for f in files if "tiny" in f.name]
                out.append([f for f in files if "rank2_small" in f.name])
            else:
                out.append(files)
    return out


def _id(t: Path | list[Path]) -> str:
    p = t if isinstance(t, Path) else t[0]
    base = REAL if REAL in p.parents else SAMPLES
    return str(p.relative_to(base))


@pytest.mark.parametrize("trace", _traces(), ids=_id)
def test_verdict_agrees_with_devices_busy_and_queue_depth(trace: Path | list[Path]) -> None:
    """On every bundled sample and real trace (as measured): never host-bound while the trace
    measures devices busy more than half the step or a full launch queue; 'the hardware does
    not change this step' only with neither; device- or communication-bound only with devices
    (or, CPU-only, collectives) to be bound by."""
    src = trace if isinstance(trace, Path) else (trace[0] if len(trace) == 1 else
                                                 [str(p) for p in trace])
    events = load(src).events  # type: ignore[arg-type]
    run = run_from_result(replay_events(events), name="t")
    v = verdict(run)
    busy = v.devices_busy or 0.0
    if busy > BUSY_DEVICE_SHARE or v.queue_full:
        assert v.label != "host-bound" and not v.hardware_neutral
        assert NEUTRAL not in v.sentence()
    if v.hardware_neutral:
        assert busy <= BUSY_DEVICE_SHARE and not v.queue_full
    if v.label == "device-bound":
        assert v.devices_busy is not None and busy >= v.critical["device"] - 0.05
    assert v.label in ("host-bound", "device-bound", "communication-bound", "unsettled")
