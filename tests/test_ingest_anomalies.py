"""The outlier check (`ingest.anomalies._outliers`) against its definition, one rank at a time."""

from __future__ import annotations

import numpy as np

from mtia_trace.ingest.anomalies import OUTLIER_MIN_US, OUTLIER_SPANS, _outliers


def _by_definition(rank: np.ndarray, ts: np.ndarray, end: np.ndarray
                   ) -> tuple[list[int], list[float]]:
    """Per rank (ascending), rows in order: those whose start or end lies further than the
    margin from the rank's middle starts (1 % trimmed from each end, at least one event)."""
    bad, far = [], []
    for r in sorted(set(rank.tolist())):
        rows = [i for i in range(len(rank)) if rank[i] == r]
        if len(rows) < 4:
            continue
        t = sorted(ts[i] for i in rows)
        k = max(1, len(t) // 100)
        lo, hi = t[k], t[len(t) - 1 - k]
        margin = max(OUTLIER_SPANS * (hi - lo), OUTLIER_MIN_US)
        for i in rows:
            d = max(lo - ts[i], end[i] - hi)
            if d > margin:
                bad.append(i)
                far.append(d)
    return bad, far


def test_outliers_are_those_of_the_definition_in_and_out_of_rank_order() -> None:
    rng = np.random.default_rng(5)
    found = 0
    for case in range(300):
        n = int(rng.integers(1, 200))
        rank = rng.integers(0, int(rng.integers(1, 6)), n).astype(np.int32)
        if case % 2:  # the events table's order; the other half is shuffled
            rank = np.sort(rank)
        ts = rng.normal(0.0, 1e3, n)
        ts[rng.random(n) < 0.03] = rng.choice([1e9, -1e9, 1e12])
        end = ts + rng.random(n) * 10.0
        if case % 7 == 0:
            end[rng.integers(0, n)] = 1e13
        bad, far = _outliers(rank, ts, end)
        want_bad, want_far = _by_definition(rank, ts, end)
        assert bad.tolist() == want_bad and far.tolist() == want_far, case
        found += len(bad)
    assert found > 20  # the cases do hold outliers
