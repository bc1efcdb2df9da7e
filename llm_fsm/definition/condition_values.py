"""The values worth trying for the keys of a condition: the constants it compares them with and their
neighbours, the values next to those of the keys they are compared with, the constants anywhere in it, a few
generic ones. ``validate``'s witness search (:mod:`llm_fsm.authoring.condition_solver`) tries them to make
transitions hold; a guided reply (:mod:`llm_fsm.guided.tools`) to see whether a tool's answer can still make a
condition fail.
"""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llm_fsm.definition.conditions import condition_failure
from llm_fsm.definition.models import Condition
from llm_fsm.logic import rules as logic
from llm_fsm.logic.table import of_kind
from llm_fsm.values import merge

MISSING = object()  # the key is absent from the context


_GENERIC: tuple[object, ...] = (True, False, 0, 1, "x")


_COMPARISONS = of_kind("equality", "order") | {"in"}  # a key compared with a value


def can_fail(condition: Condition, base: Mapping[str, Any], free: Sequence[str], most: int = 64) -> bool:
    """Whether some values of the ``free`` keys (the rest as in ``base``) make ``condition`` fail: each key alone,
    then all of them together, given the values the search tries for them (the constants they are compared with
    and their neighbours, values next to those in ``base`` of the keys they are compared with, the constants
    anywhere in the rule, a few generic ones), at most ``most`` of them per key. A tool's result not there yet:
    ``!rx.found`` can fail, an ``or`` that holds on what was collected cannot."""
    if not free:
        return False
    rules: list[object] = [condition.logic]
    options = {key: candidates(key, rules) for key in condition_keys(condition)}
    options = with_compared_keys({**options, **{key: candidates(key, rules) for key in free}}, rules, base)
    tried = {key: [v for v in options[key] if v is not MISSING][:most] for key in free}
    choices = [{key: value} for key in free for value in tried[key]]
    if len(free) > 1:
        choices += [dict.fromkeys(free, value) for value in unique([v for key in free for v in tried[key]])]
    return any(condition_failure(condition, merge(dict(base), context_of(choice))) for choice in choices)


def condition_keys(condition: Condition) -> list[str]:
    """The context keys a condition needs, as written (dotted paths included), in order."""
    keys = dict.fromkeys(condition.requires_context_keys)
    if condition.logic is not None:
        keys.update(dict.fromkeys(sorted(logic.keys_read(condition.logic))))
    return list(keys)


def context_of(choice: dict[str, object]) -> dict[str, Any]:
    """A context from dotted keys (``user.email``) and values; absent keys are left out."""
    context: dict[str, Any] = {}
    for key, value in sorted(choice.items()):
        if value is MISSING:
            continue
        *parents, last = key.split(".")
        node = context
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return context


def candidates(key: str, rules: list[object]) -> list[object]:
    values: list[object] = [MISSING]
    needles: list[str] = []
    for rule in rules:
        compared, found = _compared_constants(key, rule)
        values += [v for c in compared for v in neighbours(c)]
        needles += found
    if needles:
        values.append("".join(dict.fromkeys(needles)))
    values += _GENERIC
    values += [c for rule in rules for c in scalars(rule)]
    return unique(values)


def with_compared_keys(
    options: dict[str, list[object]], rules: list[object], base: Mapping[str, Any]
) -> dict[str, list[object]]:
    """``options`` where a key compared with another (``check_in < check_out``) may also take the
    values next to the other's: its candidates, and its value in ``base``, one step either side."""
    extended = {key: list(values) for key, values in options.items()}
    for first, second in _compared_pairs(rules):
        for key, other in ((first, second), (second, first)):
            if key not in options or other not in options:
                continue
            known = [v for v in options[other] if v is not MISSING]
            if (value := _lookup(base, other)) is not MISSING:
                known.insert(0, value)
            extended[key] = unique([*extended[key], *(n for v in known for n in neighbours(v))])
    return extended


def _compared_pairs(rule: object) -> Iterator[tuple[str, str]]:
    """The pairs of keys a comparison in ``rule`` sets side by side (``{"<": [{"var": a}, {"var": b}]}``)."""
    for op, args in operators(rule):
        if op in _COMPARISONS and op != "in":
            names = [var_name(arg) for arg in args]
            yield from ((a, b) for a, b in itertools.pairwise(names) if a is not None and b is not None)


def _lookup(context: Mapping[str, Any], key: str) -> object:
    """The value of the dotted ``key`` in ``context``, or :data:`MISSING`."""
    node: object = context
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _compared_constants(key: str, rule: object) -> tuple[list[object], list[str]]:
    """Constants compared with ``{"var": key}`` in ``rule``, and strings tested to be inside it."""
    constants: list[object] = []
    needles: list[str] = []
    for op, args in operators(rule):
        if op not in _COMPARISONS or not any(var_name(arg) == key for arg in args):
            continue
        for arg in args:
            if isinstance(arg, list):
                constants += [item for item in arg if not isinstance(item, (dict, list))]
            elif not isinstance(arg, dict):
                constants.append(arg)
        if op == "in" and len(args) == 2 and var_name(args[1]) == key and isinstance(args[0], str):
            needles.append(args[0])
    return constants, needles


def operators(rule: object) -> Iterator[tuple[str, list[object]]]:
    """Every (operator, arguments) node in ``rule``, depth first."""
    if isinstance(rule, list):
        for item in rule:
            yield from operators(item)
    elif isinstance(rule, dict) and len(rule) == 1:
        op, raw = next(iter(rule.items()))
        args = list(raw) if isinstance(raw, list) else [raw]
        yield str(op), args
        for arg in args:
            yield from operators(arg)


def var_name(node: object) -> str | None:
    if not isinstance(node, dict) or len(node) != 1 or "var" not in node:
        return None
    path = node["var"]
    path = path[0] if isinstance(path, list) and path else path
    return path if isinstance(path, str) else None


def scalars(rule: object) -> Iterator[object]:
    """The constants written anywhere in ``rule`` (not the arguments of ``var`` and the like)."""
    for op, args in operators(rule):
        if op in ("var", "missing", "missing_some", "has_context"):
            continue
        for arg in args:
            items = arg if isinstance(arg, list) else [arg]
            yield from (item for item in items if not isinstance(item, (dict, list)))


def neighbours(constant: object) -> list[object]:
    """``constant`` and the values either side of it: a number ±1, an ISO date (or date-time) as text ±1 day."""
    if isinstance(constant, (int, float)) and not isinstance(constant, bool):
        return [constant, constant + 1, constant - 1]
    if isinstance(constant, str) and (day := _iso_date(constant)) is not None:
        one = datetime.timedelta(days=1)
        return [constant, *((day + step).isoformat() + constant[10:] for step in (one, -one))]
    return [constant]


def _iso_date(text: str) -> datetime.date | None:
    """The date ``text`` starts with when it is an ISO date or date-time (``2026-01-15``, ``2026-01-15T10:00Z``)."""
    if len(text) < 10 or (len(text) > 10 and text[10] not in "T "):
        return None
    try:
        return datetime.date.fromisoformat(text[:10])
    except ValueError:
        return None


def unique(values: list[object]) -> list[object]:
    seen: set[object] = set()
    result = []
    for value in values:
        marker = ("missing",) if value is MISSING else (type(value).__name__, _key(value))
        if marker not in seen:
            seen.add(marker)
            result.append(value)
    return result


def _key(value: object) -> object:
    """A hashable stand-in for a value (no repr() of huge ints: Python refuses to print them)."""
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
