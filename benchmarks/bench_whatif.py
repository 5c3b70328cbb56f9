"""Benchmark: the causal profile (`whatif`, 20 groups ranked) on a ~100k-event trace and the
causal diff (`diff`) of two ~100k-event traces of one program. Target: each well under 10 s on
a 2-core machine. Prints wall times, events, and (as a same-run reference) the time of one
plain as-measured replay of the same trace, so the ratios are machine-independent.

    python benchmarks/bench_whatif.py [--events 100000] [--top 20] [--shape cpu|synth]

--shape cpu (default): the bundled torch CPU sample (2 ranks, gloo) repeated back to back to
--events; NEW is the same with every leaf op up to 20% shorter. --shape synth: `mtia-trace
synth --preset dlrm-dcnv2` (--ranks, steps chosen to reach --events); NEW the same program with
another jitter seed. A prediction is one schedule of the graph, so the figures follow the
scheduler's speed on the trace's shape.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from mtia_trace.ingest import load
from mtia_trace.synth import SynthOptions, synthesize
from replay.counterfactual import causal_profile, prepare
from replay.diff import diff_traces
from replay.run import replay_events

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "torch_cpu_dlrm"


def _synth(folder: Path, ranks: int, steps: int, seed: int) -> pa.Table:
    synthesize(SynthOptions(preset="dlrm-dcnv2", ranks=ranks, steps=steps, seed=seed), folder)
    return load(folder).events


def tiled(events: pa.Table, n_events: int, jitter: float = 0.0, seed: int = 0) -> pa.Table:
    """``events`` repeated back to back (steps, collective sequence numbers and ids shifted) until
    about ``n_events``; ``jitter`` scales every duration by 1 + U(-jitter, jitter) (a second
    run of the same program; each event still ends where its measured children let it)."""
    k = max(1, -(-n_events // events.num_rows))
    n = events.num_rows
    ts = events.column("ts_us").to_numpy()
    span = float((ts + events.column("dur_us").to_numpy()).max() - ts.min()) + 1000.0
    step = events.column("step").to_numpy()
    nsteps = int(step.max()) + 1 if (step >= 0).any() else 1
    seq = events.column("coll_seq").to_numpy()
    nseq = int(seq.max()) + 1 if (seq >= 0).any() else 1
    parts = []
    for i in range(k):
        cols = {c: events.column(c).to_numpy(zero_copy_only=False) for c in events.column_names}
        cols["ts_us"] = ts + i * span
        cols["step"] = np.where(step >= 0, step + i * nsteps, step)
        cols["coll_seq"] = np.where(seq >= 0, seq + i * nseq, seq)
        for c in ("event_id", "parent_id", "launch_id"):
            v = cols[c]
            cols[c] = np.where(v >= 0, v + i * n, v)
        for c in ("correlation", "external_id"):
            v = cols[c]
            cols[c] = np.where(v >= 0, v + i * (int(v.max()) + 1), v)
        parts.append(pa.table(cols, schema=events.schema))
    t = pa.concat_tables(parts).combine_chunks()
    if jitter:
        rng = np.random.default_rng(seed)
        # jitter leaves only: a parent's span keeps holding its children
        leaf = np.ones(t.num_rows, dtype=bool)
        par = t.column("parent_id").to_numpy()
        leaf[par[par >= 0]] = False
        d = t.column("dur_us").to_numpy()
        f = np.where(leaf, 1.0 - jitter * rng.random(t.num_rows), 1.0)
        t = t.set_column(t.schema.get_field_index("dur_us"), t.schema.field("dur_us"),
                         pa.array(d * f))
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--shape", choices=["cpu", "synth"], default="cpu",
                    help="cpu: the bundled torch CPU sample tiled; synth: dlrm-dcnv2 (GPU)")
    a = ap.parse_args()
    if a.shape == "cpu":
        sample = load(SAMPLE).events
        base = tiled(sample, a.events)
        new = tiled(sample, a.events, jitter=0.2, seed=1)
        print(f"trace: {SAMPLE.name} (2 ranks, gloo, CPU) tiled to {base.num_rows:,} events; "
              "NEW: leaf durations shortened by U(0, 20%)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            probe = _synth(Path(tmp) / "probe", a.ranks, 1, 0)
            steps = max(1, -(-a.events // probe.num_rows))
            base = _synth(Path(tmp) / "base", a.ranks, steps, 0)
            new = _synth(Path(tmp) / "new", a.ranks, steps, 1)
        print(f"trace: synth dlrm-dcnv2, {a.ranks} ranks, {steps} steps, {base.num_rows:,} / "
              f"{new.num_rows:,} events (BASE / NEW, jitter seeds 0 / 1)")

    t0 = time.perf_counter()
    replay_events(base)
    t_ref = time.perf_counter() - t0

    t0 = time.perf_counter()
    p = prepare(base)
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    p.step_mean()
    t_one = time.perf_counter() - t0
    print(f"one prediction (schedule + step windows): {t_one:.3f} s")
    t0 = time.perf_counter()
    prof = causal_profile(p, top=a.top)
    t_prof = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = diff_traces(base, new)
    t_diff = time.perf_counter() - t0

    print(f"reference: one as-measured replay (graph + schedule + attribution): {t_ref:.2f} s")
    print(f"whatif: {prof.num_rows} groups ranked ({2 * prof.num_rows} predictions): "
          f"{t_prep + t_prof:.2f} s (graph and costs once {t_prep:.2f} s, predictions "
          f"{t_prof:.2f} s); {(t_prep + t_prof) / t_ref:.1f}x the reference")
    print(f"diff: {t_diff:.2f} s (two graphs, matching, transplant, {len(r.contributions)} "
          f"attribution groups); {t_diff / t_ref:.1f}x the reference; matched "
          f"{r.matched_fraction:.1%}, predicted {r.predicted_step_us:,.0f} us vs measured NEW "
          f"{r.new_step_us:,.0f} us ({r.error:+.2%})")


if __name__ == "__main__":
    main()
