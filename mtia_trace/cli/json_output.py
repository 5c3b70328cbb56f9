"""``--format json`` output shared by every command: one JSON document on stdout.

Light on purpose (orjson only): commands that must start fast (`hw list`) use it without
loading pyarrow or pandas.
"""

from __future__ import annotations

import math
import sys

import orjson


def _json_default(value: object) -> object:
    """Values orjson does not know: Paths and other objects as text."""
    return str(value)


def _clean(value: object) -> object:
    """NaN (pandas' missing value) as null; numpy scalars as Python numbers."""
    if isinstance(value, float) and math.isnan(value):
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def json_text(obj: object) -> str:
    """Indented JSON with a final newline (numpy values and Paths handled)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                        | orjson.OPT_NON_STR_KEYS, default=_json_default).decode() + "\n"


def print_json(obj: object) -> None:
    """The ``--format json`` output of a command."""
    sys.stdout.write(json_text(obj))


def records(table: object) -> list[dict]:
    """Rows of a pyarrow table or a pandas frame as plain dicts (NaN as null)."""
    to_pylist = getattr(table, "to_pylist", None)
    if callable(to_pylist):
        return list(to_pylist())
    rows = table.to_dict("records")  # type: ignore[attr-defined]
    return [{k: _clean(v) for k, v in row.items()} for row in rows]
