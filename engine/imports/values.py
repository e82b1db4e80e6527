"""The checks every format's parser makes of a value it reads: a bad one is one line naming the field and where."""

from __future__ import annotations

import math

from engine.errors import PhoenixError


def number(value, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PhoenixError(f"{where}: {name} = {str(value)[:40]!r} is not a number")
    return float(value)


def whole(value, name: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PhoenixError(f"{where}: {name} = {str(value)[:40]!r} is not a whole number")
    return value


def rate(value, where: str) -> float:
    if value in ("inf", None) or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    return number(value, "request_rate", where)


def text(value, most: int = 300) -> str | None:
    """A short text field, or None where it is empty (an error column's "" means no error)."""
    return str(value)[:most] if value not in (None, "") else None
