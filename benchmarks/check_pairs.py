"""Accuracy of `diff` and of named `--whatif`s on real perturbed runs (not a timing benchmark).

For every pair under ../shared/traces/real/pairs (or --pairs DIR): measured mean step of a and
b, what `diff a b` predicts for b and its error; what a `--whatif` that names the known change
predicts from a alone (read from the pair's WHATIF file when present, else from the table
below for the known pairs); and how much of b's change no what-if can name: the change of the
CPU time of the *unchanged* ops (ops and their self time outside the named change, on both
ranks, collectives excluded), which on a shared 2-core machine is CPU contention between the
ranks (and run-to-run noise).

    python benchmarks/check_pairs.py [--pairs DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mtia_trace.errors import UsageError
from mtia_trace.ingest import load
from replay.counterfactual import prepare
from replay.diff import diff_traces, match_events, transplant
from replay.whatif import nested, parse_whatif, select

#: What-ifs that name each known pair's change (README.md of each pair says what changed).
NAMED = {
    # rank 1 sleeps 8 ms in data_wait (a leaf annotation around time.sleep)
    "dp_straggler": ["rank=1,kind=annotation,name=data_wait:+8ms"],
    # rank 1's extra_compute: 4 mm of 320x320 instead of 64x64: (320/64)^3 = 125x the flops
    "dp_compute": ["rank=1,scope=extra_compute,name=aten::mm:x125"],
    # table 3 (rank 1) pooling 60 instead of 20: rank 1 looks up 8+60 rows per sample, not 8+20
    "dp_embedding": ["rank=1,name=aten::embedding_bag:x2.43",
                     "rank=1,name=*EmbeddingBagBackward*:x2.43"],
    # top MLP first hidden layer 384 wide, not 128: its forward GEMMs do 3x the flops
    "dp_dense": ["scope=top_mlp,kind=gemm:x3"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path,
                    default=Path(__file__).resolve().parents[1].parent / "shared" / "traces"
                    / "real" / "pairs")
    a = ap.parse_args()
    pairs = sorted(p for p in a.pairs.iterdir() if (p / "a").is_dir() and (p / "b").is_dir())
    print("| pair | measured a (us) | measured b (us) | diff predicts b (us) | error | matched |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for pair in pairs:
        ea, eb = load(pair / "a").events, load(pair / "b").events
        r = diff_traces(ea, eb)
        print(f"| {pair.name} | {r.base_step_us:,.0f} | {r.new_step_us:,.0f} | "
              f"{r.predicted_step_us:,.0f} | {r.error:+.1%} | {r.matched_fraction:.1%} |")
        rows.append((pair, ea, eb, r))
    print()
    print("| pair | --whatif naming the change | predicts b (us) | error vs measured b | "
          "CPU time of unchanged ops, b vs a (contention) |")
    print("|---|---|---:|---:|---:|")
    for pair, ea, eb, r in rows:
        texts = NAMED.get(pair.name)
        f = pair / "WHATIF"
        if f.is_file():
            texts = [t.strip() for t in f.read_text().splitlines() if t.strip()]
        if not texts:
            print(f"| {pair.name} | (none known) | | | |")
            continue
        pa_ = prepare(ea)
        ws = [parse_whatif(t) for t in texts]
        try:
            pred = pa_.predict(ws)
        except UsageError as e:  # a what-if naming ops this recording does not have
            print(f"| {pair.name} | `{'` `'.join(texts)}` | {e} | | |")
            continue
        named = np.zeros(pa_.graph.n, dtype=bool)
        for w in ws:
            named |= nested(ea, pa_.graph, select(ea, pa_.graph, w))
        # busy time of matched work outside the named change, a vs b
        pb_ = prepare(eb)
        m = match_events(ea, eb)
        tp = transplant(pa_, pb_, m)
        kind = ea.column("kind").to_numpy(zero_copy_only=False).astype(str)
        # the ops' own CPU time outside the named change (collectives excluded: their transfer
        # part is itself mostly contention on a shared CPU)
        keep = ~named & ~np.isin(kind, ["collective", "p2p"])
        ca = np.nansum(np.where(np.isfinite(tp.cost_new) & keep, tp.cost_base, 0.0) * pa_.leaf)
        cb = np.nansum(np.where(np.isfinite(tp.cost_new) & keep, tp.cost_new, 0.0) * pa_.leaf)
        ops = keep & ~tp.loop  # the loop between a step's regions is no op's time
        sa = np.nansum(np.where(np.isfinite(tp.self_new) & ops, tp.self_base, 0.0))
        sb = np.nansum(np.where(np.isfinite(tp.self_new) & ops, tp.self_new, 0.0))
        steps = max(len(np.unique(ea.column("step").to_numpy()[ea.column("step").to_numpy()
                                                                  >= 0])), 1)
        d = (cb + sb - ca - sa) / steps
        ranks = len(np.unique(ea.column("rank").to_numpy()))
        print(f"| {pair.name} | `{'` `'.join(texts)}` | {pred:,.0f} | "
              f"{(pred - r.new_step_us) / r.new_step_us:+.1%} | {d / ranks:+,.0f} us per rank "
              f"and step ({d / max((ca + sa) / steps, 1e-9):+.0%}) |")


if __name__ == "__main__":
    main()
