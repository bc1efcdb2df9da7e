"""The pure turn: from (definition, snapshot, reply) to a decision and a new snapshot.

Nothing here does I/O or mutates its inputs. ``decide`` checks a reply against the definition;
``commit`` builds the next snapshot from an accepted (or fallen-back) decision.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llm_fsm import logic
from llm_fsm.contract import Reply
from llm_fsm.definition import Condition, FSMDefinition, Transition
from llm_fsm.errors import LogicError

SCHEMA_VERSION = 1
EXTRA_KEY = "_extra"


class Exchange(BaseModel):
    """One turn of the conversation: what the user said (None for the opening) and the reply."""

    model_config = ConfigDict(frozen=True)

    user: str | None
    assistant: str
    state: str = Field(description="The state the conversation was in after this reply.")


class Snapshot(BaseModel):
    """Everything a conversation is, as plain JSON-serialisable data."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    definition_name: str
    definition_hash: str
    state: str
    context: dict[str, Any] = Field(default_factory=dict)
    history: tuple[Exchange, ...] = ()
    turns: int = Field(0, description="Completed turns; the opening message is turn 0.")
    status: Literal["new", "active", "ended"] = "new"


class Rejection(BaseModel):
    """Something the runtime refused in a turn, with the reason given to the model and the caller."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["format", "target", "condition", "context_key"]
    reason: str
    target_state: str | None = None
    key: str | None = None
    attempt: int = 1


@dataclass(frozen=True)
class Decision:
    """The verdict on one reply. ``context`` already holds the accepted updates."""

    accepted: bool
    state: str
    context: dict[str, Any]
    applied: dict[str, Any]
    rejected: tuple[Rejection, ...]


def decide(definition: FSMDefinition, snapshot: Snapshot, reply: Reply, *, attempt: int = 1) -> Decision:
    """Check ``reply`` in the snapshot's state: filter its context update, then validate its move."""
    update = reply.transition.context_update if reply.transition else {}
    applied, refused = filter_update(update, protected=definition.handler_only_keys, attempt=attempt)
    context = merge(snapshot.context, applied)
    target = reply.transition.target_state if reply.transition else snapshot.state
    problems = _check_target(definition, snapshot.state, target, context, attempt)
    state = snapshot.state if problems else target
    return Decision(not problems, state, context, applied, (*refused, *problems))


def filter_update(
    update: dict[str, Any], *, protected: Collection[str] = (), attempt: int = 1
) -> tuple[dict[str, Any], list[Rejection]]:
    """Split a model's context update into what it may write and what is refused.

    Refused: keys starting with ``_`` (the runtime's, except ``_extra``) and ``protected`` keys.
    """
    applied: dict[str, Any] = {}
    refused: list[Rejection] = []
    for key, value in update.items():
        if (key.startswith("_") and key != EXTRA_KEY) or key in protected:
            why = "is internal to the runtime" if key.startswith("_") else "may only be set by code"
            reason = f"context key '{key}' {why}; the model may not write it"
            refused.append(Rejection(kind="context_key", reason=reason, key=key, attempt=attempt))
        elif value is not None:
            applied[key] = value
    return applied, refused


def merge(context: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A new context with ``update`` merged in: nested objects merge, ``None`` values are ignored."""
    result = dict(context)
    for key, value in update.items():
        if value is None:
            continue
        old = result.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            result[key] = merge(old, value)
        elif isinstance(value, dict):
            result[key] = merge({}, value)
        else:
            result[key] = value
    return result


def _check_target(
    definition: FSMDefinition, current: str, target: str, context: dict[str, Any], attempt: int
) -> list[Rejection]:
    if target == current:
        return []

    def reject(kind: Literal["target", "condition"], reason: str) -> list[Rejection]:
        return [Rejection(kind=kind, reason=reason, target_state=target, attempt=attempt)]

    if target not in definition.states:
        return reject("target", f"transition to '{target}' rejected: there is no state '{target}'")
    candidates = [t for t in definition.states[current].transitions_by_priority() if t.target_state == target]
    if not candidates:
        allowed = ", ".join(f"'{s}'" for s in _targets(definition, current)) or "none"
        return reject(
            "target", f"transition to '{target}' rejected: '{current}' has no transition to it (allowed: {allowed})"
        )
    failures = [f for t in candidates if (f := unmet_condition(t, context)) is not None]
    if len(failures) < len(candidates):
        return []
    return reject("condition", f"transition to '{target}' rejected: {failures[0]}")


def _targets(definition: FSMDefinition, state: str) -> list[str]:
    return list(dict.fromkeys(t.target_state for t in definition.states[state].transitions))


def unmet_condition(transition: Transition, context: dict[str, Any]) -> str | None:
    """Why the transition's conditions do not hold on ``context``, or None when they all hold."""
    for index, condition in enumerate(transition.conditions):
        reason = _condition_failure(condition, context)
        if reason is not None:
            name = condition.description or f"#{index + 1}"
            return f"condition '{name}' {reason}"
    return None


def _condition_failure(condition: Condition, context: dict[str, Any]) -> str | None:
    missing = [k for k in condition.requires_context_keys if not _has(context, k)]
    if missing:
        return f"needs key{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}"
    if condition.logic is None:
        return None
    try:
        holds = logic.truthy(logic.evaluate(condition.logic, context))
    except LogicError as exc:
        return f"could not be evaluated: {exc}"
    return None if holds else "does not hold on the current context"


def _has(context: dict[str, Any], key: str) -> bool:
    try:
        return logic.truthy(logic.evaluate({"has_context": key}, context))
    except LogicError:  # a blank or malformed key name is never present
        return False


def commit(
    definition: FSMDefinition, snapshot: Snapshot, decision: Decision, *, user: str | None, message: str
) -> Snapshot:
    """The snapshot after a turn that ends in ``decision.state`` and shows ``message``."""
    ended = definition.states[decision.state].terminal
    exchange = Exchange(user=user, assistant=message, state=decision.state)
    return snapshot.model_copy(
        update={
            "state": decision.state,
            "context": decision.context,
            "history": (*snapshot.history, exchange),
            "turns": snapshot.turns + (0 if user is None else 1),
            "status": "ended" if ended else "active",
        }
    )


def initial_snapshot(
    definition: FSMDefinition, state: str | None = None, context: dict[str, Any] | None = None
) -> Snapshot:
    """A conversation that has not started yet, in ``state`` (default: the initial state)."""
    return Snapshot(
        definition_name=definition.name,
        definition_hash=definition.content_hash,
        state=state or definition.initial_state,
        turns=0,
        context=merge({}, dict(context or {})),
    )
