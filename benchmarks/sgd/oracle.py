"""The oracle: a scripted model that answers every call of a turn with the annotated dialogue state, so that a
figure below 100 % is something the runtime, not a model, stood in the way of."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.sgd.convert import DONE, state_id
from benchmarks.sgd.data import Turn
from llm_fsm.llm import LLMRequest, LLMResponse


def gold_state(intent: str, state: str) -> str:
    """The state the annotation's intent is: its own, ``done`` for ``NONE`` after one, else where it is."""
    if intent != "NONE":
        return state_id(intent)
    return DONE if state != "start" else state


def gold_reply(turn: Turn, before: dict[str, Any], state: str) -> dict[str, Any]:
    """The reply that writes the annotated state after ``turn`` over the context ``before`` it: each slot whose
    value changed (its first spelling), null for each slot the annotation dropped, the intent's state."""
    update: dict[str, Any] = {key: None for key in before if key not in turn.slots}
    update.update({key: values[0] for key, values in turn.slots.items() if before.get(key) not in values})
    return {
        "transition": {"target_state": gold_state(turn.intent, state), "context_update": update},
        "message": turn.system or "Goodbye!",
    }


class Oracle:
    """Answers each call with ``answer``, set by the runner before each turn (retries get it again)."""

    guided = False

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}
        self.calls = 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        return LLMResponse(json.dumps(self.answer), model="oracle")

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)
