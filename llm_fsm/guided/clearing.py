"""``null`` and ``any_value`` in the reply schemas (what they mean: :mod:`llm_fsm.definition.clearing`).

Every value of a strict or guided schema already admits null. What changes:

- the definition's ``any_value`` is admitted beside each key's type or closed set: in the plain strict schema
  (:func:`strict_any`) everywhere, and in a guided branch wherever the key may be written and the branch's move
  does not compare its value (a move that only needs the key present is made by it, as the engine judges);
- for a key the state may clear that the context holds, null removes it, where a guided schema meant "as
  collected" by it: a branch that left such a key null only now writes the value held, a branch whose move
  reads the key cannot remove it (the move would not hold), and a branch that offers other values offers the
  held one too, so that keeping it never needs a null (:func:`with_clearing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import LogicError
from llm_fsm.guided.branches import NULL
from llm_fsm.guided.entered import keys_of
from llm_fsm.guided.words import accepts


def with_clearing(
    definition: FSMDefinition,
    state_id: str,
    context: Mapping[str, Any],
    branches: list[dict[str, Any]],
    back_to: str | None,
) -> list[dict[str, Any]]:
    """A guided schema's ``branches`` (of a turn in ``state_id`` on ``context``) with the state's clearable
    keys and the definition's ``any_value`` as the module says; as they are when there are neither."""
    held = {key: context[key] for key in definition.states[state_id].clearable_keys if key in context}
    if not held and definition.any_value is None:
        return branches
    moves = definition.moves(state_id, back_to)
    shaped = []
    for branch in branches:
        target = branch["properties"]["target_state"]["enum"][0]
        taken = [t for t in moves if t.target_state == target] if target != state_id else []
        reads = {key for t in taken for key in keys_of(t)}
        compared = {key for t in taken for key in _compared(t)}
        update = branch["properties"]["context_update"]
        values = {
            key: _value(schema, held.get(key, _ABSENT), definition.any_value, key in reads, key in compared)
            for key, schema in update["properties"].items()
        }
        shaped.append(
            {**branch, "properties": {**branch["properties"], "context_update": {**update, "properties": values}}}
        )
    return shaped


_ABSENT = object()


def _value(schema: dict[str, Any], held: Any, any_value: str | None, read: bool, compared: bool) -> dict[str, Any]:
    """One key's value in a branch: ``held``, its value when the state may clear it (else ``_ABSENT``);
    ``read``: the branch's move reads the key, ``compared``: it compares its value."""
    parts = schema["anyOf"] if set(schema) == {"anyOf"} else [schema]
    given = [part for part in parts if part != NULL]
    values, nullable = list(given), len(given) < len(parts)
    if held is not _ABSENT:
        if not given:  # the branch leaves the key as collected: a null would remove it
            values = [{"const": held}]
        elif not read and not any(accepts(part, held) for part in given):
            values.append({"const": held})
        nullable = nullable and bool(given) and not read  # removing a key the move reads would break the move
    if any_value is not None and given and not compared and not any(accepts(part, any_value) for part in values):
        values.append({"const": any_value})
    if values == given and nullable == (len(given) < len(parts)):
        return schema
    every = [*values, NULL] if nullable else values
    return every[0] if len(every) == 1 else {"anyOf": every}


def _compared(transition: Any) -> set[str]:
    """The keys (by their first part) whose value the transition's rules read, not only their presence."""
    from llm_fsm.logic.rules import keys_read

    try:
        return {key.split(".")[0] for c in transition.conditions if c.logic is not None for key in keys_read(c.logic)}
    except LogicError:  # too deep to read: as if it read nothing, as keys_of does (the engine still checks it)
        return set()
