"""A step the devices hold up gets shorter when device work does: the waits that tie the host to
the devices are edges of the graph, not measured gaps kept verbatim. Two mechanisms: the
autograd engine thread starting each ``backward`` when the main thread reaches it (not where it
was measured), and a kernel waiting for the compute units a kernel of another stream holds
(``contention`` edges)."""

from __future__ import annotations

import numpy as np
import pytest

from replay.graph import build_graph
from replay.run import replay_events
from replay.validation import validate_events
from replay.whatif import parse_whatif
from tests.conftest import REAL, requires_real
from tests.replay_tables import dev, host, table

FAST_DEVICE = parse_whatif("track=dev:*:x0.1")


def _steps(r) -> np.ndarray:  # noqa: ANN001
    return r.steps.column("total_us").to_numpy()


def _engine_ops(t0: float, t1: float, step: int) -> list[dict[str, object]]:
    rows, t = [], t0
    while t < t1 - 1:
        d = min(60.0, t1 - t)
        rows.append(host(0, t, d, name="AddmmBackward0", tid=2, step=step))
        t += d + 2.0
    return rows


def two_backward_steps(kernel_lag: float = 10.0) -> object:
    """Main thread (tid 0) and the autograd engine thread (tid 2), two steps. Step 1: forward,
    ``## backward ##`` (the engine runs 110-1090), optimizer. Step 2: the forward launches a
    kernel that starts ``kernel_lag`` us after its launch call ends and ends at 2320, and
    synchronizes on it, then ``## backward ##`` (the engine runs 2340-3320, idle since 1090),
    optimizer."""
    rows = [host(0, 0, 1300, name="ProfilerStep#1", kind="annotation", step=1, tid=0),
            host(0, 0, 100, name="forward", depth=1, step=1, tid=0),
            host(0, 100, 1000, name="## backward ##", kind="annotation", depth=1, step=1, tid=0),
            host(0, 1100, 150, name="optimizer", depth=1, step=1, tid=0),
            host(0, 1300, 2300, name="ProfilerStep#2", kind="annotation", step=2, tid=0),
            host(0, 1300, 10, name="cudaLaunchKernel", kind="runtime", depth=1, step=2, tid=0,
                 correlation=5),
            host(0, 1310, 1015, name="cudaDeviceSynchronize", kind="runtime", depth=1, step=2,
                 tid=0),
            dev(0, 1310 + kernel_lag, 1010 - kernel_lag, step=2, correlation=5),
            host(0, 2330, 1000, name="## backward ##", kind="annotation", depth=1, step=2,
                 tid=0),
            host(0, 3330, 150, name="optimizer", depth=1, step=2, tid=0)]
    rows += _engine_ops(110.0, 1090.0, 1) + _engine_ops(2340.0, 3320.0, 2)
    return table(rows)


def test_engine_thread_restarts_when_the_main_thread_reaches_backward() -> None:
    t = two_backward_steps()
    g = build_graph(t)
    assert g.notes["thread_waits"] == 2 and g.notes["threads_started"] == 2
    base = replay_events(t, graph=g)
    assert _steps(base).tolist() == [1300.0, 2300.0]  # as measured: reproduced exactly
    fast = replay_events(t, graph=g, whatifs=[FAST_DEVICE])
    # the kernel 900 us shorter: the sync returns, backward starts and the step ends that much
    # earlier (before: the engine thread kept its measured idle gap and started at 2340)
    assert _steps(fast)[1] == pytest.approx(2300.0 - 900.0, abs=1.0)
    # the engine's delay after the main thread reached backward is a measured lag, unexplained
    assert float(base.steps.column("unexplained_us").to_numpy()[1]) >= 10.0


def test_strict_drops_a_device_lag_the_engine_threads_idle_gap_spans() -> None:
    """The kernel step 2 synchronizes on starts 510 us after its launch call starts, its only
    input. The strict replay re-times that lag (no launch latency given: none): the sync returns,
    ``backward`` starts and the engine thread follows it that much earlier, so step 2 is 510 us
    shorter. The engine's
    measured idle gap (1090-2340) spans the lag; kept, it would hold the step at its measured
    length and hide what strict removed."""
    t = two_backward_steps(kernel_lag=500.0)
    v = validate_events(t)
    err = v.steps.column("strict_error").to_numpy()
    assert err[0] == pytest.approx(0.0, abs=1e-9)
    assert err[1] == pytest.approx(-510.0 / 2300.0, abs=2.0 / 2300.0)
    assert v.steps.column("error").to_numpy().tolist() == [0.0, 0.0]  # as measured: exact


def kernel_behind_another_stream(tail: float = 20.0) -> object:
    """One step. Kernel A (stream 7, 1000 us) fills the device; kernel B (stream 20), launched
    right after A, starts only as A drains (``tail`` us before A's end); the host then copies
    B's result to pageable memory (a blocking copy on stream 20) and works 70 us."""
    a_end = 1020.0
    b_start = a_end - tail
    rows = [host(0, 0, 1200, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 0, 10, name="cudaLaunchKernel", kind="runtime", depth=1, step=1,
                 correlation=1),
            host(0, 30, 10, name="cudaLaunchKernel", kind="runtime", depth=1, step=1,
                 correlation=2),
            host(0, 50, b_start + 20 - 50, name="cudaMemcpyAsync", kind="runtime", depth=1,
                 step=1, correlation=3),
            host(0, b_start + 20, 70, name="aten::mul", depth=1, step=1),
            dev(0, 20, 1000, step=1, correlation=1),
            dev(0, b_start, 10, stream=20, step=1, correlation=2, kind="elementwise"),
            dev(0, b_start + 12, 2, stream=20, step=1, correlation=3, kind="memcpy",
                name="Memcpy DtoH (Device -> Pageable)")]
    return table(rows)


@pytest.mark.parametrize("tail", [0.0, 20.0])
def test_kernel_waiting_for_another_streams_kernel_follows_it(tail: float) -> None:
    t = kernel_behind_another_stream(tail)
    g = build_graph(t)
    assert g.notes["contention_waits"] == 1
    assert "contention" in g.edges.column("type").to_pylist()
    base = replay_events(t, graph=g)
    assert _steps(base).tolist() == [1200.0]  # as measured: B starts where it did
    names = base.events.column("name").to_pylist()
    b = names.index("kelementwise")
    assert float(base.events.column("start_us").to_numpy()[b]) == pytest.approx(
        float(t.column("ts_us").to_numpy()[b]))
    # the critical path runs through A up to B's start: A's run after it is not counted twice
    a = names.index("kgemm")
    assert float(base.events.column("critical_us").to_numpy()[a]) == pytest.approx(1000.0 - tail)
    fast = replay_events(t, graph=g, whatifs=[FAST_DEVICE])
    # A 900 us shorter: B, the copy waiting for it and the host after the copy move with it
    # (before: B kept its ~1 ms ready lag as measured and the step stayed 1.000x)
    assert _steps(fast)[0] < 0.35 * _steps(base)[0]
    fb = float(fast.events.column("start_us").to_numpy()[b])
    fa_end = float(fast.events.column("end_us").to_numpy()[a])
    # B starts the same share of A's (now shorter) run before A's end
    assert fb == pytest.approx(fa_end - tail / 10.0, abs=1e-6)


def test_a_kernel_with_its_own_long_lag_and_no_kernel_ending_nearby_is_not_contention() -> None:
    t = kernel_behind_another_stream(tail=-300.0)  # B starts 300 us after A ended
    g = build_graph(t)
    assert g.notes["contention_waits"] == 0


def kernel_behind_two_jobs(handover: float) -> object:
    """One step. Kernel A (stream 7, 20-1520 us, launched at 0 us) fills the device; the host
    launches kernels C and B while it runs (launch calls at 30 and 32 us). C (stream 9) starts
    ``handover`` us after A ends and runs 500 us; B (stream 20) starts 5 us after C ends. B
    waited ~2 ms, C only the last quarter of it: no one kernel ran through the second half of
    B's wait."""
    a_end = 1520.0
    c_start = a_end + handover
    rows = [host(0, 0, 3000, name="ProfilerStep#1", kind="annotation", step=1)]
    for corr, at in ((1, 0.0), (2, 30.0), (3, 32.0)):
        rows.append(host(0, at, 1, name="cudaLaunchKernel", kind="runtime",
                         depth=1, step=1, correlation=corr))
    rows += [dev(0, 20, a_end - 20, step=1, correlation=1),
             dev(0, c_start, 500, stream=9, step=1, correlation=2, kind="conv"),
             dev(0, c_start + 505, 10, stream=20, step=1, correlation=3, kind="elementwise")]
    return table(rows)


def test_a_kernel_waiting_behind_two_jobs_in_turn_follows_the_second() -> None:
    # before: C started after the middle of B's wait, so B kept its ~2 ms lag as measured
    t = kernel_behind_two_jobs(handover=5.0)
    g = build_graph(t)
    assert g.notes["contention_waits"] == 2   # C behind A, B behind C
    base = replay_events(t, graph=g)
    fast = replay_events(t, graph=g, whatifs=[FAST_DEVICE])
    names = base.events.column("name").to_pylist()
    b, c = names.index("kelementwise"), names.index("kconv")
    start = base.events.column("start_us").to_numpy()
    assert float(start[b]) == pytest.approx(float(t.column("ts_us").to_numpy()[b]))
    fs, fe = fast.events.column("start_us").to_numpy(), fast.events.column("end_us").to_numpy()
    # A and C 10x shorter: B follows C's end (5 us after it, as measured), ~1.8 ms earlier
    assert float(fs[b]) == pytest.approx(float(fe[c]) + 5.0, abs=1e-6)
    assert float(fs[b]) < float(start[b]) - 1500.0


def test_a_device_idle_longer_than_its_slack_during_the_wait_is_no_contention() -> None:
    # A and C 60 us apart (slack 20 us): the device was not busy through B's wait
    t = kernel_behind_two_jobs(handover=60.0)
    assert build_graph(t).notes["contention_waits"] == 0



def device_with_dispatch_gap(gaps: list[float], wait: float) -> object:
    """One step. The host launches every kernel up front (launch calls at 0, 2, 4, ... us).
    Stream 7 runs short kernels (20 us) back to back, each starting ``gaps[i]`` us after the one
    before ends, then kernel A (1000 us); kernel B (stream 20) starts ``wait`` us after A ends."""
    rows = [host(0, 0, 3000, name="ProfilerStep#1", kind="annotation", step=1)]
    t, corr = 30.0, 1
    for i in range(len(gaps) + 1):
        dur = 1000.0 if i == len(gaps) else 20.0
        rows += [host(0, 2.0 * corr, 1, name="cudaLaunchKernel", kind="runtime", depth=1,
                      step=1, correlation=corr),
                 dev(0, t, dur, step=1, correlation=corr)]
        corr += 1
        t += dur + (gaps[i] if i < len(gaps) else 0.0)
    rows += [host(0, 2.0 * corr, 1, name="cudaLaunchKernel", kind="runtime", depth=1, step=1,
                  correlation=corr),
             dev(0, t + wait, 10, stream=20, step=1, correlation=corr, kind="elementwise")]
    return table(rows)


#: an MTIA-like device: it starts work it holds ~40 us after a kernel ends (11 gaps, median 41)
SLOW_DISPATCH = [38.0, 39.0, 40.0, 41.0, 42.0, 43.0, 44.0, 41.0, 40.0, 42.0, 41.0]


def test_a_device_that_dispatches_40_us_after_a_kernel_waits_40_us_across_streams() -> None:
    # before: the window after A's end was 20 us on every device, and B's 40 us was a lag
    t = device_with_dispatch_gap(SLOW_DISPATCH, wait=40.0)
    g = build_graph(t)
    assert g.notes["contention_waits"] == 1
    base = replay_events(t, graph=g)
    fast = replay_events(t, graph=g, whatifs=[FAST_DEVICE])
    names = base.events.column("name").to_pylist()
    b = names.index("kelementwise")
    # B follows A: 10x faster device work starts it ~900 us earlier, not where it was measured
    assert float(fast.events.column("start_us").to_numpy()[b]) < float(
        base.events.column("start_us").to_numpy()[b]) - 800.0


def test_too_few_back_to_back_gaps_keep_the_assumed_slack() -> None:
    t = device_with_dispatch_gap(SLOW_DISPATCH[:5], wait=40.0)
    assert build_graph(t).notes["contention_waits"] == 0


@pytest.mark.parametrize(("wait", "waits"), [(15.0, 1), (40.0, 0)])
def test_a_gpu_like_3_us_dispatch_gap_keeps_the_20_us_slack(wait: float, waits: int) -> None:
    t = device_with_dispatch_gap([3.0] * 11, wait=wait)
    assert build_graph(t).notes["contention_waits"] == waits


@requires_real
def test_real_busy_gpu_trace_gets_shorter_with_faster_devices() -> None:
    """HTA's ``trace_diff/control`` (A100, devices busy ~84% of the step): backward runs on the
    autograd engine thread, and a side stream's kernels wait for the compute units the main
    stream's embedding kernels hold. Before: 0.999x under 10x faster device work."""
    from analyzers.report.headline import verdict
    from analyzers.report.run_data import run_from_result
    from mtia_trace.ingest import load
    from replay.hardware import model_for

    path = REAL / "hta/trace_diff/control/control.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    events = load(path).events
    g = build_graph(events)
    assert g.notes["contention_waits"] >= 6 and g.notes["threads_started"] >= 6
    base = replay_events(events, graph=g)
    np.testing.assert_allclose(_steps(base), [75473, 76940, 76212, 76727, 78473, 81120])
    fast = replay_events(events, graph=g, whatifs=[FAST_DEVICE])
    assert _steps(fast).mean() < 0.9 * _steps(base).mean()
    v = verdict(run_from_result(base, name="control"))
    assert v.devices_busy is not None and v.devices_busy > 0.8
    assert v.label != "host-bound" and not v.hardware_neutral
    # on the hardware that recorded it, replayed: the replay's own devices are busy more than
    # half the step, so a host-majority critical path is not called host-bound either
    on_a100 = replay_events(events, model_for("a100", mode="scaled", source="a100"), graph=g)
    v = verdict(run_from_result(on_a100, name="control-a100"))
    assert v.label != "host-bound" and "Host-bound" not in v.sentence()
    assert "The trace measures devices busy 8" in v.sentence()


def test_scenarios_scheduled_together_shift_contention_like_each_alone() -> None:
    # the causal profile schedules many duration scenarios in one pass: each column starts B
    # the same share of A's duration early as a schedule of that column alone
    import dataclasses

    from replay.scheduler import SchedulePlan, schedule, schedule_many

    t = kernel_behind_another_stream(20.0)
    g = build_graph(t)
    dur = t.column("dur_us").to_numpy().astype(float)
    dev_ = t.column("is_device").to_numpy(zero_copy_only=False)
    durs = np.stack([dur, np.where(dev_, dur * 0.1, dur), np.where(dev_, dur * 0.5, dur)], axis=1)
    gaps = np.repeat(g.gap[:, None], 3, axis=1)
    plan = SchedulePlan()
    schedule(g, dur, plan=plan)
    T = schedule_many(g, durs, gaps, plan=plan)
    for j in range(3):
        alone = schedule(dataclasses.replace(g), durs[:, j].copy())
        np.testing.assert_array_equal(T[:, j], alone.T)
