"""Values a guided schema can offer exactly, read from the whole definition's conditions.

- **Closed sets.** A key the definition never declares, and whose every use in any condition is a
  comparison with text constants (``==``, ``===``, ``in`` a list), can only ever route on those
  constants: any other text it could hold moves nothing. The guided schema offers exactly that set
  (``support_triage``'s ``category``: ``billing``, ``technical``, ``account_access``), where a small model
  held to free text wrote ``"triage"``.
- **Derived values.** A move whose condition ties one key to an expression over others
  (``{"==": [{"var": "unit_price"}, {"if": [...product...]}]}``, or the money idiom
  ``{"<=": [-0.01, {"-": [{"var": "total"}, expr]}, 0.01]}``) is offered with the consistent values
  only: the expression is evaluated on the context and, for the keys the same update writes from a
  finite set, once per value (a branch per consistent pair).

``llm_fsm.guided.schema`` builds the schema; this module only says which values.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from llm_fsm.definition.key_values import every_transition, is_number, key_read
from llm_fsm.definition.models import FSMDefinition, Transition
from llm_fsm.errors import LogicError
from llm_fsm.guided.conditions import conjuncts
from llm_fsm.guided.languages import union
from llm_fsm.guided.words import FUNCTION_WORDS, Topic

MAX_PAIRS = 8  # consistent combinations offered for one move (past this, the move is offered as it is)


# a flag named for one of these (confirmed, reset_confirmed, ready, verified, confirmada) is a yes or a no the
# user gives; any other (user_said_goodbye, customer_cancelled, wants_human) names something the user does
_CONFIRMING = tuple(sorted(union("confirming")))  # of every built-in language (languages/<code>.json)
# words that name who or how, not what: no flag is about them ("the user says goodbye": goodbye)
_GENERIC = union("generic")


def flag_topic(definition: FSMDefinition, key: str) -> Topic | None:
    """What a yes/no ``key`` is about: None for a confirmation (its name says confirm, correct, ready...: the
    user's yes or no decides it); else the words of its name, and of the moves and conditions that read it
    ("user_said_goodbye", "The user says goodbye or wants to end the chat": goodbye; end, chat)."""
    topics = definition.derived("guided:flag_topics", definition.initial_state, lambda _: _flag_topics(definition))
    return topics.get(key, _topic(key))


def _flag_topics(definition: FSMDefinition) -> dict[str, Topic | None]:
    from llm_fsm.logic.rules import keys_read

    texts: dict[str, list[str]] = {}
    for transition in every_transition(definition):
        for condition in transition.conditions:
            try:
                read = {name.split(".")[0] for name in keys_read(condition.logic)} if condition.logic else set()
            except LogicError:
                continue
            for key in read:
                texts.setdefault(key, []).extend([transition.description or "", condition.description or ""])
    return {key: _topic(key, " ".join(found)) for key, found in texts.items()}


def _topic(key: str, text: str = "") -> Topic | None:
    name = [word for word in re.split(r"[_\W\d]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", key).casefold()) if word]
    if any(word.startswith(_CONFIRMING) for word in name):
        return None
    skip = _GENERIC.union(*FUNCTION_WORDS.values())

    def content(words: Iterable[str]) -> frozenset[str]:
        return frozenset(word for word in words if word not in skip and len(word) > 2)

    return Topic(content(name), content([*name, *re.findall(r"\w+", text.casefold())]))


def derived_values(
    transition: Transition,
    context: Mapping[str, Any],
    schemas: Mapping[str, dict[str, Any]],
) -> list[dict[str, dict[str, Any]]]:
    """The consistent values of the keys ``transition`` ties to expressions: one dict (key -> a ``const``
    schema) per consistent combination, or [] when it ties none the update can write (``schemas``: the
    value schema of each key this update may write, with the move's own narrowing)."""
    from llm_fsm.errors import LogicError
    from llm_fsm.logic.rules import evaluate

    ties = [tie for condition in transition.conditions for rule in conjuncts(condition.logic) if (tie := _tie(rule))]
    ties = [(key, expr) for key, expr in ties if key in schemas]
    if not ties:
        return []
    read = sorted({name for _, expr in ties for name in _reads_of(expr)} - {key for key, _ in ties})
    # a key the update may write from a finite set, not collected yet, is chosen with the tied one (a branch per
    # value); a collected key keeps its value (or is left out); a key it may not write is as it is
    free = [name for name in read if name in schemas and name not in context and _finite(schemas[name]) is not None]
    pinned = {name: context[name] for name in read if name not in free and name in schemas and name in context}
    if any(name not in free and name not in pinned and name in schemas for name in read):
        return []  # an expression reads a key the update may write freely and nothing holds yet
    combos = list(itertools.product(*[_finite(schemas[name]) or [] for name in free]))
    if len(combos) > MAX_PAIRS:
        return []
    offers: list[dict[str, dict[str, Any]]] = []
    for combo in combos:
        data = {**context, **dict(zip(free, combo, strict=True))}
        offer = {name: {"const": value} for name, value in zip(free, combo, strict=True)}
        offer.update({name: {"anyOf": [{"const": value}, {"type": "null"}]} for name, value in pinned.items()})
        try:
            for key, expr in ties:
                value = evaluate(expr, data)
                if not _scalar(value) or not _fits_type(schemas[key], value):
                    raise LogicError("not a value of the key")
                offer[key] = {"const": value}
                data[key] = value
        except LogicError:
            continue
        offers.append(offer)
    return offers


def _tie(rule: Any) -> tuple[str, Any] | None:
    """(key, expression) for ``key == expression`` or ``-e <= key - expression <= e`` (money compared
    with a tolerance), where the expression reads other keys; None for anything else."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return None
    ((operator, args),) = rule.items()
    if not isinstance(args, list):
        return None
    if operator in ("==", "===") and len(args) == 2:
        for this, other in ((args[0], args[1]), (args[1], args[0])):
            name = key_read(this)
            if name is not None and isinstance(other, dict) and _reads_of(other) and name not in _reads_of(other):
                return name, other
    if operator == "<=" and len(args) == 3 and is_number(args[0]) and is_number(args[2]):
        low, middle, high = args
        if low <= 0 <= high and isinstance(middle, dict) and set(middle) == {"-"} and len(middle["-"]) == 2:
            this, other = middle["-"]
            name = key_read(this)
            if name is not None and isinstance(other, dict) and _reads_of(other) and name not in _reads_of(other):
                return name, other
    return None


def _reads_of(expr: Any) -> set[str]:
    found: set[str] = set()
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, dict):
            name = key_read(node)
            if name is not None:
                found.add(name)
            else:
                todo.extend(node.values())
    return found


def _finite(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    if schema.get("type") == "boolean":
        return [True, False]
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | bool) or is_number(value)


def _fits_type(schema: dict[str, Any], value: Any) -> bool:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is None:
        return True
    if isinstance(value, bool):
        return "boolean" in kinds
    if is_number(value):
        return "number" in kinds or ("integer" in kinds and float(value).is_integer())
    return "string" in kinds


__all__ = ["MAX_PAIRS", "derived_values", "flag_topic"]
