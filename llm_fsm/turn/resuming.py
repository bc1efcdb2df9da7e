"""Resuming a paused conversation: the snapshot a resume turn starts from (the result merged, the pause lifted,
the token spent), or why the token does not resume it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import ResumeError
from llm_fsm.snapshot import Snapshot
from llm_fsm.turn.engine import record
from llm_fsm.values import as_json_data, merge


def resumed(definition: FSMDefinition, snapshot: Snapshot, token: str, result: Mapping[str, Any]) -> Snapshot:
    """The snapshot a resume turn starts from: ``result`` merged, the pause lifted, ``token`` spent.

    Raises :class:`ResumeError` when ``token`` is not the pending event's, or was already used.
    """
    if token in snapshot.used_tokens:
        raise ResumeError("this resume token was already used: a pause is resumed exactly once", state=snapshot.state)
    if snapshot.pending is None:
        raise ResumeError("the conversation is not paused: there is nothing to resume", state=snapshot.state)
    if token != snapshot.pending.token:
        raise ResumeError("this is not the token of the pending event", state=snapshot.state)
    if not isinstance(result, Mapping):
        kind = type(result).__name__
        raise ResumeError(f"a resume result is an object of context keys, not a {kind}", state=snapshot.state)
    if snapshot.pending.kind == "tool_approval":  # a decision about the call, not context: nothing is merged
        return snapshot.model_copy(
            update={"pending": None, "status": "active", "used_tokens": (*snapshot.used_tokens, token)}
        )
    result = as_json_data(result, source="resume result")
    # merge() ignores None values: only the keys it writes get a provenance
    written = [k for k, v in result.items() if v is not None]
    return snapshot.model_copy(
        update={
            "context": merge(snapshot.context, result),
            "provenance": record(snapshot.provenance, written, "resume", snapshot.turns + 1),  # a resume is a turn
            "pending": None,
            "status": "ended" if definition.states[snapshot.state].terminal else "active",
            "used_tokens": (*snapshot.used_tokens, token),
        }
    )
