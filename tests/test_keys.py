"""Composite keys by factorization: distinct tuples never share a code, however far apart."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mtia_trace.keys import codes, joint_codes, joint_keys, lookup

_ID = st.integers(-1, 2**62)  # ids of any magnitude, -1 for "none"
_ROWS = st.lists(st.tuples(_ID, _ID, _ID), min_size=1, max_size=60)


def _far_apart(rows):
    """Rows plus copies whose ids are shifted by powers of two (the aliases of bit-packing)."""
    out = list(rows)
    for r, d, s in rows:
        for shift in (12, 20, 32, 40):
            out.append((r, d, (s + (1 << shift)) % 2**62))
            out.append(((r + (1 << shift)) % 2**62, d, s))
    return out


@settings(max_examples=60, deadline=None)
@given(_ROWS)
def test_codes_equal_exactly_when_tuples_equal(rows):
    rows = _far_apart(rows)
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    k = codes(*cols)
    first: dict[tuple, int] = {}
    for row, code in zip(rows, k.tolist()):
        first.setdefault(row, code)
        assert first[row] == code
    assert len(set(k.tolist())) == len(set(rows))


@settings(max_examples=60, deadline=None)
@given(_ROWS, _ROWS)
def test_joint_codes_look_up_only_equal_tuples(left, right):
    right = _far_apart(right) + left[:3]
    lc, rc = joint_codes(tuple(np.array(c, dtype=np.int64) for c in zip(*left)),
                         tuple(np.array(c, dtype=np.int64) for c in zip(*right)))
    pos = lookup(lc, rc)
    for q, p in zip(right, pos.tolist()):
        if q in left:
            assert p == left.index(q)
        else:
            assert p == -1


def test_streams_7_and_4103_differ():
    k = codes(np.array([0, 0]), np.array([0, 0]), np.array([7, 4103]))
    assert k[0] != k[1]


_SMALL = st.integers(-3, 40)  # spans that pack into one int64
_EXTREME = st.sampled_from([-(2**63), -(2**62), -1, 0, 7, 2**62, 2**63 - 1])  # ones that do not


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.one_of(_SMALL, _EXTREME), _SMALL), min_size=1, max_size=40),
       st.lists(st.tuples(st.one_of(_SMALL, _EXTREME), _SMALL), min_size=1, max_size=40))
def test_joint_keys_equal_exactly_when_tuples_equal(left, right):
    lk, rk = joint_keys(tuple(np.array(c, dtype=np.int64) for c in zip(*left)),
                        tuple(np.array(c, dtype=np.int64) for c in zip(*right)))
    rows, got = left + right, lk.tolist() + rk.tolist()
    for a, ka in zip(rows, got):
        for b, kb in zip(rows, got):
            assert (a == b) == (ka == kb)
