"""The events table's row order within a file (track, start, longer first, file order) is that
of a lexicographic sort, on random rows with many equal starts, -0.0 and many tracks."""

from __future__ import annotations

import numpy as np

from mtia_trace.ingest.assemble import _track_time_order


def test_track_time_order_is_the_lexicographic_sort() -> None:
    rnd = np.random.default_rng(1)
    for k in range(3000):
        n = int(rnd.integers(0, 80))
        ts = (rnd.choice([0.0, -0.0, 1.0, 2.5, 3.0, 1e12, 1e12 + 0.001], n) if k % 2
              else rnd.random(n).round(1))
        dur = rnd.choice([0.0, -0.0, 1.0, 5.0, 2.0], n)
        tracks = rnd.integers(0, 4 if k % 3 else 40_000, n)  # 40k: past a 16-bit radix sort
        want = np.lexsort((-dur, ts, tracks))
        np.testing.assert_array_equal(_track_time_order(tracks, ts, dur), want)
