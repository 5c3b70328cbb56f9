"""Fixed number formats shared by every renderer, so outputs are stable and diffable."""

from __future__ import annotations

import math

#: Durations below this many µs (1 ps) are float noise of sums that cancel; shown as 0, and a
#: ratio or relative change against such a baseline is shown as "–".
NOISE_US = 1e-6


def is_noise_us(x: float | None) -> bool:
    """True for a duration (µs) that is zero up to float noise."""
    return x is not None and not math.isnan(x) and abs(x) < NOISE_US


def us(x: float) -> str:
    """Microseconds with one decimal and thousands separators: ``1,440.0``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{0.0 if is_noise_us(x) else x:,.1f}"


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
    if x is None or math.isnan(x):
        return "–"
    return "0.0" if is_noise_us(x) else f"{x:+,.1f}"


def ratio(x: float) -> str:
    if x is None or math.isnan(x) or math.isinf(x):
        return "–"
    return f"{x:.2f}×"


def us_ratio(a: float, b: float) -> str:
    """``b / a`` of two durations (µs); "–" when the baseline ``a`` is zero up to noise (a
    ratio of float noise means nothing) and 1.00× when both are."""
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return "–"
    if is_noise_us(a):
        return ratio(1.0) if is_noise_us(b) else "–"
    return ratio(b / a)


def us_rel(a: float, b: float) -> str:
    """Relative change ``(b - a) / a`` of two durations (µs), "–" against a ~zero baseline."""
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return "–"
    if is_noise_us(a):
        return signed_pct(0.0) if is_noise_us(b) else "–"
    return signed_pct((b - a) / a)


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
        if value.is_integer() and abs(value) < 1e15:
            return f"{value:,.0f}"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return str(value)


def duration(x: float) -> str:
    """A duration in µs with the unit that fits: ``13.32 s``, ``107.3 ms``, ``382.4 µs``."""
    if x is None or math.isnan(x):
        return "–"
    if is_noise_us(x):
        return "0 µs"
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(x) >= scale:
            v = x / scale
            return f"{v:,.2f} {unit}" if abs(v) < 100 else f"{v:,.1f} {unit}"
    return f"{x:,.1f} µs"
