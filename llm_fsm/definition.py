"""Pydantic models of the definition format, and the JSON Schema they generate.

The models validate field types and shapes. Checks that span the whole file (targets exist,
a terminal state is reachable, JsonLogic operators are allowed) live in :mod:`llm_fsm.loader`,
which reports them together with the field errors.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

JSONLogic = dict[str, Any] | bool


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Condition(_Frozen):
    """All of a condition's parts must hold for it to hold."""

    description: str = Field("", description="What the condition means, shown to the model.")
    requires_context_keys: tuple[str, ...] = Field(
        (), description="Keys that must be present and non-empty in the context."
    )
    logic: JSONLogic | None = Field(None, description="A JsonLogic rule evaluated on the context.")


class Transition(_Frozen):
    target_state: str = Field(description="Id of the state this transition leads to.")
    description: str = Field("", description="When to take this transition, shown to the model.")
    priority: int = Field(100, description="Lower is preferred when several transitions apply.")
    conditions: tuple[Condition, ...] = Field((), description="All must hold for the move.")


class Example(_Frozen):
    """One line of an example dialogue (llm-fsm's ``example_dialogue``)."""

    role: str
    content: str


class State(_Frozen):
    id: str = Field(description="Unique identifier: letters, digits and underscores.")
    description: str = ""
    purpose: str = Field("", description="What this state is for, shown to the model.")
    instructions: str = Field("", description="How the model should behave in this state.")
    required_context_keys: tuple[str, ...] = Field(
        (), description="Information the model should collect in this state."
    )
    extraction_instructions: str = Field("", description="How to extract the keys to collect.")
    response_instructions: str = Field("", description="How to phrase the reply.")
    example_dialogue: tuple[Example, ...] = Field((), description="Example exchanges.")
    transitions: tuple[Transition, ...] = Field(
        (), description="Where the conversation may go next. No transitions: a terminal state."
    )

    @field_validator("example_dialogue", mode="before")
    @classmethod
    def _flatten_examples(cls, value: Any) -> Any:
        # llm-fsm writes each example line as a one-key object: {"user": "..."}.
        if not isinstance(value, list):
            return value
        return [line for item in value for line in _example_lines(item)]

    @property
    def terminal(self) -> bool:
        return not self.transitions

    def transitions_by_priority(self) -> tuple[Transition, ...]:
        return tuple(sorted(self.transitions, key=lambda t: t.priority))


def _example_lines(item: Any) -> list[Any]:
    if isinstance(item, dict) and "role" not in item:
        return [{"role": role, "content": content} for role, content in item.items()]
    return [item]


class FSMDefinition(_Frozen):
    """A validated, immutable conversation definition. Build it with :func:`llm_fsm.load`."""

    schema_: str | None = Field(None, alias="$schema", description="Path or URL of this schema.")
    name: str = Field(description="Name of the conversation.")
    description: str = ""
    version: str = "1.0"
    initial_state: str = Field(description="Id of the state the conversation starts in.")
    persona: str = Field("", description="Who the assistant is and how it speaks.")
    states: dict[str, State] = Field(description="States keyed by id (a list of states also loads).")
    handler_only_keys: tuple[str, ...] = Field((), description="Context keys the model may never write.")

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON of the definition (identifies what a snapshot ran on)."""
        data = self.model_dump(mode="json", exclude={"schema_"})
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def state(self, state_id: str) -> State:
        return self.states[state_id]
