"""Measured gaps: modelled where we predict, visible where we keep them (DESIGN §10).

A device event's measured ready lag splits into the modelled launch latency and an unexplained
rest; host gaps outside every op are unexplained. Unexplained time is kept by default and counted
per step (``unexplained_us``); a strict replay drops it, so it shows up as error.
"""

from __future__ import annotations

import numpy as np
import pytest

from replay.costs import AsMeasured
from replay.graph import build_graph
from replay.hardware import load_spec
from replay.hardware.model import HardwareModel
from replay.pipeline import modelled_lags
from replay.run import replay_events
from tests.conftest import SAMPLES
from tests.replay_tables import dev, host, table

STALL_US = 600.0
LAUNCH_US = 3.5   # the source's modelled launch latency in these tables


def _device_bound(stall: float):
    """One rank, one step: 6 launches 5 us apart from the step's start, kernels of 100 us on one
    stream, each starting when its predecessor ends (the first one launch latency after its
    launch), kernel 3 ``stall`` us late; a device synchronize ends the step 0.5 us after the
    last kernel."""
    rows = []
    t_dev = 0.0
    for k in range(6):
        launch = 5.0 * k
        rows.append(host(0, launch, 2, name="cudaLaunchKernel", kind="runtime", depth=1,
                         correlation=k, step=1))
        start = max(launch + LAUNCH_US, t_dev) + (stall if k == 3 else 0.0)
        rows.append(dev(0, start, 100, correlation=k, step=1))
        t_dev = start + 100
    rows.append(host(0, 40, t_dev + 0.5 - 40, name="cudaDeviceSynchronize", kind="runtime",
                     depth=1, step=1))
    rows.append(host(0, 0, t_dev + 0.5, name="ProfilerStep#1", kind="annotation", step=1))
    return table(rows)


def _step(res):
    st = res.steps
    return (float(st.column("total_us")[0].as_py()), float(st.column("measured_us")[0].as_py()),
            float(st.column("unexplained_us")[0].as_py()))


def test_injected_stall_validates_by_default_not_strict():
    ev = _device_bound(STALL_US)
    model = AsMeasured(source_launch_us=LAUNCH_US)
    total, meas, unx = _step(replay_events(ev, model))
    assert total == pytest.approx(meas, abs=1e-6)  # default: the stall is kept (it happened)
    assert unx == pytest.approx(STALL_US, abs=1e-6)  # ... and counted as unexplained
    s_total, s_meas, s_unx = _step(replay_events(ev, model, strict=True))
    err = (s_total - s_meas) / s_meas
    assert err == pytest.approx(-STALL_US / meas, rel=1e-6)  # strict: the stall is the error
    assert s_unx == 0.0


def test_without_stall_strict_matches():
    ev = _device_bound(0.0)
    model = AsMeasured(source_launch_us=LAUNCH_US)
    total, meas, unx = _step(replay_events(ev, model, strict=True))
    assert total == pytest.approx(meas, abs=1e-6)
    assert unx == 0.0  # launch lags are the modelled latency, the host gaps are inside ops


def test_unknown_source_latency_leaves_the_whole_lag_unexplained():
    ev = _device_bound(0.0)
    _total, _meas, unx = _step(replay_events(ev, AsMeasured()))
    assert unx == pytest.approx(LAUNCH_US, abs=1e-6)  # the first kernel's launch lag


def test_host_gap_outside_ops_is_unexplained():
    rows = [host(0, 0, 100, name="ProfilerStep#1", kind="annotation", step=1),
            host(0, 0, 20, name="a", step=1), host(0, 70, 30, name="b", step=1)]
    total, meas, unx = _step(replay_events(table(rows)))
    assert total == pytest.approx(meas) and unx == pytest.approx(50.0)


def test_target_replay_uses_target_launch_latency():
    ev = _device_bound(0.0)
    g = build_graph(ev)
    h100, mtia = load_spec("h100"), load_spec("mtia300")
    src = float(h100.value("host.kernel_launch_us"))
    tgt = float(mtia.value("host.kernel_launch_us"))
    g2, notes = modelled_lags(g, src, tgt)
    launched = g.via_launch
    assert launched.any()
    # a launch-bound start: the target's latency plus what the source's does not explain
    np.testing.assert_allclose(g2.ready_lag[launched],
                               tgt + g.ready_lag[launched] - np.minimum(g.ready_lag[launched], src))
    assert notes["launch_latency"]["modelled_us"] == tgt
    # as-measured identity: the same latency on both sides keeps every lag
    g3, _ = modelled_lags(g, src, None)
    np.testing.assert_allclose(g3.ready_lag, g.ready_lag)


def test_stall_is_not_carried_as_explained_onto_a_target():
    # the same stall replayed on mtia300: kept by default and counted as unexplained there too
    ev = _device_bound(STALL_US)
    res = replay_events(ev, HardwareModel.create("mtia300", source="h100"))
    _total, _meas, unx = _step(res)
    assert unx == pytest.approx(STALL_US, rel=1e-6)


def test_samples_validate_strict_reports_unexplained(cli):
    code, out, _err = cli("validate", SAMPLES / "synth" / "dcnv2_infer_1rank", "--max-error", "1%")
    assert code == 0
    assert "strict" in out and "unexplained:" in out
