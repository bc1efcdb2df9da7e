"""What a context value may be: JSON data, so that a snapshot round trip (any store) returns it unchanged.

Values that code writes (handler deltas, ``update_context``, resume results, a conversation's
initial context) are checked when they are written. Some common Python values are converted by
these rules, so the context holds from the start what every store will give back:

=====================================  ==============================================
written                                stored
=====================================  ==============================================
``datetime``, ``date``, ``time``       ISO 8601 text (``"2026-11-23T09:30:00+00:00"``)
``Decimal``                            its exact text (``"19.99"``)
``UUID``                               its text
``Enum`` member                        its value (converted by these rules)
tuple                                  list
set, frozenset                         list, sorted when its items can be sorted
pydantic model, dataclass              its fields as an object
=====================================  ==============================================

Text keeps every character except lone surrogates (halves of a UTF-16 pair, which no store can
write as UTF-8): each becomes U+FFFD. Anything else (an arbitrary object, bytes, ``nan`` or an
infinity, an object with a non-text key, nesting deeper than 64 levels, which also catches cycles)
is refused with a :class:`ContextValueError` that names the key and what was found.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import enum
import hashlib
import math
import re
import unicodedata
import uuid
from collections.abc import Mapping
from typing import Any

from llm_fsm.errors import ContextValueError

MAX_DEPTH = 64


def as_json_data(values: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``values`` converted to JSON data by the rules above; :class:`ContextValueError` names what cannot be."""
    return {_key(key, "", source): _convert(value, key, source, 0) for key, value in values.items()}


def _convert(value: Any, path: str, source: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ContextValueError(f"{source}: '{path}' nests deeper than {MAX_DEPTH} levels (or refers to itself)", path)
    if value is None or type(value) in (bool, int):
        return value
    if isinstance(value, enum.Enum):  # before str and int: an IntEnum or StrEnum member is stored as its value
        return _convert(value.value, path, source, depth + 1)
    if isinstance(value, str | int | float):
        return _text_or_number(value, path, source)
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return _container(value, path, source, depth)
    return _convert(_simple(value, path, source), path, source, depth + 1)


def _text_or_number(value: str | int | float, path: str, source: str) -> Any:
    """A str, int or float (or a subclass of one) as the plain value; a float JSON cannot hold is refused."""
    if isinstance(value, str):
        return clean_text(str(value))
    if isinstance(value, int):  # an int subclass other than bool
        return int(value)
    if not math.isfinite(value):
        raise ContextValueError(f"{source}: '{path}' is {value}, which JSON cannot hold", path)
    return float(value)


def _container(value: Any, path: str, source: str, depth: int) -> Any:
    """A mapping as an object, a list or tuple as a list, a set as a sorted list (in its own order when
    its items cannot be compared), each item converted one level deeper."""
    if isinstance(value, Mapping):
        return {_key(k, path, source): _convert(v, f"{path}.{k}", source, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_convert(v, f"{path}[{i}]", source, depth + 1) for i, v in enumerate(value)]
    items = [_convert(v, f"{path}[]", source, depth + 1) for v in value]
    try:
        return sorted(items)
    except TypeError:  # mixed kinds: keep them, in the set's own order
        return items


def _simple(value: Any, path: str, source: str) -> Any:
    """A value of a known Python type as a JSON-ready value; ContextValueError for any other."""
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if hasattr(value, "model_dump") and hasattr(type(value), "model_fields"):  # a pydantic model
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    kind = type(value).__qualname__
    raise ContextValueError(
        f"{source}: '{path}' is a {kind}, which is not JSON data (text, number, true/false, null, list, object; "
        "dates, decimals, UUIDs, enums, sets, dataclasses and pydantic models are converted)",
        path,
    )


def _key(key: Any, path: str, source: str) -> str:
    if not isinstance(key, str):
        where = f"'{path}' has the key {key!r}" if path else f"the key {key!r} is not text"
        raise ContextValueError(f"{source}: {where}; object keys must be text", path or repr(key))
    return clean_text(key)


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate (not Unicode, so not storable as UTF-8) replaced by U+FFFD."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def copied(value: Any) -> Any:
    """A deep copy of JSON data (a context), several times quicker than ``copy.deepcopy`` on it: dicts
    and lists are rebuilt, strings, numbers, booleans and None shared (immutable); anything else, which
    JSON data does not hold, goes through ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {key: copied(item) for key, item in value.items()}
    if kind is list:
        return [copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def derived_uid(*parts: object) -> str:
    """A uid made from ``parts``: the same parts give the same uid in any process (a sub-conversation's, from
    its parent's; an old snapshot's, from its content; a tool call's key), so what is made from it survives a retry."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:24]


# shown as nothing though not whitespace to str.strip(): fillers that fonts draw blank
_BLANK_FILLERS = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def blank(text: str) -> bool:
    """Whether ``text`` shows nothing: empty, or only whitespace, invisible format characters (zero-width
    spaces and joiners, the byte order mark, soft hyphens: Unicode category Cf) and blank fillers.
    A message that is blank so reads to a person (and to a model) as no message at all."""
    # a loop, not all() over a generator: a message is seen not to be blank at its first letter, and a
    # generator left so is closed by raising GeneratorExit in it (every reply's message is checked)
    for c in text:  # noqa: SIM110 (see above)
        if not (c.isspace() or c in _BLANK_FILLERS or unicodedata.category(c) == "Cf"):
            return False
    return True


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or "" when the exception cannot say it (its ``__str__`` raises or returns no str): what
    user code raised is reported, never a second error raised while reading it."""
    try:
        text = str(exc)
    except Exception:
        return ""
    return text if isinstance(text, str) else ""


def merge(context: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A new context with ``update`` merged in: nested objects merge, ``None`` values are ignored."""
    result = dict(context)
    for key, value in update.items():
        if value is None:
            continue
        old = result.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            result[key] = merge(old, value)
        elif isinstance(value, dict):
            # through merge() so that the nulls inside are dropped and the caller's dict is not shared
            result[key] = merge({}, value)
        else:
            result[key] = value
    return result
