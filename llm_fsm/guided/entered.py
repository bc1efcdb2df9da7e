"""Guided replies: the move a reply that stays is given, and the message of the state it enters.

A grammar makes a guided reply that writes what a move needs name that move, where the grammar can say the
move's conditions (:mod:`llm_fsm.guided.schema`). Where it cannot (a price that must equal the product's, a score
summed over three answers), a small model writes the values and stays: :func:`fulfilled_move` finds the move
the definition says follows from them. Its message was written for the state it stays in ("And your last
name?"), so the turn asks once more, with the entered state's prompt, for a reply held to
:func:`entered_schema`: that state's message and nothing else. Plain replies never get this move: the engine
judges the target the model named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import LogicError
from llm_fsm.guided.patterns import not_opening_like

MAX_MESSAGE = 240  # characters of a guided message
MAX_EARLIER = 20  # the last messages a guided message may not open like (a grammar of some 20 KB at most)


def fulfilled_move(
    definition: FSMDefinition,
    state_id: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    back_to: str | None = None,
) -> str | None:
    """Where a guided reply that stays in ``state_id`` goes instead: the first move (by priority) whose
    conditions hold on ``after`` (the context with the reply's update), when they read a key the update
    gave or changed; None when that move held already on ``before`` (the model chose to stay) or no move holds.
    """
    from llm_fsm.definition.conditions import unmet_condition

    changed = {key for key, value in after.items() if before.get(key) != value}
    if not changed:
        return None
    for transition in definition.moves(state_id, back_to):
        if not transition.conditions or unmet_condition(transition, dict(after)) is not None:
            continue
        return transition.target_state if keys_of(transition) & changed else None
    return None


def message_schema(earlier: Iterable[str]) -> dict[str, Any]:
    """A guided message: bounded, and opening like none of the last ``earlier`` messages (a 135M model wrote its
    greeting again, word for word, on every turn)."""
    message: dict[str, Any] = {"type": "string", "maxLength": MAX_MESSAGE}
    if (fresh := not_opening_like(list(earlier)[-MAX_EARLIER:], MAX_MESSAGE)) is not None:
        message["pattern"] = fresh
    return message


def entered_schema(state_id: str, earlier: Iterable[str]) -> dict[str, Any]:
    """The reply of the call that writes the message of ``state_id``, just entered: it stays there, writes
    nothing, and its message is a guided one (:func:`message_schema`)."""
    nothing = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    transition = {
        "type": "object",
        "properties": {"context_update": nothing, "target_state": {"type": "string", "enum": [state_id]}},
        "required": ["context_update", "target_state"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"transition": transition, "message": message_schema(earlier)},
        "required": ["transition", "message"],
        "additionalProperties": False,
    }


def keys_of(transition: Any) -> set[str]:
    """The keys (dotted paths by their first part) the transition's conditions read: requirements and ``var``."""
    from llm_fsm.logic.rules import keys_read

    try:
        return {
            key.split(".")[0]
            for condition in transition.conditions
            for key in (*condition.requires_context_keys, *keys_read(condition.logic))
        }
    except LogicError:  # too deep to read: as if it read nothing (the engine still checks it)
        return set()
