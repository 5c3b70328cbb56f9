"""Benchmark: the causal profile (`whatif`, 20 groups ranked) on a ~100k-event trace and the
causal diff (`diff`) of two ~100k-event traces of one program. Target: each well under 10 s on
a 2-core machine. Prints wall times, events, and (as a same-run reference) the time of one
plain as-measured replay of the same trace, so the ratios are machine-independent.

    python benchmarks/bench_whatif.py [--events 100000] [--top 20] [--shape cpu|synth]

--shape cpu (default): the bundled torch CPU sample (2 ranks, gloo) repeated back to back to
--events; NEW is BASE replayed with its embedding lookups 1.5x longer, written as a trace. --shape synth: `mtia-trace
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
from replay.run import as_trace, replay_events
from replay.whatif import parse_whatif

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "torch_cpu_dlrm"


def _synth(folder: Path, ranks: int, steps: int, seed: int) -> pa.Table:
    synthesize(SynthOptions(preset="dlrm-dcnv2", ranks=ranks, steps=steps, seed=seed), folder)
    return load(folder).events


#: the change between BASE and NEW in the cpu shape
NEW_CHANGE = "kind=annotation,name=embedding_lookup:x1.5"


def tiled(events: pa.Table, n_events: int) -> pa.Table:
    """``events`` repeated back to back (steps, collective sequence numbers and ids shifted) until
    about ``n_events``, in the canonical row order."""
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
    # the canonical order (rank, track, ts, -dur), ids remapped to the new row positions
    _, trk = np.unique(t.column("track").to_numpy(zero_copy_only=False).astype(str),
                       return_inverse=True)
    o = np.lexsort((-t.column("dur_us").to_numpy(), t.column("ts_us").to_numpy(), trk,
                    t.column("rank").to_numpy()))
    t = t.take(pa.array(o))
    inv = np.empty(len(o), dtype=np.int64)
    inv[o] = np.arange(len(o))
    for c in ("parent_id", "launch_id"):
        v = t.column(c).to_numpy()
        t = t.set_column(t.schema.get_field_index(c), t.schema.field(c),
                         pa.array(np.where(v >= 0, inv[np.maximum(v, 0)], v)))
    t = t.set_column(t.schema.get_field_index("event_id"), t.schema.field("event_id"),
                     pa.array(np.arange(len(o), dtype=np.int64)))
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
        new = as_trace(replay_events(base, whatifs=[parse_whatif(NEW_CHANGE)]).events)
        print(f"trace: {SAMPLE.name} (2 ranks, gloo, CPU) tiled to {base.num_rows:,} events; "
              f"NEW: BASE replayed with --whatif '{NEW_CHANGE}', as a trace")
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
    if a.shape == "cpu":
        print("note: NEW is BASE's own replay with one change, so diff's prediction matches it by "
              "construction; accuracy is checked on real pairs (benchmarks/check_pairs.py)")


if __name__ == "__main__":
    main()
