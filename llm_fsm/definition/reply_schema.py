"""What a state lets a reply say: the keys the model may write there (``model_writable_keys``, the ones it is
asked about, ``writable_keys``) and the JSON Schema of a valid reply (``reply_schema``: loose, or strict for
structured outputs). The reply itself, and how it is read, is :mod:`llm_fsm.contract`."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from llm_fsm.definition.models import RETURN, FSMDefinition, State, Transition

# a value of a key whose type nothing says, in a strict schema: any scalar, or null (not learned)
SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}


def reply_schema(
    state: State,
    *,
    strict: bool,
    protected: Collection[str] = (),
    moves: Sequence[Transition] | None = None,
    keys: Sequence[str] | None = None,
    values: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """JSON Schema of a valid reply in ``state``: ``target_state`` is an enum of the allowed moves.

    ``moves``: the state's moves as the runtime offers them (``FSMDefinition.moves``: global ones
    included, ``"$return"`` resolved); by default its own transitions. With ``strict`` (OpenAI-style
    structured outputs) every object is closed and every property required, so ``context_update``
    lists the keys this state may write (``keys``, by default :func:`writable_keys`); the model writes
    null for keys it did not learn, and nulls are ignored by the merge. ``values``: the schema of a key's
    value, where it is known (else any scalar or null).
    """
    moves = state.transitions if moves is None else moves
    # the state itself is always a target: staying needs no transition (see engine._check_target)
    targets = sorted({state.id, *(t.target_state for t in moves)})
    update: dict[str, Any] = {"type": "object"}
    if strict:
        keys = list(writable_keys(state, protected) if keys is None else keys)
        values = {key: (values or {}).get(key, SCALAR) for key in keys}
        update.update(properties=values, required=keys, additionalProperties=False)
    transition = {
        "type": "object",
        "properties": {"context_update": update, "target_state": {"type": "string", "enum": targets}},
        "required": ["context_update", "target_state"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "transition": transition,
            "message": {"type": "string"},
            "reasoning": {"type": "string"},
        },
        "required": ["transition", "message", "reasoning"],
        "additionalProperties": False,
    }


def writable_keys(
    state: State, protected: Collection[str] = (), moves: Sequence[Transition] | None = None
) -> list[str]:
    """Keys the model is asked about in ``state``: its ``writable_keys`` when it has them, else those to
    collect and those the conditions of its ``moves`` read (by default its own transitions; pass
    ``FSMDefinition.moves`` to count the global ones); never internal ``_`` keys or ``protected`` ones."""
    return state.asked_keys(protected, moves)


EXTRA_KEY = "_extra"


def model_writable_keys(definition: FSMDefinition, state_id: str) -> frozenset[str]:
    """What the model may write in a state: its ``writable_keys``, or by default the keys it collects,
    the keys its moves' conditions read, and ``_extra`` (and, once collected, the keys it may correct: decide)."""
    known: frozenset[str] | None = definition.known("writable_keys", state_id)
    if known is not None:  # asked on every reply: no closure made once it is known
        return known

    def compute(state: State) -> frozenset[str]:
        if state.writable_keys is not None:
            return frozenset(state.writable_keys)
        return frozenset([*writable_keys(state, moves=definition.moves(state_id, RETURN)), EXTRA_KEY])

    # cached per definition and state: decide() runs on every reply, and on every streamed preview
    return definition.derived("writable_keys", state_id, compute)
