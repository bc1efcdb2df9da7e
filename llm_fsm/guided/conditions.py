"""What a transition's conditions say about a context key, for guided schemas: which keys an update must
give for a move to be able to hold, which values the move's simple comparisons allow, and the type the
conditions compare a key as. Anything less plain is left to the engine to check."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llm_fsm.definition.key_values import is_number, reads
from llm_fsm.definition.models import FSMDefinition, State, Transition
from llm_fsm.guided.patterns import MAX_TEXT, containing, literal


def needed_keys(transition: Transition, context: Mapping[str, Any], writable: list[str]) -> list[str] | None:
    """The keys an update must give for ``transition`` to be able to hold; None when no update can
    make it hold (it requires a key this state may not write, or fails on keys it may not change).

    Only plain requirements count: ``requires_context_keys`` and conditions made of comparisons of a
    key with constants (joined by ``and``). A move with any other condition (``or`` of keys, ``!``,
    ``missing``, ``if``, a default, a nested path, a comparison with null) is offered as it is and never
    forced: when it holds is the engine's to check."""
    from llm_fsm.definition.conditions import unmet_condition

    required, plain = required_keys(transition)
    missing = sorted(key for key in required if context.get(key) is None)
    if any(key not in writable for key in missing):
        return None  # a plain requirement no update can meet: the conditions cannot all hold
    if not plain or not required:
        return []
    if not missing and not set(required) & set(writable) and unmet_condition(transition, dict(context)) is not None:
        return None
    return missing


def required_keys(transition: Transition) -> tuple[list[str], bool]:
    """The keys the transition's conditions plainly require (see :func:`needed_keys`), and whether every
    part of them is such a plain requirement."""
    keys: list[str] = []
    plain = True
    for condition in transition.conditions:
        for key in condition.requires_context_keys:
            if "." in key:
                plain = False
            else:
                keys.append(key)
        for rule in conjuncts(condition.logic):
            compared = _compared_key(rule) or _whole_key(rule)
            if compared is None or not (_comparison(rule, compared) or _whole_key(rule)):
                plain = False
            else:
                keys.append(compared)
    return list(dict.fromkeys(keys)), plain


def _whole_key(rule: Any) -> str | None:
    """The key of a whole-number test, ``{"==": [{"%": [{"var": key}, 1]}, 0]}``, or None."""
    if not isinstance(rule, dict) or set(rule) != {"=="} or not isinstance(rule["=="], list):
        return None
    args = rule["=="]
    if len(args) != 2 or args[1] != 0 or not isinstance(args[0], dict) or set(args[0]) != {"%"}:
        return None
    modulo = args[0]["%"]
    if not isinstance(modulo, list) or len(modulo) != 2 or modulo[1] != 1:
        return None
    return _compared_key({"==": [modulo[0], 0]})


def _compared_key(rule: Any) -> str | None:
    """The one plain key (no dots, no default) a comparison reads, or None."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return None
    ((operator, args),) = rule.items()
    if not isinstance(args, list):
        return None
    if operator == "or":
        keys = {_compared_key(part) for part in args}
        return keys.pop() if len(keys) == 1 else None
    names = [a["var"] for a in args if isinstance(a, dict) and "var" in a]
    if len(names) != 1 or not isinstance(names[0], str) or "." in names[0] or not names[0]:
        return None
    return names[0]


def narrowed_by(schema: dict[str, Any], transition: Transition, key: str, given: list[str]) -> dict[str, Any]:
    """``schema`` with what the transition's simple comparisons of ``key`` say (a constant, a list of
    values, numeric bounds), when they fit its type; anything else is left to the engine to check."""
    narrowed = dict(schema)
    parts = contained(transition, key)
    limit = int(schema.get("maxLength", MAX_TEXT))
    pattern = containing([*given, *parts], limit) if parts and schema.get("type") == "string" else None
    if pattern is not None:
        narrowed["pattern"] = pattern
    for condition in transition.conditions:
        for rule in conjuncts(condition.logic):
            for keyword, value in _comparison(rule, key):
                if keyword == "contains":
                    continue
                if keyword in ("const", "enum"):
                    values = value if keyword == "enum" else [value]
                    if all(_fits(schema, v) for v in values):
                        narrowed.pop("maxLength", None)
                        narrowed[keyword] = value
                elif schema.get("type") in ("number", "integer"):  # the tightest of several bounds
                    tighter = max if keyword in ("minimum", "exclusiveMinimum") else min
                    narrowed[keyword] = tighter(narrowed[keyword], value) if keyword in narrowed else value
    return narrowed


def conjuncts(rule: Any) -> list[Any]:
    if isinstance(rule, dict) and len(rule) == 1 and isinstance(rule.get("and"), list):
        return [part for item in rule["and"] for part in conjuncts(item)]
    return [] if rule is None else [rule]


def contained(transition: Transition, key: str) -> list[str]:
    """The text the transition's conditions require ``key``'s value to contain (``{"in": ["@", key]}``)."""
    return [
        value
        for condition in transition.conditions
        for rule in conjuncts(condition.logic)
        for keyword, value in _comparison(rule, key)
        if keyword == "contains"
    ]


_BOUNDS = {"<": ("exclusiveMinimum", "exclusiveMaximum"), "<=": ("minimum", "maximum")}
_FLIPPED = {">": "<", ">=": "<="}


def _comparison(rule: Any, key: str) -> list[tuple[str, Any]]:
    """(keyword, value) pairs for a comparison of ``key`` with constants; [] for anything else."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return []
    ((operator, args),) = rule.items()
    if not isinstance(args, list):
        return []
    if operator in _FLIPPED:
        operator, args = _FLIPPED[operator], list(reversed(args))
    if operator in _BOUNDS:
        return _bounded(_BOUNDS[operator], args, key)
    compared = _COMPARED.get(operator)
    return compared(args, key) if compared is not None else []


def _any_of(args: list[Any], key: str) -> list[tuple[str, Any]]:
    """An ``or`` whose every part names values of the key: any of them."""
    if not args:
        return []
    values: list[Any] = []
    for part in args:
        found = _comparison(part, key)
        if not found or found[0][0] not in ("const", "enum"):
            return []
        values.extend(found[0][1] if found[0][0] == "enum" else [found[0][1]])
    return [("enum", list(dict.fromkeys(values)))]


def _equal(args: list[Any], key: str) -> list[tuple[str, Any]]:
    """The key equal to a constant (either side): that value."""
    if len(args) != 2:
        return []
    other = args[1] if reads(args[0], key) else args[0] if reads(args[1], key) else None
    return [("const", other)] if other is not None and not isinstance(other, dict | list) else []


def _membership(args: list[Any], key: str) -> list[tuple[str, Any]]:
    """An ``in``: text the key's text contains (``{"in": ["@", key]}``), or a list of constants the key is one of."""
    if len(args) == 2 and reads(args[1], key) and isinstance(args[0], str):  # text in text
        return [("contains", args[0])] if literal(args[0]) is not None else []
    if len(args) == 2 and reads(args[0], key) and isinstance(args[1], list):
        return [("enum", args[1])] if args[1] and all(not isinstance(v, dict | list) for v in args[1]) else []
    return []


def _bounded(bounds: tuple[str, str], args: list[Any], key: str) -> list[tuple[str, Any]]:
    """A ``<`` or ``<=`` (``bounds``: its lower and upper keywords) of the key and numbers: the key between two, or
    below or above one."""
    low, high = bounds
    if len(args) == 3 and reads(args[1], key) and is_number(args[0]) and is_number(args[2]):
        return [(low, args[0]), (high, args[2])]
    if len(args) == 2 and reads(args[0], key) and is_number(args[1]):
        return [(high, args[1])]
    if len(args) == 2 and reads(args[1], key) and is_number(args[0]):
        return [(low, args[0])]
    return []


# the comparisons other than bounds, by operator
_COMPARED: dict[str, Callable[[list[Any], str], list[tuple[str, Any]]]] = {
    "or": _any_of,
    "==": _equal,
    "===": _equal,
    "in": _membership,
}


def _fits(schema: dict[str, Any], value: Any) -> bool:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind is None:
        return True
    names = {bool: "boolean", str: "string", int: "integer", float: "number"}
    name = names.get(type(value))
    return (
        name in kinds
        or (name == "integer" and "number" in kinds)
        or (name == "number" and "integer" in kinds and float(value).is_integer())
    )


def asked_elsewhere(definition: FSMDefinition, state_id: str) -> frozenset[str]:
    """The keys other states ask for and ``state_id`` does not: a move of this state may read them (a booking that
    skips the contact step when the contact is known), but a small model asked for them here fills them with what
    this turn's user said (an age as the trip's length, the day as the owner's name). A guided turn leaves them as
    they are: collected in their own state, corrected where ``corrections`` allows or in a read-back (a state
    that asks only a yes/no question: "is all this right?"), once collected."""

    def compute(state: State) -> frozenset[str]:
        others = (other.required_context_keys for other in definition.states.values() if other.id != state.id)
        return frozenset(key for keys in others for key in keys) - set(state.required_context_keys)

    return definition.derived("guided:asked_elsewhere", state_id, compute)
