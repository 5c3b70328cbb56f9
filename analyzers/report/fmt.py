"""Fixed number formats shared by every renderer, so outputs are stable and diffable."""

from __future__ import annotations

import math


def us(x: float) -> str:
    """Microseconds with one decimal and thousands separators: ``1,440.0``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.1f}"


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal: ``0.374 -> 37.4%``."""
    if x is None or math.isnan(x):
        return "–"
    return f"{100.0 * x:.1f}%"


def signed_pct(x: float) -> str:
    if x is None or math.isnan(x) or math.isinf(x):
        return "–"
    return f"{100.0 * x:+.1f}%"


def signed_us(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:+,.1f}"


def ratio(x: float) -> str:
    if x is None or math.isnan(x) or math.isinf(x):
        return "–"
    return f"{x:.2f}×"


def nbytes(x: float) -> str:
    """Decimal byte units: ``8.0 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} B"


def cell(value: object) -> str:
    """Generic table cell: floats get 4 significant digits, everything else its str."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return str(value)
