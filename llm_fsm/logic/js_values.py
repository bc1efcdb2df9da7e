"""JavaScript's meaning for JSON values, as JsonLogic (json-logic-js) uses it: ``String(value)``,
conversion to a number, ``==`` and ``===``, and ``<``-style comparisons (see :mod:`llm_fsm.logic.rules` for
where this runtime deliberately differs: no NaN, no Infinity, ``None`` is not 0)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

Number = int | float
_SCALARS = (str, int, float, bool)  # the types compared as they are when both sides have the same one
_NUMERIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def js_str(value: object) -> str:
    """JavaScript ``String(value)`` for JSON values."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return js_number_str(value)
    if isinstance(value, (list, tuple)):
        return ",".join("" if item is None else js_str(item) for item in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    return str(value)


def js_number_str(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    mantissa, _, exponent = repr(value).partition("e")
    return f"{mantissa}e{int(exponent):+d}" if exponent else mantissa


def to_number(value: object) -> Number | None:
    """A number, a numeric string converted, else None (booleans are not numbers)."""
    if type(value) is int or type(value) is float:  # the common case first (bool is a type of its own)
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _NUMERIC.fullmatch(value.strip()):
        return tidy(float(value))
    return None


def tidy(value: Number | None) -> Number | None:
    """Whole floats become ints; NaN and infinities become None."""
    if not isinstance(value, float):
        return value
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) <= 2**53 else value


def unbool(value: object) -> object:
    return int(value) if isinstance(value, bool) else value


def kind(value: object) -> str:
    if value is None or isinstance(value, (bool, str)):
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else "object"


def strict_equal(a: object, b: object) -> bool:
    return kind(a) == kind(b) and a == b


def loose_equal(a: object, b: object) -> bool:
    """JavaScript ``==`` for JSON values (containers compare by content)."""
    if type(a) is type(b) and type(a) in _SCALARS:  # the common case: two strings, two numbers, two booleans
        return a == b
    if a is None or b is None:
        return a is None and b is None
    a, b = unbool(a), unbool(b)
    if kind(a) == kind(b) == "object":
        return a == b
    a = js_str(a) if kind(a) == "object" else a
    b = js_str(b) if kind(b) == "object" else b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    x, y = (0 if isinstance(v, str) and not v.strip() else to_number(v) for v in (a, b))
    return x is not None and y is not None and x == y


def compare(a: object, b: object, test: Callable[[Any, Any], bool]) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return test(a, b)
    x, y = to_number(unbool(a)), to_number(unbool(b))
    return x is not None and y is not None and test(x, y)
