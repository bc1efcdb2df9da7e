"""Can transitions hold together? Search for a context on which all of them hold (a witness).

Used by ``validate`` to warn about equal-priority transitions that compete, and by the simulated
model and test skeletons to find values that make a move valid. A witness returned is real (the
engine's own condition check accepts it); None only means that none was found.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from llm_fsm.authoring.requirements import condition_parts
from llm_fsm.definition.condition_values import (
    MISSING,
    candidates,
    condition_keys,
    context_of,
    neighbours,
    operators,
    scalars,
    unique,
    var_name,
    with_compared_keys,
)
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.models import Condition, Transition
from llm_fsm.errors import LogicError
from llm_fsm.logic import rules as logic
from llm_fsm.logic.rules import Rule
from llm_fsm.values import merge

Score = Callable[[dict[str, object]], int]  # candidate assignment -> number of condition parts that hold
_EXHAUSTIVE_LIMIT = 512  # contexts tried one by one when the candidate product is this small
_CLIMB_ROUNDS = 4
_RANDOM_SAMPLES = 256


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
    options = {key: unique([*(prefer or {}).get(key, ()), *candidates(key, rules)]) for key in keys}
    options = with_compared_keys(options, rules, base or {})
    if schema:
        written = unique([c for rule in rules for c in scalars(rule)])
        options = {
            key: values if "." in key else _allowed(values, schema.get(key), written) for key, values in options.items()
        }
        accept = _and_matches(schema, accept)

    pinned = [(var, logic.compile_rule(expression)) for rule in rules for var, expression in _equalities(rule)]

    def build(choice: dict[str, object]) -> dict[str, Any]:
        context = merge(dict(base), context_of(choice)) if base else context_of(choice)
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

    present = [v for v in values if v is not MISSING]
    enum = listed if isinstance(listed := schema.get("enum"), list) else []
    extra = [*enum, *([schema["const"]] if "const" in schema else [])]
    extra += [v for bound in _BOUNDS if _is_number(schema.get(bound)) for v in neighbours(schema[bound])]
    if "array" in _types(schema):
        items = given if isinstance(given := schema.get("items"), Mapping) else {}
        scalars = unique([*present, *(items.get("enum") or [])])
        extra += [[], *([v] for v in scalars), [v for v in written if isinstance(v, str)]]
    fitting = [v for v in unique([*present, *extra]) if violation(dict(schema), v) is None]
    return [MISSING, *fitting]


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
    for operator, arguments in operators(rule):
        if operator in ("==", "===") and len(arguments) == 2:
            for side, other in ((arguments[0], arguments[1]), (arguments[1], arguments[0])):
                name = var_name(side)
                if name is not None and var_name(other) is None and isinstance(other, dict):
                    yield name, other
        if operator in ("<", "<=") and len(arguments) == 3 and isinstance(arguments[1], dict):
            difference = arguments[1].get("-")
            if isinstance(difference, list) and len(difference) == 2 and (name := var_name(difference[0])):
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
