"""Gates on the out-of-sample checks: each figure of benchmarks/results/*.json against its bound
in benchmarks/gates.json (today's figure plus a small margin), so a change that makes the model
worse against published measurements fails.

    python benchmarks/gates.py            check the results files against the bounds (exit 1)
    python benchmarks/gates.py --update   set every bound to the results' figure + MARGIN

Figures (all errors, smaller is better): per nccl-tests table (validate_collectives.py) the
median and 90th-percentile relative error and the |median signed time error| of each size band;
per training run (validate_throughput.py) the |step time error|, and per ratio of two runs of one
publication the |ratio error|. tests/test_gates.py recomputes the figures and checks them with
`check`; update the results first (each validate script's ``--json-out``), then the bounds, and
say in the commit which figures moved and why.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GATES = HERE / "gates.json"
RESULTS = HERE / "results"
#: bound = figure + MARGIN, rounded up to 0.1 percentage point
MARGIN = 0.01


def figures(collectives: list[dict], throughput: dict) -> dict[str, dict[str, float]]:
    """Every gated figure, by group (collectives / throughput / throughput_ratios) and name."""
    coll: dict[str, float] = {}
    for t in collectives:
        coll[f"{t['name']} median"] = t["median"]
        coll[f"{t['name']} p90"] = t["p90"]
        for band, b in t["bias"].items():
            if b is not None:
                coll[f"{t['name']} {band}"] = abs(b)
    return {"collectives": coll,
            "throughput": {p["name"]: abs(p["step_error"]) for p in throughput["points"]},
            "throughput_ratios": {r["name"]: abs(r["error"]) for r in throughput["ratios"]}}


def check(got: dict[str, dict[str, float]], gates: dict) -> list[tuple[str, str, float, float | None]]:
    """(group, name, figure, bound) of every figure; bound None where the figure has no gate.
    A bound whose figure is missing comes back with figure NaN (a gate that no longer runs)."""
    out: list[tuple[str, str, float, float | None]] = []
    for group in ("collectives", "throughput", "throughput_ratios"):
        bounds = gates.get(group, {})
        figs = got.get(group, {})
        out += [(group, n, v, bounds.get(n)) for n, v in figs.items()]
        out += [(group, n, math.nan, b) for n, b in bounds.items() if n not in figs]
    return out


def failures(rows: list[tuple[str, str, float, float | None]]) -> list[str]:
    """The rows that break their gate, in words."""
    bad = []
    for group, name, v, b in rows:
        if b is None:
            bad.append(f"{group}: {name} = {v:.1%} has no bound in benchmarks/gates.json")
        elif math.isnan(v):
            bad.append(f"{group}: {name} has a bound but no figure (table or point gone?)")
        elif v > b:
            bad.append(f"{group}: {name} = {v:.1%} exceeds its bound {b:.1%}")
    return bad


def bound(v: float) -> float:
    return math.ceil(round((v + MARGIN) * 1000, 6)) / 1000


def load_results(results: Path = RESULTS) -> dict[str, dict[str, float]]:
    return figures(json.loads((results / "collectives.json").read_text(encoding="utf-8")),
                   json.loads((results / "throughput.json").read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true",
                    help="rewrite benchmarks/gates.json from the results (figure + margin)")
    a = ap.parse_args(argv)
    got = load_results()
    if a.update:
        doc = {"margin": MARGIN, **{g: {n: bound(v) for n, v in figs.items()}
                                    for g, figs in got.items()}}
        GATES.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {GATES.relative_to(HERE.parent)}")
        return 0
    rows = check(got, json.loads(GATES.read_text(encoding="utf-8")))
    for group, name, v, b in rows:
        print(f"{group:<18} {name:<58} {v:>7.1%}  bound {'-' if b is None else f'{b:.1%}':>6}")
    bad = failures(rows)
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
