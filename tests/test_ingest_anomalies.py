"""The outlier check (`ingest.anomalies._outliers`) against its definition, one rank at a time;
the duplicate check (`ingest.anomalies._duplicates`) against a grouping of the rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mtia_trace.ingest.anomalies import (
    _DUPLICATE_KEYS,
    OUTLIER_MIN_US,
    OUTLIER_SPANS,
    _duplicates,
    _outliers,
)


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


def _duplicates_by_definition(t: pa.Table) -> tuple[int, int] | None:
    """(events beyond the first of each group of complete events equal in every key, the first
    row of the first such group), or None."""
    rows = t.to_pylist()
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if r["ph"] == "X":
            groups.setdefault(tuple(r[k] for k in _DUPLICATE_KEYS), []).append(i)
    dup = [g for g in groups.values() if len(g) > 1]
    if not dup:
        return None
    return sum(len(g) - 1 for g in dup), min(g[0] for g in dup)


def test_duplicates_by_definition() -> None:
    rnd = np.random.default_rng(5)
    seen = 0
    for _ in range(300):
        n = int(rnd.integers(1, 40))
        t = pa.table({
            "ph": rnd.choice(["X", "X", "i"], n), "rank": rnd.integers(0, 2, n).astype(np.int32),
            "track": rnd.choice(["host:1:1", "host:1:2", "dev:0:7"], n),
            "name": rnd.choice(["a", "b", "aten::mm"], n), "ts_us": rnd.choice([0.0, -0.0, 1.5], n),
            "dur_us": rnd.choice([0.0, 2.0], n), "correlation": rnd.integers(-1, 2, n),
            "external_id": rnd.integers(-1, 1, n)})
        want = _duplicates_by_definition(t)
        got = _duplicates(t)
        assert bool(got) == (want is not None)
        if want is not None:
            seen += 1
            extra, row = want
            first = t.slice(row, 1).to_pylist()[0]
            assert got[0].startswith(f"{extra} events are exact duplicates")
            assert (f"{str(first['name'])[:60]!r} on rank {first['rank']} at "
                    f"{first['ts_us']:.17g} us") in got[0]
    assert seen > 50
