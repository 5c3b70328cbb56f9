"""The causal diff against real perturbed runs (skipped when ../shared/traces/real/pairs is
absent): `diff a b` predicts b's measured mean step within 3% on every pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REAL, requires_real

from mtia_trace.ingest import load
from replay.diff import diff_traces

pytestmark = [requires_real, pytest.mark.real]
PAIRS_DIR = REAL / "pairs"
PAIRS = sorted(p for p in PAIRS_DIR.iterdir() if (p / "a").is_dir() and (p / "b").is_dir()) \
    if PAIRS_DIR.is_dir() else []


@pytest.mark.skipif(not PAIRS, reason=f"no pairs under {PAIRS_DIR}")
@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_diff_predicts_the_perturbed_run(pair: Path) -> None:
    r = diff_traces(load(pair / "a").events, load(pair / "b").events)
    assert r.matched_fraction > 0.95
    assert abs(r.error) <= 0.03, (f"{pair.name}: predicted {r.predicted_step_us:.0f} us, "
                                  f"measured {r.new_step_us:.0f} us ({r.error:+.1%})")
    total = sum(d for _, d in r.contributions)
    assert total == pytest.approx(r.predicted_step_us - r.base_replayed_us, abs=1e-6)
