"""A model that needs no model: valid replies that walk the definition's graph.

``SimulatedLLM(definition)`` answers each call with a reply the runtime accepts: it picks a
transition the model may take (one whose conditions a model-writable update can satisfy, with
values that pass the ``context_schema``), fills the keys it needs, and otherwise stays and fills
the state's keys to collect. With ``path=[...]`` it follows those states in order; with ``seed`` it
chooses among the possible moves reproducibly. Judge calls pass.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from llm_fsm.authoring.condition_solver import condition_keys, find_witness
from llm_fsm.definition import FSMDefinition, Transition
from llm_fsm.engine import check_values, model_writable_keys
from llm_fsm.llm import LLMRequest, LLMResponse, Usage
from llm_fsm.prompt import OPENING_REQUEST


class SimulatedLLM:
    """Valid replies along the graph (``path``: the states to visit, in order)."""

    def __init__(self, definition: FSMDefinition, path: Sequence[str] | None = None, seed: int = 0) -> None:
        self.definition = definition
        self.path = list(path or [])
        self.random = random.Random(seed)
        self.requests: list[LLMRequest] = []
        self.replies: list[dict[str, Any]] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if request.kind == "judge":
            return _response({"pass": True, "reason": "simulated"})
        reply = self.reply(request.state or self.definition.initial_state, dict(request.context or {}), request)
        self.replies.append(reply)
        return _response(reply)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        response = self.complete(request)
        yield response.text
        yield response

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        for item in self.stream_complete(request):
            yield item

    # -- choosing a reply -----------------------------------------------------------------------

    def reply(self, state: str, context: dict[str, Any], request: LLMRequest) -> dict[str, Any]:
        opening = request.messages[-1]["content"] == OPENING_REQUEST
        moves = [] if opening else self.moves(state, context)
        wanted = self.next_in_path(state)
        if wanted is not None:
            moves = [m for m in moves if m[0] == wanted]
        elif moves and self.path:
            moves = []  # the path is done (or we are off it): stay
        if moves:
            target, update = self.random.choice(moves)
        else:
            target, update = state, self.fill(state, context)
        spoken = self.definition.states[target]
        text = spoken.purpose or spoken.description or target
        return {
            "transition": {"target_state": target, "context_update": update},
            "message": f"[{target}] {text}",
            "reasoning": "simulated",
        }

    def next_in_path(self, state: str) -> str | None:
        """The state after ``state`` on the path (None: no path, or the path says stay)."""
        if state in self.path:
            index = self.path.index(state)
            self.path = self.path[index:]
            return self.path[1] if len(self.path) > 1 else None
        return None

    def moves(self, state: str, context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """Every (target, update) the model could propose and the runtime would accept."""
        moves = []
        for transition in self.definition.states[state].transitions_by_priority():
            if transition.target_state == state:
                continue
            update = self.satisfy(state, transition, context)
            if update is not None:
                moves.append((transition.target_state, update))
        return moves

    def satisfy(self, state: str, transition: Transition, context: dict[str, Any]) -> dict[str, Any] | None:
        """A model-writable update that makes ``transition``'s conditions hold, or None."""
        writable = model_writable_keys(self.definition, state) - set(self.definition.handler_only_keys)
        needed = [k for c in transition.conditions for k in condition_keys(c)]
        prefer = {k: [sample_value(self.definition, k.split(".")[0])] for k in needed}

        def acceptable(candidate: dict[str, Any]) -> bool:
            changed = {k: v for k, v in candidate.items() if context.get(k) != v}
            _, invalid = check_values(self.definition, changed)
            return set(changed) <= writable and not invalid

        schema = self.definition.context_schema
        witness = find_witness([transition], base=context, prefer=prefer, accept=acceptable, schema=schema)
        if witness is None:
            return None
        return {k: v for k, v in witness.items() if context.get(k) != v}

    def unsatisfied(self, state: str, target: str, context: dict[str, Any]) -> str | None:
        """Why no move from ``state`` to ``target`` can be proposed on ``context`` (the first condition
        that no acceptable update satisfies), or None when one can."""
        transitions = [t for t in self.definition.states[state].transitions if t.target_state == target]
        if not transitions:
            return f"no transition from {state} to {target}"
        if any(self.satisfy(state, t, context) is not None for t in transitions):
            return None
        for transition in transitions:
            for index, condition in enumerate(transition.conditions):
                alone = transition.model_copy(update={"conditions": [condition]})
                if self.satisfy(state, alone, context) is None:
                    name = condition.description or f"#{index + 1}"
                    rule = f" {json.dumps(condition.logic)}" if condition.logic is not None else ""
                    return f"could not satisfy condition '{name}'{rule} of {state} → {target}"
        return f"could not satisfy the conditions of {state} → {target} together"

    def fill(self, state: str, context: dict[str, Any]) -> dict[str, Any]:
        """Values for the state's keys to collect that the context lacks."""
        missing = [k for k in self.definition.states[state].required_context_keys if k not in context]
        writable = model_writable_keys(self.definition, state) - set(self.definition.handler_only_keys)
        return {k: sample_value(self.definition, k) for k in missing if k in writable}


def sample_value(definition: FSMDefinition, key: str) -> Any:
    """A plausible value for ``key`` that satisfies its ``context_schema`` entry when there is one."""
    schema = definition.context_schema.get(key, {})
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
        high = schema.get("maximum", low + 100)
        value = min(max(low, 1), high)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    formats = {
        "email": "user@example.com",
        "date": "2026-01-15",
        "date-time": "2026-01-15T10:00:00Z",
        "uri": "https://example.com",
    }
    if schema.get("format") in formats:
        return formats[schema["format"]]
    return f"sample {key}"


def _response(reply: dict[str, Any]) -> LLMResponse:
    text = json.dumps(reply, ensure_ascii=False)
    return LLMResponse(text, Usage(0, len(text) // 4, len(text) // 4), "simulated")


__all__ = ["SimulatedLLM", "sample_value"]
