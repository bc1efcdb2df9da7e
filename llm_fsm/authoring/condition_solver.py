"""Can transitions hold together? Search for a context on which all of them hold (a witness).

Used by ``validate`` to warn about equal-priority transitions that compete, and by the simulated
model and test skeletons to find values that make a move valid. A witness returned is real (the
engine's own condition check accepts it); None only means that none was found.
"""

from __future__ import annotations

import datetime
import itertools
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from llm_fsm import logic
from llm_fsm.authoring.requirements import condition_parts
from llm_fsm.definition import Condition, Transition
from llm_fsm.engine import merge, unmet_condition
from llm_fsm.errors import LogicError
from llm_fsm.logic import Rule

Score = Callable[[dict[str, object]], int]  # candidate assignment -> number of condition parts that hold
_MISSING = object()  # the key is absent from the context
_GENERIC: tuple[object, ...] = (True, False, 0, 1, "x")
_COMPARISONS = frozenset({"==", "!=", "===", "!==", "<", "<=", ">", ">=", "in"})
_EXHAUSTIVE_LIMIT = 512  # contexts tried one by one when the candidate product is this small
_CLIMB_ROUNDS = 4
_RANDOM_SAMPLES = 256


def condition_keys(condition: Condition) -> list[str]:
    """The context keys a condition needs, as written (dotted paths included), in order."""
    keys = dict.fromkeys(condition.requires_context_keys)
    if condition.logic is not None:
        keys.update(dict.fromkeys(sorted(logic.keys_read(condition.logic))))
    return list(keys)


def find_witness(
    transitions: Sequence[Transition],
    *,
    base: Mapping[str, Any] | None = None,
    prefer: Mapping[str, Sequence[Any]] | None = None,
    accept: Callable[[dict[str, Any]], bool] | None = None,
    schema: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """A context on which every one of ``transitions`` holds, or None if none was found.

    ``base``: the context the values are merged into; ``prefer``: values to try first per key;
    ``accept``: a further test every witness must pass; ``schema``: the definition's
    ``context_schema``: a key it describes is tried only with values it allows (its ``enum``, values
    of its ``type``, lists for an array), and a witness's values must all match it.

    Candidate values for each key come from the constants its rules compare it with (and their
    neighbours, for ranges), the values next to those of a key it is compared with (numbers, and ISO
    dates as text), the constants anywhere in the rules, a few generic values, and absence.
    Small candidate spaces are searched exhaustively; larger ones by hill-climbing on the number of
    parts that hold (required keys and conjuncts), then by seeded random sampling. A returned context
    is a real witness (the engine's own condition check accepts it); None only means none was found.
    """
    # compiled once: the search evaluates the same parts and expressions on every candidate context
    parts = [logic.compile_rule(part) for t in transitions for c in t.conditions for part in _parts(c)]
    keys = sorted({key for t in transitions for c in t.conditions for key in condition_keys(c)})
    rules: list[object] = [c.logic for t in transitions for c in t.conditions]
    options = {key: _unique([*(prefer or {}).get(key, ()), *_candidates(key, rules)]) for key in keys}
    options = _with_compared_keys(options, rules, base or {})
    if schema:
        written = _unique([c for rule in rules for c in _scalars(rule)])
        options = {
            key: values if "." in key else _allowed(values, schema.get(key), written) for key, values in options.items()
        }
        accept = _and_matches(schema, accept)

    pinned = [(var, logic.compile_rule(expression)) for rule in rules for var, expression in _equalities(rule)]

    def build(choice: dict[str, object]) -> dict[str, Any]:
        context = merge(dict(base), _context(choice)) if base else _context(choice)
        return _solve_equalities(pinned, context, set(keys))

    def score(choice: dict[str, object]) -> int:
        context = build(choice)
        return sum(_holds(part, context) for part in parts)

    for choice in _choices(keys, options, score):
        context = build(choice)
        if all(unmet_condition(t, context) is None for t in transitions) and (accept is None or accept(context)):
            return context
    return None


def _allowed(values: list[object], schema: Mapping[str, Any] | None, written: list[object]) -> list[object]:
    """The candidate ``values`` a key's ``schema`` allows (and absence), widened to what it describes:
    its ``enum``, the values next to its bounds, and for an array, lists of one candidate and the list
    of the strings ``written`` in the rules."""
    if not isinstance(schema, Mapping):
        return values
    from llm_fsm.schemas import violation  # jsonschema, imported only for definitions with a schema

    present = [v for v in values if v is not _MISSING]
    enum = listed if isinstance(listed := schema.get("enum"), list) else []
    extra = [*enum, *([schema["const"]] if "const" in schema else [])]
    extra += [v for bound in _BOUNDS if _is_number(schema.get(bound)) for v in _neighbours(schema[bound])]
    if "array" in _types(schema):
        items = given if isinstance(given := schema.get("items"), Mapping) else {}
        scalars = _unique([*present, *(items.get("enum") or [])])
        extra += [[], *([v] for v in scalars), [v for v in written if isinstance(v, str)]]
    fitting = [v for v in _unique([*present, *extra]) if violation(dict(schema), v) is None]
    return [_MISSING, *fitting]


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    return [declared] if isinstance(declared, str) else list(declared) if isinstance(declared, list) else []


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _and_matches(
    schema: Mapping[str, Mapping[str, Any]], accept: Callable[[dict[str, Any]], bool] | None
) -> Callable[[dict[str, Any]], bool]:
    """``accept``, and every value the schema describes matches it."""
    from llm_fsm.schemas import violation

    def matches(context: dict[str, Any]) -> bool:
        described = [(key, value) for key, value in context.items() if isinstance(schema.get(key), Mapping)]
        if any(violation(dict(schema[key]), value) is not None for key, value in described):
            return False
        return accept is None or accept(context)

    return matches


def _solve_equalities(pinned: list[tuple[str, Rule]], context: dict[str, Any], free: set[str]) -> dict[str, Any]:
    """Give computed keys their computed value: for ``x == expr`` (or ``lo <= x - expr <= hi``, see
    :func:`_equalities`; ``pinned`` holds each ``x`` with ``expr`` compiled) where ``x`` is free and
    ``expr`` evaluates on the context, set ``x`` to ``expr`` (a few rounds, since one computed key may
    feed another)."""
    for _ in range(3):
        changed = False
        for var, expression in pinned:
            if var not in free or "." in var:
                continue
            try:
                value = expression(context)
            except LogicError:
                continue
            if value is not None and context.get(var) != value:
                context = {**context, var: value}
                changed = True
        if not changed:
            break
    return context


def _equalities(rule: object) -> Iterator[tuple[str, object]]:
    """(key, expression) pairs a rule pins a key to: ``==``/``===`` with a var, or a ``-`` band."""
    for operator, arguments in _operators(rule):
        if operator in ("==", "===") and len(arguments) == 2:
            for side, other in ((arguments[0], arguments[1]), (arguments[1], arguments[0])):
                name = _var_name(side)
                if name is not None and _var_name(other) is None and isinstance(other, dict):
                    yield name, other
        if operator in ("<", "<=") and len(arguments) == 3 and isinstance(arguments[1], dict):
            difference = arguments[1].get("-")
            if isinstance(difference, list) and len(difference) == 2 and (name := _var_name(difference[0])):
                yield name, difference[1]


def _parts(condition: Condition) -> list[object]:
    """The rules that must all hold for ``condition`` to hold: one per required key, one per conjunct."""
    return [part.rule for part in condition_parts(condition)]


def _holds(rule: Rule, context: dict[str, Any]) -> bool:
    try:
        return logic.truthy(rule(context))
    except LogicError:
        return False


def _choices(keys: list[str], options: dict[str, list[object]], score: Score) -> Iterator[dict[str, object]]:
    """Assignments of candidate values to keys, in the order they are worth trying."""
    sizes = [len(options[key]) for key in keys]
    total = 1
    for size in sizes:
        total *= size
    if total <= _EXHAUSTIVE_LIMIT:
        for values in itertools.product(*(options[key] for key in keys)):
            yield dict(zip(keys, values, strict=True))
        return
    yield _climb(keys, options, score)
    rng = random.Random(0)
    for _ in range(_RANDOM_SAMPLES):
        yield {key: rng.choice(options[key]) for key in keys}


def _climb(keys: list[str], options: dict[str, list[object]], score: Score) -> dict[str, object]:
    """Change one key at a time while that makes more conditions hold."""
    choice = {key: options[key][0] for key in keys}
    best = score(choice)
    for _ in range(_CLIMB_ROUNDS):
        improved = False
        for key in keys:
            for value in options[key]:
                trial = {**choice, key: value}
                if (points := score(trial)) > best:
                    choice, best, improved = trial, points, True
        if not improved:
            break
    return choice


def _context(choice: dict[str, object]) -> dict[str, Any]:
    """A context from dotted keys (``user.email``) and values; absent keys are left out."""
    context: dict[str, Any] = {}
    for key, value in sorted(choice.items()):
        if value is _MISSING:
            continue
        *parents, last = key.split(".")
        node = context
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value
    return context


def _candidates(key: str, rules: list[object]) -> list[object]:
    values: list[object] = [_MISSING]
    needles: list[str] = []
    for rule in rules:
        compared, found = _compared_constants(key, rule)
        values += [v for c in compared for v in _neighbours(c)]
        needles += found
    if needles:
        values.append("".join(dict.fromkeys(needles)))
    values += _GENERIC
    values += [c for rule in rules for c in _scalars(rule)]
    return _unique(values)


def _with_compared_keys(
    options: dict[str, list[object]], rules: list[object], base: Mapping[str, Any]
) -> dict[str, list[object]]:
    """``options`` where a key compared with another (``check_in < check_out``) may also take the
    values next to the other's: its candidates, and its value in ``base``, one step either side."""
    extended = {key: list(values) for key, values in options.items()}
    for first, second in _compared_pairs(rules):
        for key, other in ((first, second), (second, first)):
            if key not in options or other not in options:
                continue
            known = [v for v in options[other] if v is not _MISSING]
            if (value := _lookup(base, other)) is not _MISSING:
                known.insert(0, value)
            extended[key] = _unique([*extended[key], *(n for v in known for n in _neighbours(v))])
    return extended


def _compared_pairs(rule: object) -> Iterator[tuple[str, str]]:
    """The pairs of keys a comparison in ``rule`` sets side by side (``{"<": [{"var": a}, {"var": b}]}``)."""
    for op, args in _operators(rule):
        if op in _COMPARISONS and op != "in":
            names = [_var_name(arg) for arg in args]
            yield from ((a, b) for a, b in itertools.pairwise(names) if a is not None and b is not None)


def _lookup(context: Mapping[str, Any], key: str) -> object:
    """The value of the dotted ``key`` in ``context``, or :data:`_MISSING`."""
    node: object = context
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _compared_constants(key: str, rule: object) -> tuple[list[object], list[str]]:
    """Constants compared with ``{"var": key}`` in ``rule``, and strings tested to be inside it."""
    constants: list[object] = []
    needles: list[str] = []
    for op, args in _operators(rule):
        if op not in _COMPARISONS or not any(_var_name(arg) == key for arg in args):
            continue
        for arg in args:
            if isinstance(arg, list):
                constants += [item for item in arg if not isinstance(item, (dict, list))]
            elif not isinstance(arg, dict):
                constants.append(arg)
        if op == "in" and len(args) == 2 and _var_name(args[1]) == key and isinstance(args[0], str):
            needles.append(args[0])
    return constants, needles


def _operators(rule: object) -> Iterator[tuple[str, list[object]]]:
    """Every (operator, arguments) node in ``rule``, depth first."""
    if isinstance(rule, list):
        for item in rule:
            yield from _operators(item)
    elif isinstance(rule, dict) and len(rule) == 1:
        op, raw = next(iter(rule.items()))
        args = list(raw) if isinstance(raw, list) else [raw]
        yield str(op), args
        for arg in args:
            yield from _operators(arg)


def _var_name(node: object) -> str | None:
    if not isinstance(node, dict) or len(node) != 1 or "var" not in node:
        return None
    path = node["var"]
    path = path[0] if isinstance(path, list) and path else path
    return path if isinstance(path, str) else None


def _scalars(rule: object) -> Iterator[object]:
    """The constants written anywhere in ``rule`` (not the arguments of ``var`` and the like)."""
    for op, args in _operators(rule):
        if op in ("var", "missing", "missing_some", "has_context"):
            continue
        for arg in args:
            items = arg if isinstance(arg, list) else [arg]
            yield from (item for item in items if not isinstance(item, (dict, list)))


def _neighbours(constant: object) -> list[object]:
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


def _unique(values: list[object]) -> list[object]:
    seen: set[object] = set()
    result = []
    for value in values:
        marker = ("missing",) if value is _MISSING else (type(value).__name__, _key(value))
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
