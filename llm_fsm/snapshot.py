"""A conversation's data: the snapshot a turn starts from and commits, and what it holds (the history's
exchanges, where each context value came from, a pending pause, the answers kept per idempotency key, the
frames of sub-conversations, the rejections of a turn). Plain frozen pydantic models: every store saves a
snapshot as its JSON and reads it back unchanged (``SCHEMA_VERSION``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llm_fsm.definition.memory import RunningSummary

Status = Literal["new", "active", "paused", "ended"]

SCHEMA_VERSION = 1


class Exchange(BaseModel):
    """One turn of the conversation: what the user said (None for the opening) and the reply."""

    model_config = ConfigDict(frozen=True)

    user: str | None
    assistant: str
    state: str = Field(description="The state the conversation was in after this reply.")


class Origin(BaseModel):
    """Who set a context key (``llm``, ``handler:<name>``, ``tool:<name>``, ``user_code``, ``resume``) and on
    which turn."""

    model_config = ConfigDict(frozen=True)

    by: str
    turn: int


class PendingEvent(BaseModel):
    """Why a conversation is paused, and the single-use token that resumes it."""

    model_config = ConfigDict(frozen=True)

    reason: str
    payload: dict[str, Any] = Field(default_factory=dict)
    created_at: str
    token: str
    state: str
    handler: str | None = None
    timing: str | None = None
    kind: Literal["break", "tool_approval"] = "break"
    tool_call: dict[str, Any] | None = None  # tool_approval: the call waiting for a person (a ToolRun's data)
    tool_runs: tuple[dict[str, Any], ...] = ()  # tool_approval: the calls that ran earlier in the paused turn


class KeyedResult(BaseModel):
    """The answer to a request sent with an idempotency key, kept so that the request sent again gets it
    (see :mod:`llm_fsm.store.idempotency`)."""

    model_config = ConfigDict(frozen=True)

    key: str
    fingerprint: str | None = Field(None, description="What the request asked (None: not compared).")
    result: dict[str, Any] | None = Field(None, description="The turn's TurnResult.to_dict() (None: no turn ran).")
    begun: bool = Field(
        False,
        description="The request's run is saved part-way (a step of it, before the next began; result: None): "
        "sent again, the request goes on with the run from the stored step.",
    )


class Snapshot(BaseModel):
    """Everything a conversation is, as plain JSON-serialisable data."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    definition_name: str
    definition_hash: str
    uid: str = Field(
        "",
        description="The conversation's own random id, kept for its life: what tool calls' idempotency keys are "
        "made from ('' in snapshots made before it existed: one is derived on restore).",
    )
    definition_outline: dict[str, str] = Field(
        default_factory=dict, description="Hashes of the definition's parts, to say what changed on restore."
    )
    state: str
    context: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Origin] = Field(default_factory=dict)
    history: tuple[Exchange, ...] = Field(
        (),
        description="The exchanges carried, from index history_start on: the whole history, or for a conversation "
        "kept in a store the tail a turn needs (the rest is paged from the store: Store.history).",
    )
    history_start: int = Field(
        0, ge=0, description="The index of history[0] in the whole history (0: the snapshot carries all of it)."
    )
    turns: int = Field(0, description="Completed turns; the opening message is turn 0.")
    status: Status = "new"
    pending: PendingEvent | None = None
    used_tokens: tuple[str, ...] = Field((), description="Resume tokens already used (each works once).")
    memory: dict[str, str] = Field(default_factory=dict, description="Working-memory slots written (llm_fsm.memory).")
    summary: RunningSummary = Field(default_factory=RunningSummary, description="The running summary (summaries).")
    came_from: tuple[str, ...] = Field(
        (),
        description='The way back: the states the conversation came from, the last one most recent. A "$return" '
        "move goes to the last; a move to a state on it cuts it there; any other move adds the state it leaves.",
    )
    stack: tuple[Frame, ...] = Field(
        (), description="Sub-conversations under way (llm_fsm.subflows), outermost first; the last one talks."
    )
    idempotency: tuple[KeyedResult, ...] = Field(
        (),
        description="The answers to the last requests sent with an idempotency key, oldest first; saved in the "
        "very write that saves their turn (llm_fsm.store.idempotency). Never shown to the model.",
    )

    @property
    def history_len(self) -> int:
        """How many exchanges the whole history holds, carried or not."""
        return self.history_start + len(self.history)


class Frame(BaseModel):
    """A sub-conversation under way: the definition it runs, the state of the level below that runs
    it, and its own snapshot (whose ``stack`` is empty: the frames are listed in the root's)."""

    model_config = ConfigDict(frozen=True)

    definition: str = Field(description="The sub-definition's name.")
    reference: str = Field(description="The state's subflow.definition that names it.")
    state: str = Field(description="The state of the level below that runs it.")
    snapshot: Snapshot


Snapshot.model_rebuild()


RejectionKind = Literal[
    "format", "truncated", "target", "condition", "context_key", "context_value", "check", "tool", "memory"
]


class Rejection(BaseModel):
    """Something the runtime refused in a turn, with the reason given to the model and the caller."""

    model_config = ConfigDict(frozen=True)

    kind: RejectionKind
    reason: str
    target_state: str | None = None
    key: str | None = None
    attempt: int = 1
