"""The pure turn: from (definition, snapshot, reply) to a decision and a new snapshot.

Nothing here does I/O or mutates its inputs. ``decide`` checks a reply against the definition;
``commit`` builds the next snapshot from an accepted (or fallen-back) decision.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llm_fsm import clearing, corrections, logic
from llm_fsm.contract import Reply, writable_keys
from llm_fsm.definition import RETURN, Condition, FSMDefinition, State, Transition
from llm_fsm.errors import LogicError
from llm_fsm.memory.spec import RunningSummary
from llm_fsm.values import as_json_data

SCHEMA_VERSION = 1
EXTRA_KEY = "_extra"


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


Status = Literal["new", "active", "paused", "ended"]


class KeyedResult(BaseModel):
    """The answer to a request sent with an idempotency key, kept so that the request sent again gets it
    (see :mod:`llm_fsm.store.idempotency`)."""

    model_config = ConfigDict(frozen=True)

    key: str
    fingerprint: str | None = Field(None, description="What the request asked (None: not compared).")
    result: dict[str, Any] | None = Field(None, description="The turn's TurnResult.to_dict() (None: no turn ran).")


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


@dataclass(frozen=True)
class Decision:
    """The verdict on one reply. ``context`` already holds the accepted updates, ``applied`` (None: a removal)."""

    accepted: bool
    state: str
    context: dict[str, Any]
    applied: dict[str, Any]
    rejected: tuple[Rejection, ...]
    cleared: tuple[str, ...] = ()  # the keys of applied the move's clear_keys removed (the reply's own are not)


def decide(definition: FSMDefinition, snapshot: Snapshot, reply: Reply, *, attempt: int = 1) -> Decision:
    """Check ``reply`` in the snapshot's state: filter its update (by ``corrections.RULE``; its nulls by
    ``clearing.RULE``), then validate its move; an accepted move removes its ``clear_keys``."""
    update, sid = reply.transition.context_update, snapshot.state
    writable = corrections.writable(definition, sid, snapshot.context, model_writable_keys(definition, sid))
    protected, clearable = definition.code_only_keys, definition.states[sid].clearable_keys
    applied, refused = filter_update(
        update, writable=writable, protected=protected, attempt=attempt, clearable=clearable
    )
    refused = corrections.explained(definition, sid, refused)
    applied, invalid = check_values(definition, clearing.held(applied, snapshot.context), attempt=attempt)
    context = apply_delta(snapshot.context, applied)
    target = reply.transition.target_state
    back_to = definition.return_target(snapshot.state, snapshot.came_from)
    # the move is judged on the context with this reply's valid updates: a reply may supply the very
    # key its transition requires
    problems, taken = _check_target(definition, snapshot.state, target, context, attempt, back_to)
    if target == RETURN and back_to is not None:  # the model named the move instead of where it leads
        target = back_to
    state = snapshot.state if problems else target
    accepted = not problems and not invalid
    cleared = clearing.cleared(taken, context, applied) if accepted and taken is not None else {}
    if cleared:
        context, applied = apply_delta(context, cleared), {**applied, **cleared}
    return Decision(accepted, state, context, applied, (*refused, *invalid, *problems), tuple(cleared))


def model_writable_keys(definition: FSMDefinition, state_id: str) -> frozenset[str]:
    """What the model may write in a state: its ``writable_keys``, or by default the keys it collects,
    the keys its moves' conditions read, and ``_extra`` (and, once collected, the keys it may correct: decide)."""

    def compute(state: State) -> frozenset[str]:
        if state.writable_keys is not None:
            return frozenset(state.writable_keys)
        return frozenset([*writable_keys(state, moves=definition.moves(state_id, RETURN)), EXTRA_KEY])

    # cached per definition and state: decide() runs on every reply, and on every streamed preview
    return definition.derived("writable_keys", state_id, compute)


def filter_update(
    update: dict[str, Any],
    *,
    writable: Collection[str] | None = None,
    protected: Collection[str] = (),
    attempt: int = 1,
    clearable: Collection[str] = (),
) -> tuple[dict[str, Any], list[Rejection]]:
    """Split a model's context update into what it may write and what is refused.

    Refused: keys starting with ``_`` (the runtime's, except ``_extra``), ``protected`` keys, and
    keys outside ``writable`` (when given). ``None`` values are dropped (they mean "not learned"), at
    any depth: an object of nulls writes nothing, so no ``context_update`` handler fires for it and no
    provenance says the model set it. Only a ``clearable`` key's own ``None`` is kept: it removes the key
    (an object of nulls for it writes nothing, as for any key).
    """
    applied: dict[str, Any] = {}
    refused: list[Rejection] = []
    dotted = [p for p in protected if "." in p]
    for key, value in update.items():
        why = _refusal(key, writable, protected)
        if why:
            reason = f"context key '{key}' {why}"
            refused.append(Rejection(kind="context_key", reason=reason, key=key, attempt=attempt))
            continue
        for path in [p for p in dotted if p.startswith(f"{key}.")]:  # a gate inside an object the model may write
            value, found = _without(value, path.split(".")[1:])
            if found:
                reason = f"context key '{path}' may only be set by code; the model may not write it"
                refused.append(Rejection(kind="context_key", reason=reason, key=path, attempt=attempt))
        given, value = value, _without_nulls(value)
        if value is not None or (given is None and key in clearable):  # only a null itself removes the key
            applied[key] = value
    return applied, refused


def _without_nulls(value: Any) -> Any:
    """``value`` without the nulls of its objects (None if it held nothing else); lists are kept whole."""
    if not isinstance(value, dict) or not value:  # an empty object is written as the model gave it
        return value
    kept = {k: v for k, v in ((k, _without_nulls(v)) for k, v in value.items()) if v is not None}
    return kept or None


def _without(value: Any, path: list[str]) -> tuple[Any, bool]:
    """``value`` without the nested key at ``path`` (a copy), and whether it was there."""
    if not isinstance(value, dict) or path[0] not in value:
        return value, False
    if len(path) == 1:
        return {k: v for k, v in value.items() if k != path[0]}, True
    inner, found = _without(value[path[0]], path[1:])
    return {**value, path[0]: inner}, found


def _refusal(key: str, writable: Collection[str] | None, protected: Collection[str]) -> str | None:
    if key.startswith("_") and key != EXTRA_KEY:
        return "is internal to the runtime; the model may not write it"
    if key in protected:
        return "may only be set by code; the model may not write it"
    if writable is not None and key not in writable:
        # only the keys it could write: a listed '_' key or handler-only key is refused anyway
        allowed = ", ".join(sorted(k for k in writable if _refusal(k, None, protected) is None)) or "none"
        return f"is not writable in this state (writable: {allowed})"
    return None


def check_values(
    definition: FSMDefinition, update: dict[str, Any], *, attempt: int = 1
) -> tuple[dict[str, Any], list[Rejection]]:
    """Split an update into values that match the definition's ``context_schema`` (or are its ``any_value``;
    a removal, ``None``, matches) and those that do not."""
    if not definition.context_schema:
        return update, []
    from llm_fsm.schemas import violation  # jsonschema is imported only when a schema is used

    kept: dict[str, Any] = {}
    invalid: list[Rejection] = []
    for key, value in update.items():
        checked = key in definition.context_schema and value is not None and value != definition.any_value
        problem = violation(definition.context_schema[key], value) if checked else None
        if problem:
            reason = f"value {_short(value)} for '{key}' is invalid: {problem}"
            invalid.append(Rejection(kind="context_value", reason=reason, key=key, attempt=attempt))
        else:
            kept[key] = value
    return kept, invalid


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def apply_delta(context: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """A new context with a handler's ``delta``: top-level keys set to ``None`` are deleted."""
    result = merge(context, {k: v for k, v in delta.items() if v is not None})
    for key in [k for k, v in delta.items() if v is None]:
        result.pop(key, None)
    return result


def write(
    context: dict[str, Any], provenance: dict[str, Origin], delta: dict[str, Any], *, by: str, turn: int
) -> tuple[dict[str, Any], dict[str, Origin]]:
    """Context and provenance after code (a handler, the caller) wrote ``delta``; a None value deletes its key."""
    written, deleted = clearing.written(delta), clearing.removed(delta)
    return apply_delta(context, delta), record(provenance, written, by, turn, deleted)


def record(
    provenance: dict[str, Origin], keys: Collection[str], by: str, turn: int, deleted: Collection[str] = ()
) -> dict[str, Origin]:
    """New provenance: ``keys`` set by ``by`` on ``turn``; ``deleted`` keys forgotten."""
    result = {k: v for k, v in provenance.items() if k not in deleted}
    origin = Origin(by=by, turn=turn)  # one for all the keys: it is frozen
    result.update({key: origin for key in keys})
    return result


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
            # through merge() so that the nulls inside are dropped and the caller's dict is not shared
            result[key] = merge({}, value)
        else:
            result[key] = value
    return result


def _check_target(
    definition: FSMDefinition, current: str, target: str, context: dict[str, Any], attempt: int, back_to: str | None
) -> tuple[list[Rejection], Transition | None]:
    """The problems of the move to ``target``, and the transition it takes (None: it stays, or is refused). A
    ``"$return"`` with somewhere to go back to takes a move written so before any other to that state."""
    named_return = target == RETURN and back_to is not None
    target = back_to if named_return and back_to is not None else target
    # staying needs no transition: a reply may always keep the conversation where it is
    if target == current:
        return [], None

    def reject(kind: Literal["target", "condition"], reason: str) -> tuple[list[Rejection], None]:
        return [Rejection(kind=kind, reason=reason, target_state=target, attempt=attempt)], None

    if target == RETURN:
        allowed = _allowed(definition, current, back_to)
        why = "has no such move" if not definition.returns(current) else "came from nowhere: there is no way back"
        return reject("target", f"transition to '{target}' rejected: '{current}' {why} (allowed: {allowed})")
    if target not in definition.states:
        return reject("target", f"transition to '{target}' rejected: there is no state '{target}'")
    candidates = [t for t in definition.moves(current, back_to) if t.target_state == target]
    if named_return:  # another move to the same state (a global "start over") clears other keys
        written = [*definition.states[current].transitions, *definition.global_moves(current)]
        candidates = [t for t in candidates if t.model_copy(update={"target_state": RETURN}) in written]
    if not candidates:
        allowed = _allowed(definition, current, back_to)
        return reject(
            "target", f"transition to '{target}' rejected: '{current}' has no transition to it (allowed: {allowed})"
        )
    failures = [unmet_condition(t, context) for t in candidates]
    # several transitions may lead to the same target: the move holds when any one of them has its
    # conditions met, and takes the first of those (by priority); the reason given is the first one's
    if None in failures:
        return [], candidates[failures.index(None)]
    return reject("condition", f"transition to '{target}' rejected: {failures[0]}")


def _allowed(definition: FSMDefinition, state: str, back_to: str | None) -> str:
    """The targets ``state`` may move to, in words, as its transitions are written (then the global ones)."""
    written = (*definition.states[state].transitions, *definition.global_moves(state))
    targets = [back_to if t.target_state == RETURN else t.target_state for t in written]
    return ", ".join(f"'{t}'" for t in dict.fromkeys(targets) if t is not None) or "none"


def unmet_condition(transition: Transition, context: dict[str, Any]) -> str | None:
    """Why the transition's conditions do not hold on ``context``, or None when they all hold."""
    for index, condition in enumerate(transition.conditions):
        reason = condition_failure(condition, context)
        if reason is not None:
            name = condition.description or f"#{index + 1}"
            return f"condition '{name}' {reason}"
    return None


def condition_failure(condition: Condition, context: dict[str, Any]) -> str | None:
    """Why one condition does not hold on ``context`` (a key missing, its logic false), or None when it holds."""
    missing = [k for k in condition.requires_context_keys if not logic.has_key(context, k)]
    if missing:
        return f"needs key{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}"
    if condition.logic is None:
        return None
    try:
        holds = logic.truthy(condition.holds_on(context))
    except LogicError as exc:
        return f"could not be evaluated: {exc}"
    return None if holds else "does not hold on the current context"


def commit(
    definition: FSMDefinition,
    snapshot: Snapshot,
    *,
    state: str,
    context: dict[str, Any],
    provenance: dict[str, Origin],
    user: str | None,
    message: str,
    pending: PendingEvent | None = None,
) -> Snapshot:
    """The snapshot after a turn that ends in ``state`` and shows ``message`` (paused if ``pending``)."""
    status: Status = "paused" if pending else ("ended" if definition.states[state].terminal else "active")
    exchange = Exchange(user=user, assistant=message, state=state)
    return snapshot.model_copy(
        update={
            "state": state,
            "came_from": way_back(snapshot.came_from, snapshot.state, state),
            "context": context,
            "provenance": provenance,
            "history": (*snapshot.history, exchange),
            # the opening (no user text, no history) is turn 0; every later exchange counts, a resume's too
            "turns": snapshot.turns + (0 if user is None and not snapshot.history else 1),
            "status": status,
            "pending": pending,
        }
    )


def way_back(came_from: tuple[str, ...], left: str, entered: str) -> tuple[str, ...]:
    """The way back after a move from ``left`` to ``entered``: unchanged when the conversation stays; cut
    before ``entered`` when it is on the way back (going back, by ``"$return"`` or any move there);
    else with ``left`` added. No state is on it twice, so it holds fewer states than the definition."""
    if entered == left:
        return came_from
    if entered in came_from:
        return came_from[: came_from.index(entered)]
    return (*came_from, left)


def initial_snapshot(
    definition: FSMDefinition, state: str | None = None, context: dict[str, Any] | None = None, *, uid: str = ""
) -> Snapshot:
    """A conversation that has not started yet, in ``state`` (default: the initial state); ``uid``: its id
    (default: a new random one)."""
    # through as_json_data: the context is saved with the snapshot, so it must be JSON data from the start
    initial = merge({}, as_json_data(context or {}, source="initial context"))
    return Snapshot(
        definition_name=definition.name,
        definition_hash=definition.content_hash,
        uid=uid or secrets.token_bytes(12).hex(),
        definition_outline=definition.outline,
        state=state or definition.initial_state,
        turns=0,
        context=initial,
        provenance=record({}, initial, "user_code", 0),
        used_tokens=(),
    )
