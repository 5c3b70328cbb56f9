"""A trace replayed on the hardware it was measured on (scaled mode, source == target).

Compute, fetch and launch costs keep the measured durations (ratio 1 per event); collectives are
re-costed by the target's alpha-beta model in every mode (a documented modelling choice), so the
step time matches an as-measured replay only as far as that model matches the measured
collectives. Synthetic traces time their collectives with that same model on their source
hardware, so for them the match holds up to the generator's jitter, on one node and across
nodes. Also: the scaled-mode error message, and display of float noise and ratios.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from analyzers.report import fmt
from analyzers.report.compare import Delta, _delta_row
from mtia_trace.cli.output import render_table
from mtia_trace.errors import UsageError
from mtia_trace.schema import KINDS
from replay.costs import MEASURED_DUR, AsMeasured
from replay.graph import build_graph
from replay.hardware import collectives as coll_mod
from replay.hardware import load_spec, model_for
from replay.hardware.compute import kind_codes, kind_mask
from replay.hardware.model import WORK_KINDS
from replay.pipeline import costing_input
from replay.run import replay_events

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "synth" / "dcnv2_train_2rank"


def _close(got: np.ndarray, measured: np.ndarray) -> None:
    """The source's interference is taken out of measured work by a first-order inverse (its
    stretch evaluated on the measured schedule, whose kernels are already stretched and moved),
    so putting it back matches the measured durations on the whole, not exactly per event
    (measured on the synth cases: mean relative error 0.1-0.7 %, 95th percentile up to 7 %)."""
    err = np.abs(got / measured - 1)
    assert err.mean() < 0.01 and np.quantile(err, 0.95) < 0.1, (err.mean(), err.max())


@pytest.fixture(scope="module")
def sample_events() -> pa.Table:
    from mtia_trace.ingest import load
    from replay.hardware.source import with_source

    ev, src, _ = with_source(load(SAMPLE))
    assert src == "h100"
    return ev


def _measured_work(events: pa.Table, c) -> np.ndarray:  # noqa: ANN001
    """``c.compute_us + c.fetch_us`` with the source's (h100's) interference put back on the
    measured schedule (scaled mode takes it out by a first-order inverse)."""
    ts = events.column("ts_us").to_numpy()
    dur = events.column(MEASURED_DUR).to_numpy()
    comm = kind_mask(kind_codes(events.column("kind")), "collective", "p2p")
    start = np.where(comm, ts + dur - events.column("dur_us").to_numpy(), ts)
    # as the inverse defines it: each kernel at its measured start with its clean length
    end = np.where(c.interference.victim, ts + c.compute_us + c.fetch_us, ts + dur)
    c1, f1 = c.interference.apply(c.compute_us, c.fetch_us, ts, start, end)
    return c1 + f1


def _mean_step(result) -> float:  # noqa: ANN001
    s = result.steps.to_pandas()
    return float(s.groupby("step")["total_us"].mean().mean())


def test_scaled_same_hardware_keeps_measured_work(sample_events: pa.Table) -> None:
    ci = costing_input(sample_events, build_graph(sample_events))
    c = model_for("h100", mode="scaled").cost(ci)
    assert c.notes["mode"] == "scaled" and c.notes["source_hw"] == "h100"
    kind = kind_codes(sample_events.column("kind"))
    dev = sample_events.column("is_device").to_numpy(zero_copy_only=False)
    dur = sample_events.column("dur_us").to_numpy()
    work = kind_mask(kind, *WORK_KINDS) & dev
    assert work.sum() > 100 and kind_mask(kind[work], "gemm").any()
    # ratio 1 per event: compute + fetch is the measured duration, split by the roofline share,
    # less h100's own interference where compute overlapped communication in the trace
    assert c.notes["source_overlap_removed_events"] > 0
    assert c.notes["source_overlap_removed_us"] > 0
    got = _measured_work(ci, c)[work]
    _close(got, dur[work])
    assert (c.collective_us[work] == 0).all() and (c.host_us[work] == 0).all()
    gemm = work & kind_mask(kind, "gemm")
    assert c.compute_us[gemm].sum() > 0.5 * dur[gemm].sum()
    # kernel launches keep their measured duration (launch-overhead ratio 1)
    names = np.array(sample_events.column("name").to_pylist(), dtype=object)
    launch = (kind == KINDS.index("runtime")) & np.array(["aunch" in (n or "") for n in names])
    assert launch.any()
    np.testing.assert_allclose(c.host_us[launch], dur[launch])
    # an other target does change them
    m = model_for("mtia300", mode="scaled").cost(sample_events)
    assert not np.allclose((m.compute_us + m.fetch_us)[gemm], dur[gemm])


def test_scaled_mode_still_prices_collectives_by_alpha_beta(sample_events: pa.Table) -> None:
    c = model_for("h100", mode="scaled").cost(sample_events)
    assert "alpha-beta" in c.notes["collective_costing"]
    kind = kind_codes(sample_events.column("kind"))
    dev = sample_events.column("is_device").to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(kind_mask(kind, "collective") & dev)
    assert len(idx)
    take = pa.array(idx)
    col = lambda n: np.nan_to_num(sample_events.column(n).to_numpy()[idx].astype(float))  # noqa: E731
    expect = coll_mod.collective_costs(
        load_spec("h100"), coll_mod.op_codes(sample_events.column("coll_op").take(take)),
        col("coll_bytes_in"), col("coll_bytes_out"), col("group_size"))
    np.testing.assert_allclose(c.collective_us[idx], expect.collective_us)
    dur = sample_events.column("dur_us").to_numpy()[idx]
    assert not np.allclose(c.collective_us[idx], dur)  # not the measured durations


def test_h100_replay_of_h100_sample_matches_as_measured(sample_events: pa.Table) -> None:
    g = build_graph(sample_events)
    h = _mean_step(replay_events(sample_events, model_for("h100"), graph=g))
    a = _mean_step(replay_events(sample_events, AsMeasured(), graph=g))
    # the source's interference comes out of measured work by an approximate inverse
    # (`_close`): the step matches to a few 1e-3 (measured 0.3 %), not exactly
    assert h == pytest.approx(a, rel=5e-3)


#: Both queue a rank's collectives on the pool of the links they cross (in-node links, NICs:
#: `replay.hardware.model.pool_class`), but the generator hands a pool to collectives in the
#: order they are issued and the replay in the order they are ready (DESIGN §5). At 40 ranks
#: the backward's cross-node all-to-all, ready first, waits in the generator behind DDP
#: all-reduce buckets issued before it but started later on their own stream (1.1 ms instead
#: of the replay's 0.2 ms), so the replay is 9.7% short of the as-measured step (16 ranks:
#: 1.5%, within the 3%). With one pool for both link classes the generator was 9.3% / 9.5% off.
#: Serving the generator's pools in ready order (its own ready times, timeline rerun until the
#: grants settle) was tried and not kept: 16 ranks 8.2% off, and at 40 the grants oscillate,
#: as the generator's ready times are not the replay's either.
_ISSUE_ORDER_QUEUE = pytest.mark.xfail(strict=True, reason=(
    "the generator queues collectives for a pool in issue order, the replay in ready order: "
    "40-rank h100 replay 9.7% short of as-measured"))


@pytest.mark.parametrize("opts", [
    dict(ranks=8, batch=8192),                      # one node: NVLink collectives only
    dict(ranks=16, batch=8192, sharding="twrw"),    # two nodes: all-to-all on NICs
    pytest.param(dict(preset="rec-150b", batch=4000),         # 40 ranks on five nodes, twrw
                 marks=_ISSUE_ORDER_QUEUE),
], ids=["8-ranks", "16-ranks-twrw", "40-ranks-rec150b"])
def test_h100_replay_of_h100_synth_close_to_as_measured(tmp_path: Path, opts: dict) -> None:
    """The generator times collectives with the replay's model (and link pool) on its source
    hardware, so replaying on that hardware reproduces the measured step up to the jitter (the
    replay costs each collective without it)."""
    from mtia_trace.ingest import load
    from mtia_trace.synth import SynthOptions, synthesize
    from replay.hardware.source import with_source

    synthesize(SynthOptions(steps=2, seed=1, **opts), tmp_path / "t")
    ev, src, _ = with_source(load(tmp_path / "t"))
    assert src == "h100"
    g = build_graph(ev)
    hm = model_for("h100")
    hr = replay_events(ev, hm, graph=g)
    h = _mean_step(hr)
    a = _mean_step(replay_events(ev, AsMeasured(), graph=g))
    assert h == pytest.approx(a, rel=0.03)
    if opts.get("ranks", 40) > 8:
        # the cross-node all-to-alls are direct; collectives spanning nodes use the NICs
        assert any(k.startswith("direct/") for k in hr.notes["collective_algorithms"])
    # compute and fetch are carried over exactly, but for h100's own overlap slowdown
    ci = costing_input(ev, g)
    c, m = hm.cost(ci), AsMeasured().cost(ci)
    kind = kind_codes(ev.column("kind"))
    work = kind_mask(kind, *WORK_KINDS) & ev.column("is_device").to_numpy(zero_copy_only=False)
    _close(_measured_work(ci, c)[work], m.dur_us[work])


def test_scaled_without_source_names_the_flag_once() -> None:
    from replay.hardware.source import tag_source
    from tests.test_hardware_costs import events

    ev = events([dict(kind="gemm", flops=1e9, dur_us=50.0)])
    ev = tag_source(ev, None, "trace declares no deviceProperties; pass --source-hw NAME for "
                              "scaled costing")
    with pytest.raises(UsageError) as e:
        model_for("h100", mode="scaled").cost(ev)
    msg = str(e.value)
    assert msg.count("--source-hw") == 1 and "--source " not in msg
    assert "no deviceProperties" in msg and "--mode roofline" in msg


# -- display of float noise and ratios ---------------------------------------------------------
def test_table_rounds_microsecond_noise_only() -> None:
    t = pa.table({"step": [1, 2], "idle_us": [1.621e-08, 3.5], "loss_rate": [1e-7, 0.0]})
    text = render_table(t)
    assert "e-08" not in text and "1e-07" in text
    rows = text.splitlines()[2:]
    # one column, one number of decimals: noise shows as a zero like its neighbours
    assert rows[0].split()[1] == "0.000" and rows[1].split()[1] == "3.500"


def test_compare_ratio_of_noise_is_a_dash() -> None:
    assert fmt.us_ratio(1e-8, 2.21e-8) == "1.00×"        # both zero up to noise
    assert fmt.us_ratio(1e-8, 5.0) == "–"                 # baseline ~0: no ratio
    assert fmt.us_ratio(0.0, 5.0) == "–"
    assert fmt.us_ratio(2.0, 5.0) == "2.50×"
    assert fmt.us_rel(1e-8, 5.0) == "–" and fmt.us_rel(2.0, 3.0) == "+50.0%"
    assert fmt.us(1.6e-8) == "0.0" and fmt.us(-1e-9) == "0.0" and fmt.signed_us(1e-9) == "0.0"
    row = _delta_row(Delta("queue", 1e-8, 2.21e-8), 1000.0)
    assert row[1:5] == ["0.0", "0.0", "0.0", "1.00×"]
    row = _delta_row(Delta("queue", 1e-8, 12.0), 1000.0)
    assert row[4] == "–" and row[3] == "+12.0"
