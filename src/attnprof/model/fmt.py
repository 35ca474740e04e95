"""The one number format of the findings, the report and its plots' captions."""

from __future__ import annotations


def format_number(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits; integers, and values of 10**digits and
    more (MiB, µs), without decimals and never in scientific notation."""
    if float(value).is_integer() and abs(value) < 1e6 or abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"
