"""The ingest keeps an event's args exactly when a later step may read one of them."""

from __future__ import annotations

import msgspec
import pytest

from mtia_trace.ingest.decode import Args
from mtia_trace.ingest.kineto import _LATE_FIELDS, _none_late


def test_no_args_set_is_spent() -> None:
    assert _none_late(Args())


@pytest.mark.parametrize("field", _LATE_FIELDS)
def test_each_late_arg_keeps_the_args(field: str) -> None:
    assert not _none_late(msgspec.structs.replace(Args(), **{field: 1}))


@pytest.mark.parametrize("field", sorted(set(Args.__struct_fields__) - set(_LATE_FIELDS)))
def test_args_read_into_columns_do_not_keep_them(field: str) -> None:
    assert _none_late(msgspec.structs.replace(Args(), **{field: 1}))
