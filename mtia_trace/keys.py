"""Composite keys of several columns (rank, device, stream; rank, correlation id; ...).

Keys are built by factorizing: one dense integer code per distinct tuple of values, so tuples
that differ anywhere get different codes whatever the magnitudes of their values. Bit-packing
(``rank << 20 | device << 12 | stream & 0xFFF``) aliases ids that do not fit their field
(streams 7 and 4103 of one device), so no module packs ids into bits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _room_for_table(n: int) -> None:
    """Take and free as much memory as factorizing ``n`` values needs, so that a shortage is a
    `MemoryError` here: pandas' hash table (sized for ``n`` up front, buckets of 16 bytes at a
    load factor of 0.77; the uniques it grows by doubling, the codes) does not check its own
    allocations, and under an address-space limit (``ulimit -v``) a failed one is a SIGSEGV."""
    if n > 1 << 16:
        buckets = 1 << int(np.ceil(np.log2(n / 0.77 + 1)))
        np.empty(16 * buckets + 48 * n, dtype=np.uint8)


def _dense(values: np.ndarray) -> tuple[np.ndarray, int]:
    values = np.asarray(values)
    _room_for_table(len(values))
    codes, uniq = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniq)


def codes(*cols: np.ndarray) -> np.ndarray:
    """One int64 code per row: equal tuples of ``cols`` values get equal codes, different tuples
    different ones (codes are dense, in order of first appearance)."""
    if not cols:
        raise ValueError("codes: need at least one column")
    out, _ = _dense(cols[0])
    for c in cols[1:]:
        cc, m = _dense(c)
        # out < n and cc < m: the pair fits in int64 for any table that fits in memory
        out, _ = _dense(out * m + cc)
    return out


def joint_codes(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]
                ) -> tuple[np.ndarray, np.ndarray]:
    """`codes` of two sets of rows in one code space: a left row and a right row get the same code
    exactly when their tuples are equal (for lookups of one table's keys in another)."""
    if len(left) != len(right):
        raise ValueError("joint_codes: both sides need the same columns")
    n = len(left[0]) if left else 0
    both = codes(*(np.concatenate([np.asarray(a), np.asarray(b)]) for a, b in zip(left, right)))
    return both[:n], both[n:]


def joint_keys(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Int64 keys of two sets of rows, equal exactly where their tuples of integer columns are
    (not dense, for sorts and lookups): each column's offset from its least value, packed by
    the columns' spans when their product fits in int64 (a few arithmetic passes), else
    `joint_codes`."""
    if len(left) != len(right):
        raise ValueError("joint_keys: both sides need the same columns")
    n = len(left[0]) if left else 0
    cols = [np.concatenate([np.asarray(a), np.asarray(b)]) for a, b in zip(left, right)]
    if not cols or not len(cols[0]) or any(c.dtype.kind != "i" for c in cols):
        return joint_codes(left, right)
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows)]
    if np.prod(np.array(spans, dtype=object)) >= 2**63:
        return joint_codes(left, right)
    out = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, span in zip(cols, lows, spans):
        out *= span
        out += c.astype(np.int64) - lo  # in [0, span): exact even where the two ends overflow
    return out[:n], out[n:]


def lookup(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Position in ``keys`` of the first row equal to each query, -1 where there is none."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.searchsorted(sk, queries)
    pos_c = np.minimum(pos, max(len(sk) - 1, 0))
    hit = (pos < len(sk)) & (sk[pos_c] == queries) if len(sk) else np.zeros(len(queries), bool)
    return np.where(hit, order[pos_c] if len(sk) else -1, -1).astype(np.int64)
