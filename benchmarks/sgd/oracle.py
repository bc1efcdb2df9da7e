"""The oracle: a scripted model that answers every call of a turn with the annotated dialogue state, so that a
figure below 100 % is something the runtime, not a model, stood in the way of."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from benchmarks.sgd.convert import DONE, state_id
from benchmarks.sgd.data import Turn
from llm_fsm.llm import LLMRequest, LLMResponse


def gold_state(intent: str, state: str) -> str:
    """The state the annotation's intent is: its own, ``done`` for ``NONE`` after one, else where it is."""
    if intent != "NONE":
        return state_id(intent)
    return DONE if state != "start" else state


def gold_reply(turn: Turn, before: dict[str, Any], state: str, slots: Iterable[str] = ()) -> dict[str, Any]:
    """The reply that writes the annotated state after ``turn`` over the context ``before`` it, as a strict schema
    has a reply write every key of ``slots`` (the definitions' keys are all clearable: null removes): each slot's
    annotated value (its first spelling, or the one held when it is among the spellings), null for the others
    (a slot the annotation dropped is removed; one never given stays absent), and the intent's state."""
    update: dict[str, Any] = dict.fromkeys(slots)
    for key, values in turn.slots.items():
        update[key] = before[key] if before.get(key) in values else values[0]
    return {
        "transition": {"target_state": gold_state(turn.intent, state), "context_update": update},
        "message": turn.system or "Goodbye!",
        "reasoning": "",
    }


def _any_message(schema: Any) -> Any:
    """``schema`` with any text as the message: what is judged is the state, and SGD's system turns are not
    written to a guided message's bounds."""
    if isinstance(schema, list):
        return [_any_message(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    made = {key: _any_message(value) for key, value in schema.items()}
    if isinstance(made.get("properties"), dict) and "message" in made["properties"]:
        made["properties"] = {**made["properties"], "message": {"type": "string"}}
    return made


class Oracle:
    """Answers each call with ``answer``, set by the runner before each turn (retries get it again).

    ``guided``: the conversation makes guided requests. ``fits`` says whether the schema of the turn's first
    request (the strict schema a model is held to; guided: its grammar) admits the annotated reply: the share of
    turns where it does is the most a model held to it could score, whatever the model."""

    def __init__(self, *, guided: bool = False) -> None:
        self.guided = guided
        self.answer: dict[str, Any] = {}
        self.fits: bool | None = None  # the runner sets None before each turn

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.fits is None and request.kind == "reply" and request.strict_schema is not None:
            from jsonschema import Draft202012Validator  # litellm's dependency; only the guided ceiling uses it

            valid = Draft202012Validator(_any_message(request.strict_schema)).is_valid
            bare = {key: value for key, value in self.answer.items() if key != "reasoning"}  # a guided reply has none
            self.fits = valid(self.answer) or valid(bare)
        return LLMResponse(json.dumps(self.answer), model="oracle")

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)
