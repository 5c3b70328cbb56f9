"""Benchmark: the causal profile (`whatif`, 20 groups ranked: 40 predictions) on a ~100k-event
trace and the causal diff (`diff`) of two ~100k-event traces of one program. Targets, on a 2-core
machine: whatif under 3 s, diff under 1.5 s. Each figure is printed beside a same-run reference,
one plain as-measured replay of the same trace (graph + schedule + attribution), as a ratio; the
three are measured interleaved, ``--rounds`` times, medians printed, wall and CPU time (on a
shared machine the CPU time of the process is the steadier figure).

    python benchmarks/bench_whatif.py [--events 100000] [--ranks 8] [--top 20]
                                      [--shape synth|cpu] [--rounds 3] [--one-at-a-time]

--shape synth (default): `mtia-trace synth --preset dlrm-dcnv2` (GPU-shaped: --ranks ranks,
steps chosen to reach --events); NEW the same program with another jitter seed. --shape cpu: the
bundled torch CPU sample (2 ranks, gloo) repeated back to back to --events; NEW is BASE replayed
with its embedding lookups 1.5x longer, written as a trace. --one-at-a-time also times the
profile's predictions made one schedule each (`Prepared.predict`, the path before they were
scheduled together) and checks both give the same numbers.
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
from replay.whatif import Change, WhatIf, parse_whatif

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


def _timed(f):  # noqa: ANN001, ANN202
    """(result, wall s, CPU s) of ``f()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = f()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _whatif(base: pa.Table, top: int) -> tuple[pa.Table, float]:
    """The profile as `mtia-trace whatif` makes it: graph and costs once, then the groups."""
    p = prepare(base)
    w0 = time.perf_counter()
    prof = causal_profile(p, top=top)
    return prof, time.perf_counter() - w0


def _one_at_a_time(base: pa.Table, prof: pa.Table) -> list[float]:
    """The profile's predictions made one schedule each, the way they were made before."""
    p = prepare(base)
    p.step_mean()
    out = []
    for sel in prof.column("group").to_pylist():
        terms = parse_whatif(f"{sel}:x1").terms
        for f in (0.5, 0.0):
            out.append(p.predict([WhatIf(sel, terms, Change("scale", f))]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", choices=["cpu", "synth"], default="synth",
                    help="synth: dlrm-dcnv2 (GPU); cpu: the bundled torch CPU sample tiled")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="also time the predictions made one schedule each")
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

    rows: dict[str, list[tuple[float, float]]] = {"ref": [], "whatif": [], "diff": [], "one": []}
    predict_s: list[float] = []
    prof = r = None
    for _ in range(a.rounds):  # interleaved, so each round's figures share the machine's load
        _, w, c = _timed(lambda: replay_events(base))
        rows["ref"].append((w, c))
        (prof, t_pred), w, c = _timed(lambda: _whatif(base, a.top))
        rows["whatif"].append((w, c))
        predict_s.append(t_pred)
        r, w, c = _timed(lambda: diff_traces(base, new))
        rows["diff"].append((w, c))
        if a.one_at_a_time:
            one, w, c = _timed(lambda: _one_at_a_time(base, prof))
            rows["one"].append((w, c))
            got = [v for fast, zero in zip(prof.column("step_2x_us").to_pylist(),
                                           prof.column("step_zero_us").to_pylist())
                   for v in (fast, zero)]
            assert got == one, "the one-pass predictions differ from one schedule each"
    assert prof is not None and r is not None

    def fig(key: str) -> str:
        w = float(np.median([x[0] for x in rows[key]]))
        c = float(np.median([x[1] for x in rows[key]]))
        rw = float(np.median([x[0] / y[0] for x, y in zip(rows[key], rows["ref"])]))
        rc = float(np.median([x[1] / y[1] for x, y in zip(rows[key], rows["ref"])]))
        return f"{w:.2f} s wall ({rw:.2f}x the reference), {c:.2f} s CPU ({rc:.2f}x)"

    npred = 2 * prof.num_rows
    print(f"medians of {a.rounds} interleaved rounds")
    print(f"reference: one as-measured replay (graph + schedule + attribution): "
          f"{float(np.median([x[0] for x in rows['ref']])):.2f} s wall, "
          f"{float(np.median([x[1] for x in rows['ref']])):.2f} s CPU")
    print(f"whatif: {prof.num_rows} groups ranked ({npred} predictions, graph and costs once): "
          f"{fig('whatif')}; of it ranking and predictions "
          f"{float(np.median(predict_s)):.2f} s wall; target under 3 s")
    print(f"diff: {fig('diff')} (two graphs, matching, transplant, {len(r.contributions)} "
          f"attribution groups); target under 1.5 s; matched {r.matched_fraction:.1%}, "
          f"predicted {r.predicted_step_us:,.0f} us vs measured NEW {r.new_step_us:,.0f} us "
          f"({r.error:+.2%})")
    if a.one_at_a_time:
        print(f"the same {npred} predictions one schedule each (graph and costs once, no "
              f"ranking): {fig('one')}; identical numbers")
    if a.shape == "cpu":
        print("note: NEW is BASE's own replay with one change, so diff's prediction matches it by "
              "construction; accuracy is checked on real pairs (benchmarks/check_pairs.py)")


if __name__ == "__main__":
    main()
