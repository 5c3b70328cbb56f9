"""Group-by over sorted keys (`replay.groups`)."""

from __future__ import annotations

import numpy as np

from replay.groups import ranges, runs, segment_cumsum


def test_runs_slices_each_key_in_row_order() -> None:
    rows, bounds, values = runs(np.array([3, 1, 3, 2, 1]))
    assert values.tolist() == [1, 2, 3]
    assert [rows[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])] == [[1, 4], [3], [0, 2]]


def test_segment_cumsum_is_each_segments_own_cumsum_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    lengths = np.array([0, 1, 2, 3, 5, 8, 17, 100, 0, 4])
    x = rng.normal(size=int(lengths.sum()) + 3) * 10.0 ** rng.integers(-6, 6, size=int(lengths.sum()) + 3)
    bounds = np.r_[0, np.cumsum(lengths)]
    out = segment_cumsum(x, bounds)
    for a, b in zip(bounds[:-1], bounds[1:]):
        assert np.array_equal(out[a:b], np.cumsum(x[a:b]))
    assert np.array_equal(out[bounds[-1]:], x[bounds[-1]:])  # outside every segment: kept


def test_ranges_concatenates_each_range_with_its_index() -> None:
    vals, seg = ranges(np.array([5, 2, 7]), np.array([8, 2, 9]))
    assert vals.tolist() == [5, 6, 7, 7, 8] and seg.tolist() == [0, 0, 0, 2, 2]
