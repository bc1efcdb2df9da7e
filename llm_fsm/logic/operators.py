"""The JsonLogic operators :mod:`llm_fsm.logic.rules` compiles rules into: what each does with its arguments.

Values are compared and converted as JavaScript does (:mod:`llm_fsm.logic.js_values`). Most operators are
functions of their evaluated arguments (``OPS``); ``and``, ``or`` and ``if`` evaluate their own
(``LAZY_OPS``), so that a branch not taken is never evaluated. Nothing here checks a rule's shape
or depth: :mod:`llm_fsm.logic.rules` does, before it calls these.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llm_fsm.errors import LogicError
from llm_fsm.logic.js_values import (
    Number,
    compare,
    js_str,
    loose_equal,
    strict_equal,
    tidy,
    to_number,
)

Op = Callable[[list[object], object], object]  # (evaluated arguments, data) -> result
Run = Callable[[object], object]  # a compiled rule: data -> result
LazyOp = Callable[[list[Run]], Run]  # (compiled arguments) -> the compiled operation

ABSENT = object()


def truthy(value: object) -> bool:
    """JsonLogic truthiness: ``0``, ``""``, ``[]``, ``None``, ``False`` and NaN are false."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, float)):
        return value != 0 and not math.isnan(value)
    if isinstance(value, (str, list, tuple)):
        return len(value) > 0
    return True  # objects, even empty ones, are truthy as in JavaScript


# ---------------------------------------------------------------- arguments and paths


def nth_argument(args: list[object], index: int) -> object:
    return args[index] if len(args) > index else None


def _two(args: list[object]) -> tuple[object, object]:
    """The first two arguments, None for those absent (as :func:`nth_argument` reads them)."""
    if len(args) >= 2:
        return args[0], args[1]
    return (args[0] if args else None), None


def lookup(data: object, path: object) -> object:
    """The value at a dotted ``path`` (list indices allowed), or ``ABSENT``."""
    if path is None or path == "":
        return data
    return walk(data, (path if type(path) is str else js_str(path)).split("."))


def walk(data: object, parts: list[str]) -> object:
    """The value at the path split into ``parts``, or ``ABSENT``."""
    current = data
    for part in parts:
        if type(current) is dict or isinstance(current, Mapping):
            current = current.get(part, ABSENT)
        # isascii: str.isdigit() is true of digits such as "²" too, which int() refuses
        elif isinstance(current, (list, tuple)) and part.isascii() and part.isdigit():
            current = current[int(part)] if int(part) < len(current) else ABSENT
        else:
            return ABSENT
        if current is ABSENT:
            return ABSENT
    return current


def _blank(value: object) -> bool:
    return value is ABSENT or value is None or (isinstance(value, str) and value == "")


def _chain(test: Callable[[Any, Any], bool], limit: int) -> Op:
    """Compare neighbours among the first ``limit`` arguments (3 gives the "between" form)."""

    def op(args: list[object], data: object) -> bool:
        # written out (limit is 2 or 3): conditions compare on every reply
        count = min(len(args), limit)
        if count < 2 or not compare(args[0], args[1], test):
            return False
        return count == 2 or compare(args[1], args[2], test)

    return op


# ---------------------------------------------------------------- operators


def _numeric(fn: Callable[[list[Number]], Number | None]) -> Op:
    """An arithmetic operator: None if any argument is not a number or the result is not one."""

    def op(args: list[object], data: object) -> Number | None:
        numbers: list[Number] = []
        for arg in args:
            number = to_number(arg)
            if number is None:
                return None
            numbers.append(number)
        try:
            return tidy(fn(numbers))
        except (ArithmeticError, ValueError, IndexError):
            return None

    return op


def _js_mod(a: Number, b: Number) -> Number:
    # JavaScript's %: the remainder has the sign of the dividend (Python's has the divisor's)
    remainder = abs(a) % abs(b)  # ZeroDivisionError for b == 0, turned into None
    return -remainder if a < 0 else remainder


def _op_var(args: list[object], data: object) -> object:
    found = lookup(data, nth_argument(args, 0))
    return nth_argument(args, 1) if found is ABSENT else found


def _op_missing(args: list[object], data: object) -> list[object]:
    # the keys come as arguments, or as one list (the form missing_some passes them in)
    keys = args[0] if args and isinstance(args[0], (list, tuple)) else args
    return [key for key in keys if _blank(lookup(data, key))]


def _op_missing_some(args: list[object], data: object) -> list[object]:
    need, keys = to_number(nth_argument(args, 0)), nth_argument(args, 1)
    if need is None or not isinstance(keys, (list, tuple)):
        raise LogicError("missing_some expects [minimum count, [keys]]")
    missing = _op_missing([keys], data)
    return [] if len(keys) - len(missing) >= need else missing


def _op_has_context(args: list[object], data: object) -> bool:
    keys: Sequence[object]
    if in_object_form(args):  # llm-fsm's [object, key]
        data, keys = args[0], args[1:]
        if not isinstance(data, Mapping):
            return False
    else:
        keys = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise LogicError("has_context expects one or more non-empty key names")
    return all(present_value(lookup(data, key)) for key in keys)


def in_object_form(args: Sequence[object]) -> bool:
    """``[object, key]``: llm-fsm's two-argument form of ``has_context`` (key names are strings)."""
    return len(args) == 2 and not isinstance(args[0], str)


def present_value(value: object) -> bool:
    empty = isinstance(value, (str, list, tuple, Mapping)) and len(value) == 0
    return value is not ABSENT and value is not None and not empty


def _op_in(args: list[object], data: object) -> bool:
    needle, haystack = nth_argument(args, 0), nth_argument(args, 1)
    if isinstance(haystack, str):
        return js_str(needle) in haystack
    if isinstance(haystack, (list, tuple)):
        # a loop, not any() over a generator: one found early would close it by raising GeneratorExit in it
        for item in haystack:  # noqa: SIM110
            if strict_equal(needle, item):
                return True
        return False
    if isinstance(haystack, Mapping):
        return isinstance(needle, str) and needle in haystack
    return False


def _op_contains(args: list[object], data: object) -> bool:
    return _op_in([nth_argument(args, 1), nth_argument(args, 0)], data)


def _op_context_length(args: list[object], data: object) -> int:
    container, path = nth_argument(args, 0), nth_argument(args, 1)
    value = lookup(container, path) if isinstance(container, Mapping) else ABSENT
    return len(value) if isinstance(value, (str, list, tuple, Mapping)) else 0


def _deciding(stop_on: bool) -> LazyOp:
    """``and`` (stop on the first falsy value) or ``or`` (the first truthy); else the last."""

    def build(parts: list[Run]) -> Run:
        def op(data: object) -> object:
            value: object = None
            for part in parts:
                value = part(data)
                if truthy(value) is stop_on:
                    return value
            return value

        return op

    return build


def _op_if(parts: list[Run]) -> Run:
    def op(data: object) -> object:
        for i in range(0, len(parts) - 1, 2):
            if truthy(parts[i](data)):
                return parts[i + 1](data)
        # an odd count ends with the else branch; an even one has none, and gives None
        return parts[-1](data) if len(parts) % 2 else None

    return op


LAZY_OPS: dict[str, LazyOp] = {
    "and": _deciding(False),
    "or": _deciding(True),
    "if": _op_if,
    "?:": _op_if,
}

OPS: dict[str, Op] = {
    "var": _op_var,
    "missing": _op_missing,
    "missing_some": _op_missing_some,
    "has_context": _op_has_context,
    "==": lambda args, data: loose_equal(*_two(args)),
    "!=": lambda args, data: not loose_equal(*_two(args)),
    "===": lambda args, data: strict_equal(*_two(args)),
    "!==": lambda args, data: not strict_equal(*_two(args)),
    # only < and <= take the three-argument "between" form, as in json-logic-js
    "<": _chain(operator.lt, 3),
    "<=": _chain(operator.le, 3),
    ">": _chain(operator.gt, 2),
    ">=": _chain(operator.ge, 2),
    "!": lambda args, data: not truthy(nth_argument(args, 0)),
    "!!": lambda args, data: truthy(nth_argument(args, 0)),
    "in": _op_in,
    "contains": _op_contains,
    "context_length": _op_context_length,
    "cat": lambda args, data: "".join(js_str(arg) for arg in args),
    "+": _numeric(sum),
    "*": _numeric(lambda n: math.prod(n) if n else None),
    "-": _numeric(lambda n: -n[0] if len(n) == 1 else n[0] - n[1]),
    "/": _numeric(lambda n: n[0] / n[1]),
    "%": _numeric(lambda n: _js_mod(n[0], n[1])),
    "min": _numeric(min),
    "max": _numeric(max),
}
