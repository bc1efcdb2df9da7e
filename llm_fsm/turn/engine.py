"""The pure turn: from (definition, snapshot, reply) to a decision and a new snapshot.

Nothing here does I/O or mutates its inputs. ``decide`` checks a reply against the definition;
``commit`` builds the next snapshot from an accepted (or fallen-back) decision.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from llm_fsm.contract import Reply
from llm_fsm.definition import clearing, corrections
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.models import RETURN, FSMDefinition, Transition
from llm_fsm.definition.reply_schema import EXTRA_KEY, model_writable_keys
from llm_fsm.records import quick_init
from llm_fsm.snapshot import Exchange, Origin, PendingEvent, Rejection, Snapshot, Status
from llm_fsm.values import as_json_data, merge


@quick_init  # built on every turn (llm_fsm.records)
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
    exchange: bool = True,
) -> Snapshot:
    """The snapshot after a turn that ends in ``state`` and shows ``message`` (paused if ``pending``); without
    ``exchange`` (an automatic move that said nothing) no exchange is recorded and no turn counted."""
    status: Status = "paused" if pending else ("ended" if definition.states[state].terminal else "active")
    said = (Exchange(user=user, assistant=message, state=state),) if exchange else ()
    return snapshot.model_copy(
        update={
            "state": state,
            "came_from": way_back(snapshot.came_from, snapshot.state, state),
            "context": context,
            "provenance": provenance,
            "history": (*snapshot.history, *said),
            # the opening (no user text, no history) is turn 0; every later exchange counts, a resume's too
            "turns": snapshot.turns + (0 if not exchange or (user is None and not snapshot.history) else 1),
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
