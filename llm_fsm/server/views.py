"""What responses hold: a turn's result, a conversation, a definition (with its graph), as JSON data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.server.service import Stored
from llm_fsm.store.history import Page
from llm_fsm.turn.runner import TurnResult


def result_view(result: TurnResult, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A turn's result as ``llm-fsm run`` prints it, with secret-looking values masked unless asked."""
    from llm_fsm.secrets import mask_pending, mask_run

    data = result.to_dict()
    data["context"], data["context_updates"] = mask(data["context"]), mask(data["context_updates"])
    if "corrections" in data:  # key -> {"from", "to"}: a secret key's values are masked whole
        data["corrections"] = mask(data["corrections"])
    data["pending"] = mask_pending(data["pending"], mask)
    data["tool_calls"] = [mask_run(run, mask) for run in data["tool_calls"]]
    return data


def conversation_view(item: Stored, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    from llm_fsm.secrets import mask_pending

    conversation = item.stored.conversation
    snapshot = conversation.snapshot()
    pending = conversation.pending.model_dump() if conversation.pending else None
    return {
        "id": item.id,
        "definition": item.definition.name,
        "state": conversation.state,
        "stack": conversation.frames,  # root first; the last one talks (subflows)
        "status": conversation.status,
        "ended": conversation.ended,
        "turns": snapshot.turns,
        "version": item.stored.version,
        "context": mask(conversation.context),
        "provenance": conversation.provenance,
        "memory": mask(conversation.memory),
        "summary": snapshot.summary.model_dump(),
        "pending": mask_pending(pending, mask),
        # the tail the conversation carries (a stored one: what a turn needs); older pages: GET .../history
        "history": [exchange.model_dump() for exchange in conversation.history],
        "history_start": snapshot.history_start,
        "history_len": snapshot.history_len,
    }


def history_view(page: Page) -> dict[str, Any]:
    """A page of history: each exchange with its index, the cursor of the page before, the whole length."""
    return {
        "exchanges": [{"index": index, **exchange.model_dump()} for index, exchange in page.exchanges],
        "next_before": page.before,
        "total": page.total,
    }


def definition_view(definition: FSMDefinition) -> dict[str, Any]:
    from llm_fsm.authoring.diagram import mermaid_ids, to_mermaid

    return {
        "name": definition.name,
        "description": definition.description,
        "version": definition.version,
        "initial_state": definition.initial_state,
        "states": {
            sid: {
                "purpose": state.purpose,
                "terminal": state.terminal,
                "transitions": [t.target_state for t in state.transitions],
            }
            for sid, state in definition.states.items()
        },
        "global_transitions": [
            {"target_state": g.target_state, "except_states": list(g.except_states)}
            for g in definition.global_transitions
        ],
        "mermaid": to_mermaid(definition),
        "mermaid_ids": mermaid_ids(definition),
    }
