"""The one number format of the findings, the report and its plots' captions, and the one format of a range."""

from __future__ import annotations

#: Between a range's two ends: an en dash (attnprof.render.breaks keeps ``lo–hi`` on one line in print).
EN_DASH = "\u2013"
#: Units written against the number, without a space (``1.64×``); every other unit follows a space (``53.7 ms``).
_UNSPACED = ("×",)


def format_number(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits; integers, and values of 10**digits and
    more (MiB, µs), without decimals and never in scientific notation."""
    if float(value).is_integer() and abs(value) < 1e6 or abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def format_range(lo: float | str, hi: float | str, unit: str = "", digits: int = 3) -> str:
    """A range or an interval as the findings, the report and the comparison write it: its two ends with an en dash
    between them and their shared unit once, after both (``37.6–53.7 ms``, not ``37.6 ms-53.7 ms``). A number is
    written with :func:`format_number` (``digits`` significant digits), an end given as text (already formatted, or
    'n/a') as it is; ``unit`` '' writes none."""
    ends = [end if isinstance(end, str) else format_number(end, digits) for end in (lo, hi)]
    space = "" if not unit or unit in _UNSPACED else " "
    return f"{ends[0]}{EN_DASH}{ends[1]}{space}{unit}"


def format_value(value, digits: int = 3) -> str:
    """A table cell or a sentence's number as the report writes it: a number with :func:`format_number`, '' for a
    missing value (None, NaN), 'yes'/'no' for a bool, anything else as text."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format_number(value, digits)
    return str(value)
