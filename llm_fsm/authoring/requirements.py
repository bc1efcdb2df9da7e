"""What a transition's conditions require of the context, and the requirements no context can meet.

A transition is taken only when every *part* of its conditions holds: each key of each condition's
``requires_context_keys``, and each conjunct of each ``logic`` rule (its ``and`` taken apart).
:func:`requirements` reads the parts once and derives:

* a :class:`Domain` per context key: the values the key can have on a context where every part holds,
  from the parts that compare it with a constant;
* why the transition can never be taken: a part that reads no context and is false (``1 == 2``), a key
  whose domain is empty (``guests > 6`` and ``guests < 1``), a value the ``context_schema`` does not
  allow (an ``enum``, or a ``type`` that cannot compare equal);
* comparisons of a key with a constant of a type its ``context_schema`` does not give it;
* the keys that must be present, because a part is false without them.

Domains over-approximate JsonLogic as :mod:`llm_fsm.logic.rules` evaluates it, so what is concluded from
them is a proof, not a guess: ``x < 5`` (``<=``, ``>``, ``>=``, ``1 < x < 5``) holds only when ``x``
converts to a number below 5 and ``x == 5`` only when it converts to 5 (loose equality converts every
value the comparisons accept the same way); ``x == "abc"`` (a string that is not a number),
``x === "abc"`` and ``x in ["abc", "def"]`` hold only when ``x`` is, or prints as, one of those
strings, which never converts to a number. Schema conclusions evaluate the part itself on each value
an ``enum`` allows.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeGuard

from llm_fsm.authoring.diagram import short_logic
from llm_fsm.definition.models import Condition, Transition
from llm_fsm.errors import LogicError
from llm_fsm.logic import rules as logic
from llm_fsm.logic.table import of_kind

Loc = tuple[str | int, ...]
_READERS = of_kind("reads")
_ORDERS = of_kind("order")
_COMPARING = of_kind("equality", "order")
_ABSENT = object()  # the key is not in the context
_EQUAL_OR_ORDER = frozenset({"==", "<", "<=", ">", ">="})
_SCHEMA_TYPES = {"str": "string", "bool": "boolean", "NoneType": "null", "list": "array", "dict": "object"}


@dataclass(frozen=True)
class Part:
    """One thing a transition needs: a required key (as ``{"has_context": key}``) or a conjunct of a
    rule, with its location relative to the transition and the index of its condition."""

    rule: object
    loc: Loc
    condition: int

    @property
    def text(self) -> str:
        return short_logic(self.rule)

    @cached_property
    def keys(self) -> set[str] | None:
        """The keys the part reads (see :func:`reads`)."""
        return reads(self.rule)

    @cached_property
    def domains(self) -> dict[str, Domain]:
        """What the part alone requires of the keys it compares with constants."""
        return _domains(self.rule)


def conjuncts(rule: object, loc: Loc = ()) -> Iterator[tuple[object, Loc]]:
    """The rules that must all hold for ``rule`` to hold (its ``and`` taken apart), with their locations."""
    if isinstance(rule, dict) and list(rule) == ["and"]:
        arguments = rule["and"]
        if isinstance(arguments, list):
            for i, argument in enumerate(arguments):
                yield from conjuncts(argument, (*loc, "and", i))
        else:
            yield from conjuncts(arguments, (*loc, "and"))
    else:
        yield rule, loc


def condition_parts(condition: Condition, index: int = 0) -> list[Part]:
    """The parts of one condition: each required key, then each conjunct of its rule."""
    parts = [
        Part({"has_context": key}, ("conditions", index, "requires_context_keys", k), index)
        for k, key in enumerate(condition.requires_context_keys)
    ]
    if condition.logic is not None:
        loc: Loc = ("conditions", index, "logic")
        parts += [Part(rule, where, index) for rule, where in conjuncts(condition.logic, loc)]
    return parts


# ---------------------------------------------------------------- domains


@dataclass(frozen=True)
class Domain:
    """The values a key may have: a number range (when ``numeric``), a set of strings that are not
    numbers (when ``strings`` is not None), or, when both are asked for, none."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    numeric: bool = False
    strings: frozenset[str] | None = None

    def __and__(self, other: Domain) -> Domain:
        # The tighter bound wins, and on a tie the open one: max by (low, open), min by (high, closed).
        low, low_open = max((self.low, self.low_open), (other.low, other.low_open))
        high, high_closed = min((self.high, not self.high_open), (other.high, not other.high_open))
        strings = self.strings if other.strings is None else other.strings
        if self.strings is not None and other.strings is not None:
            strings = self.strings & other.strings
        return Domain(low, high, low_open, not high_closed, self.numeric or other.numeric, strings)

    def meets(self, other: Domain) -> bool:
        """Whether a value lies in both domains: ``not (self & other).empty``, without building it."""
        if self.strings is not None or other.strings is not None:
            if self.numeric or other.numeric:
                return False
            if self.strings is None or other.strings is None:
                return bool(self.strings or other.strings)
            return not self.strings.isdisjoint(other.strings)
        if not (self.numeric or other.numeric):
            return True
        low, low_open = max((self.low, self.low_open), (other.low, other.low_open))
        high, high_closed = min((self.high, not self.high_open), (other.high, not other.high_open))
        return low < high or (low == high and not low_open and high_closed)

    @property
    def empty(self) -> bool:
        if self.strings is not None:
            return self.numeric or not self.strings
        return self.numeric and (self.low > self.high or (self.low == self.high and (self.low_open or self.high_open)))

    def span(self) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """The domain as closed segments of one line on which numbers come before strings (for a sweep)."""
        if self.strings is not None:
            return [((1, s), (1, s)) for s in sorted(self.strings)]
        if self.numeric:
            return [((0, self.low), (0, self.high))]
        return [(_LINE_START, _LINE_END)]


_LINE_START, _LINE_END = (-1,), (2,)  # before every number, after every string


def _domains(rule: object) -> dict[str, Domain]:
    """What ``rule`` alone requires of the keys it compares with constants."""
    op, args = _operation(rule)
    if op in _ORDERS:
        found = _order_domains(op, args)
    elif op in ("==", "===") and len(args) == 2:
        found = _equal_domains(args)
    elif op == "in" and len(args) == 2:
        found = _member_domains(args)
    else:
        found = []
    domains: dict[str, Domain] = {}
    for key, domain in found:
        domains[key] = domains[key] & domain if key in domains else domain
    return domains


def _order_domains(op: str, args: list[object]) -> list[tuple[str, Domain]]:
    """The bounds a comparison chain (``<``, ``<=``, ``>``, ``>=``) puts on the keys it compares with numbers."""
    found: list[tuple[str, Domain]] = []
    chain = args[:3] if op in ("<", "<=") else args[:2][::-1]  # a > b is b < a
    strict = op in ("<", ">")
    for left, right in itertools.pairwise(chain):
        if (key := _plain_var(left)) is not None and _number(right):
            found.append((key, Domain(high=right, high_open=strict, numeric=True)))
        elif (key := _plain_var(right)) is not None and _number(left):
            found.append((key, Domain(low=left, low_open=strict, numeric=True)))
    return found


def _equal_domains(args: list[object]) -> list[tuple[str, Domain]]:
    """The one value ``==`` of a key and a number or a text pins the key to, on either side."""
    found: list[tuple[str, Domain]] = []
    for variable, constant in (args, args[::-1]):
        if (key := _plain_var(variable)) is None:
            continue
        if _number(constant):
            found.append((key, Domain(low=constant, high=constant, numeric=True)))
        elif isinstance(constant, str) and _text(constant):
            found.append((key, Domain(strings=frozenset([constant]))))
    return found


def _member_domains(args: list[object]) -> list[tuple[str, Domain]]:
    """The texts, or the span of numbers, ``in`` of a key and a literal list allows the key."""
    if (key := _plain_var(args[0])) is None or not isinstance(args[1], list):
        return []
    items = args[1]
    if all(isinstance(item, str) and _text(item) for item in items):
        return [(key, Domain(strings=frozenset(items)))]
    if all(_number(item) for item in items):
        return [(key, Domain(low=min(items), high=max(items), numeric=True))]
    return []


def _operation(rule: object) -> tuple[str | None, list[object]]:
    if not isinstance(rule, dict) or len(rule) != 1:
        return None, []
    op, raw = next(iter(rule.items()))
    return str(op), list(raw) if isinstance(raw, list) else [raw]


def _plain_var(node: object) -> str | None:
    """The key of ``{"var": "key"}`` (no default), else None."""
    op, args = _operation(node)
    if op != "var" or not args or (len(args) == 2 and args[1] is not None) or len(args) > 2:
        return None
    return args[0] if isinstance(args[0], str) and args[0] else None


def _number(value: object) -> TypeGuard[float]:  # an int or a finite float, not a bool
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _text(value: str) -> bool:
    """A string that loose comparisons never take for a number: not blank, not numeric."""
    return bool(value.strip()) and logic.evaluate({"+": [value]}, {}) is None


def reads(rule: object) -> set[str] | None:
    """The context keys ``rule`` reads, or None when it reads one it names by a computed value."""
    keys: set[str] = set()
    todo = [rule]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo += node
            continue
        op, args = _operation(node)
        if op is None:
            continue
        if op in _READERS:
            named = _named_keys(op, args)
            if named is None:
                return None
            keys.update(named)
            if op == "var":
                todo += args[1:]  # the default
        else:
            todo += args
    return keys


def _named_keys(op: str, args: list[object]) -> list[str] | None:
    if op == "var":
        names: object = args[:1] or [""]
    elif op == "missing_some":
        names = args[1] if len(args) == 2 else None
    else:
        names = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
        return None
    return list(names)


# ---------------------------------------------------------------- one transition


@dataclass(frozen=True)
class Reason:
    """Why a transition can never be taken (or is suspect): where, in words, and what to do."""

    loc: Loc
    message: str
    hint: str | None = None


@dataclass
class Requirements:
    """What one transition needs, and why it can never be taken (``never``, empty when it can)."""

    parts: list[Part]
    domains: dict[str, Domain] = field(default_factory=dict)
    never: list[Reason] = field(default_factory=list)
    mismatches: list[Reason] = field(default_factory=list)
    needed: list[tuple[str, Loc]] = field(default_factory=list)

    @property
    def conditioned(self) -> bool:
        return bool(self.parts)

    def compatible(self, other: Requirements) -> bool:
        """False when some key's domains exclude each other: then the two never hold together."""
        small, large = (self.domains, other.domains)
        if len(small) > len(large):
            small, large = large, small
        return all(key not in large or domain.meets(large[key]) for key, domain in small.items())


def requirements(transition: Transition, schema: Mapping[str, Mapping[str, Any]]) -> Requirements:
    """What ``transition`` requires, checked against the definition's ``context_schema``."""
    parts = [part for j, condition in enumerate(transition.conditions) for part in condition_parts(condition, j)]
    found = Requirements(parts)
    _check_constants(found)
    _check_domains(found)
    _check_schema(found, schema)
    _find_needed(found)
    return found


def _check_constants(found: Requirements) -> None:
    for part in found.parts:
        if part.keys != set():
            continue
        try:
            holds = logic.truthy(logic.evaluate(part.rule, {}))
        except LogicError as exc:
            found.never.append(Reason(part.loc, f"'{part.text}' can never be evaluated: {exc}"))
            continue
        if not holds:
            found.never.append(Reason(part.loc, f"'{part.text}' is always false (it reads no context)"))


def _check_domains(found: Requirements) -> None:
    """Intersect each key's domains part by part; an empty one is named with the parts that empty it."""
    seen: dict[str, list[tuple[Part, Domain]]] = {}
    for part in found.parts:
        for key, domain in part.domains.items():
            before = found.domains.get(key)
            found.domains[key] = domain if before is None else before & domain
            earlier = seen.setdefault(key, [])
            earlier.append((part, domain))
            if found.domains[key].empty and (before is None or not before.empty):
                found.never.append(_conflict(key, part, domain, earlier[:-1]))


def _conflict(key: str, part: Part, domain: Domain, earlier: list[tuple[Part, Domain]]) -> Reason:
    if domain.empty:
        return Reason(part.loc, f"'{part.text}' never holds")
    other = next((p for p, d in earlier if (d & domain).empty), None)
    if other is None:
        return Reason(part.loc, f"'{part.text}' and the other conditions on '{key}' cannot all hold")
    both = f"conditions[{other.condition}] and conditions[{part.condition}]"
    where = f" ({both})" if other.condition != part.condition else ""
    return Reason(part.loc, f"'{other.text}' and '{part.text}' cannot both hold{where}")


# ---------------------------------------------------------------- the context schema


def _check_schema(found: Requirements, schema: Mapping[str, Mapping[str, Any]]) -> None:
    """Parts that read one key the schema describes: against its ``enum`` (each part evaluated on each
    value it allows, and on the key's absence), else against its ``type``."""
    allowed: dict[str, list[object]] = {}  # key -> the values (or _ABSENT) the parts so far let through
    for part in found.parts:
        if part.keys is None or len(part.keys) != 1 or (key := next(iter(part.keys))) not in schema:
            continue
        values = _enum(schema[key])
        if values is None:
            _check_type(found, part, key, schema[key])
            continue
        before = allowed.get(key)
        allowed[key] = [v for v in ([*values, _ABSENT] if before is None else before) if _holds_with(part.rule, key, v)]
        if not allowed[key] and before != []:
            alone = before is None or not any(_holds_with(part.rule, key, v) for v in [*values, _ABSENT])
            found.never.append(_outside_enum(part, key, values, alone=alone))


def _enum(schema: Mapping[str, Any]) -> list[object] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None


def _holds_with(rule: object, key: str, value: object) -> bool:
    context = {} if value is _ABSENT else {key: value}
    try:
        return logic.truthy(logic.evaluate(rule, context))
    except LogicError:
        return False


def _outside_enum(part: Part, key: str, values: list[object], *, alone: bool) -> Reason:
    listed = ", ".join(_quoted(v) for v in values[:8]) + (", …" if len(values) > 8 else "")
    together = "" if alone else " together with the other conditions on it"
    message = f"no value context_schema allows for '{key}' ({listed}) makes '{part.text}' hold{together}"
    constants = [c for c in _constants(part.rule) if isinstance(c, str)]
    close = [m for c in constants for m in difflib.get_close_matches(c, [v for v in values if isinstance(v, str)], 1)]
    hint = f"did you mean {_quoted(close[0])}?" if close else f"compare '{key}' with one of the values its enum lists"
    return Reason(part.loc, message, hint)


def _check_type(found: Requirements, part: Part, key: str, schema: Mapping[str, Any]) -> None:
    """A comparison of ``key`` with a constant of a type the schema does not give it: it never holds
    when the comparison is strict, or when the key is a number and the constant a string that is not
    one; otherwise it is suspect (a mismatch)."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    kinds = {*types, *(["number"] if "integer" in types else [])}
    op, args = _operation(part.rule)
    if not kinds or op is None:
        return

    def never() -> Reason:
        return Reason(part.loc, f"'{key}' is {_a(types)} in context_schema, so '{part.text}' never holds")

    if op == "in" and len(args) == 2 and _plain_var(args[0]) == key and isinstance(args[1], list):
        if args[1] and all(item is not None and _kind(item) not in kinds for item in args[1]):
            found.never.append(never())
        return
    constant = _compared_constant(op, args, key)
    if constant is _ABSENT or constant is None or _kind(constant) in kinds:
        return  # comparing with null asks whether the key is set
    numbers_only = kinds <= {"number", "integer"}
    if op == "===" or (numbers_only and op in _EQUAL_OR_ORDER and isinstance(constant, str) and _text(constant)):
        found.never.append(never())
    elif not (numbers_only and isinstance(constant, str)):  # a numeric string compares as the number it spells
        found.mismatches.append(_mismatch(part, key, types, constant))


def _compared_constant(op: str | None, args: list[object], key: str) -> object:
    if op not in _COMPARING or len(args) != 2:
        return _ABSENT
    for variable, constant in (args, args[::-1]):
        if _plain_var(variable) == key and not isinstance(constant, (dict, list)):
            return constant
    return _ABSENT


def _mismatch(part: Part, key: str, types: list[str], constant: object) -> Reason:
    described = f"the {_kind(constant)} {_quoted(constant)}"
    message = f"'{key}' is {_a(types)} in context_schema, but '{part.text}' compares it with {described}"
    if "string" in types and _number(constant):
        message += ": JsonLogic then reads the string as a number, so it holds only for strings that spell one"
    return Reason(part.loc, message, f"compare '{key}' with {_a(types)}, or change its type in context_schema")


def _kind(value: object) -> str:
    """The JSON Schema type of a JSON value."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return _SCHEMA_TYPES[type(value).__name__]


def _a(types: list[str]) -> str:
    """``["integer", "null"]`` → "an integer or null"."""
    article = "an" if types[0][:1] in ("a", "e", "i", "o", "u") else "a"
    return f"{article} {' or '.join(types)}"


def _quoted(value: object) -> str:
    return short_logic(value)


def _constants(rule: object) -> Iterator[object]:
    op, args = _operation(rule)
    if op is None or op in _READERS:
        return
    for arg in args:
        if isinstance(arg, list):
            for item in arg:
                yield from _constants(item) if isinstance(item, dict) else (item,)
        elif isinstance(arg, dict):
            yield from _constants(arg)
        else:
            yield arg


# ---------------------------------------------------------------- keys that must be present


def _find_needed(found: Requirements) -> None:
    """Root keys without which a part is false: required keys, ``has_context`` keys, and the key a
    one-key part reads when the part is false on an empty context (always so when it gives the key a
    domain: absent, a key converts to nothing)."""
    needed: dict[str, Loc] = {}
    for part in found.parts:
        op, args = _operation(part.rule)
        if op == "has_context":
            names = _named_keys(op, args) or []
        elif part.keys is not None and len(part.keys) == 1:
            key = next(iter(part.keys))
            names = [key] if key in part.domains or not _holds_with(part.rule, key, _ABSENT) else []
        else:
            names = []
        for name in names:
            needed.setdefault(name.split(".", 1)[0], part.loc)
    found.needed = list(needed.items())
