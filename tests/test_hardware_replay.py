"""Step-level checks through `replay_events` on the bundled 2-rank synth sample (always present):
monotonicity in bandwidth, engines and loss, and the overlap slowdown of compute."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from replay.hardware import load_spec, model_for
from replay.run import replay_events

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "synth" / "dcnv2_train_2rank"


@lru_cache(maxsize=1)
def _events():
    from mtia_trace.ingest import load

    return load(SAMPLE).events


@lru_cache(maxsize=1)
def _rw_events():
    """2 ranks, row-wise sharding, global batch 16384: the pooled-embedding reduce-scatter each
    forward waits for is large enough that its reduction (message engines on MTIA) is on the
    critical path; the bundled sample's reductions all overlap compute."""
    import tempfile

    from mtia_trace.ingest import load
    from mtia_trace.synth import SynthOptions, synthesize

    with tempfile.TemporaryDirectory() as d:
        synthesize(SynthOptions(ranks=2, batch=16384, steps=2, sharding="rw", seed=0),
                   Path(d) / "t")
        return load(Path(d) / "t").events


def step_us(hw: str, sets: list[str] = (), events=None, **kw) -> float:
    ev = _events() if events is None else events
    r = replay_events(ev, model_for(load_spec(hw, list(sets)), **kw))
    steps = r.steps.column("total_us").to_numpy()
    return float(steps[r.steps.column("step").to_numpy() >= 0].mean())


@pytest.mark.parametrize("hw, knob, values, trace", [
    ("mtia300", "network.intra_node_GBps", (100, 300, 1000, 3000), _events),
    ("h100", "network.intra_node_GBps", (50, 150, 450, 1350), _events),
    ("mtia300", "hbm.bandwidth_GBps", (1500, 3000, 6100, 12000), _events),
    ("mtia300", "comm.message_engines", (1, 2, 4, 8, 16, 32), _rw_events),
], ids=["mtia300-intra_bw", "h100-intra_bw", "mtia300-hbm_bw", "mtia300-engines-rw"])
def test_step_time_monotone(hw: str, knob: str, values: tuple, trace) -> None:
    ev = trace()
    t = [step_us(hw, [f"{knob}={v}"], events=ev) for v in values]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(t, t[1:])), t
    assert t[-1] < t[0] * (1 - 1e-3)  # the knob matters on this trace (not by rounding)


@pytest.mark.parametrize("hw", ["mtia300", "h100"])
def test_step_time_monotone_in_loss(hw: str) -> None:
    # on h100 the two ranks go on separate nodes, so their traffic crosses (lossy) NICs
    sets = ["loss.rto_us=2000"] if hw == "mtia300" else ["loss.ib_timeout=4",
                                                         "network.ranks_per_node=1"]
    t = [step_us(hw, sets, loss_rate=q, seed=5) for q in (0.0, 1e-4, 1e-3, 1e-2, 5e-2)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(t, t[1:])), t  # equal up to rounding
    assert t[-1] > t[0]


def _overlap(hw: str) -> tuple[float, float, float]:
    """(compute time with the model's interference, without it, total difference) summed over
    device events whose compute the interference changed in the replayed schedule."""
    m = model_for(hw)
    with_slow = replay_events(_events(), m)

    class NoSlow:
        name = m.name

        @staticmethod
        def cost(events):  # noqa: ANN001, ANN205
            c = m.cost(events)
            c.interference = None
            return c

        @staticmethod
        def overlap_slowdown() -> float:
            return 0.0

    without = replay_events(_events(), NoSlow())
    a = with_slow.events.column("compute_us").to_numpy()
    b = without.events.column("compute_us").to_numpy()
    changed = a > b + 1e-12
    return float(a[changed].sum()), float(b[changed].sum()), float((a - b).sum())


def test_overlapped_compute_slowdown_offloaded_vs_on_compute() -> None:
    mt_with, mt_without, _ = _overlap("mtia300")
    gpu_with, gpu_without, _ = _overlap("h100")
    assert mt_without > 0 and gpu_without > 0  # some compute overlaps communication
    # message engines hold no compute: only the transfer contention (< 0.5 %) on compute
    assert mt_with / mt_without - 1 <= 0.005 + 1e-12
    # SMs held by NCCL: at most 2 waves for 1 (x the transfer contention), more than mtia300
    beta = float(load_spec("h100").value("comm.mem_contention"))
    assert mt_with / mt_without < gpu_with / gpu_without <= 2 * (1 + beta) + 1e-12


def test_no_slowdown_without_overlap() -> None:
    from mtia_trace.ingest import load

    one = load(SAMPLE.parent / "dcnv2_infer_1rank").events  # one rank: no communication
    m = model_for("h100")
    assert m.overlap_slowdown() > 0.1
    r = replay_events(one, m)
    r0 = replay_events(one, model_for(load_spec("h100", ["comm.comm_ctas=0",
                                                         "comm.mem_contention=0"])))
    assert np.array_equal(r.events.column("compute_us").to_numpy(),
                          r0.events.column("compute_us").to_numpy())
