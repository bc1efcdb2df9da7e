"""Taking a value back: what ``null`` means in a reply's ``context_update``, the keys a move clears, and the
value that says "any value will do".

The rule, in the words the guides use (``docs/turns.md`` quotes :data:`RULE`; a test holds it to it):

    `null` in a reply's `context_update` means "not learned" and changes nothing, except for a key the
    state lists in `clearable_keys`: there it removes the key and who set it. A transition's `clear_keys`
    are removed when the move is taken, except a key the reply itself wrote on that turn. A removal is
    reported as `{key: null}` in `context_updates`; removing a key the context does not hold does nothing.
    The moves are judged on the context after the reply's removals. The definition's `any_value` is a
    value every key the model writes takes besides its declared type or enum.

The rest of a reply's update is read as before (:func:`llm_fsm.turn.engine.filter_update`: nulls dropped at any
depth). A removal is an update like another: the ``context_update`` handlers get it as ``None`` (a handler
filtered on the key runs for it), the provenance forgets the key, and a stored conversation keeps the
context without it. It is not a correction (``TurnResult.corrections`` names values changed, not removed).

A state's ``clearable_keys`` are keys it may write (:func:`problems` refuses others when the definition
loads): a removal never reaches a key the model may not write there. A transition's ``clear_keys`` are
the author's, so they may name code's keys too (a tool's result of the booking that is over).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from llm_fsm.definition.models import RETURN, FSMDefinition, Transition
from llm_fsm.definition.wording import did_you_mean

RULE = (
    '`null` in a reply\'s `context_update` means "not learned" and changes nothing, except for a key the state '
    "lists in `clearable_keys`: there it removes the key and who set it. A transition's `clear_keys` are removed "
    "when the move is taken, except a key the reply itself wrote on that turn. A removal is reported as "
    "`{key: null}` in `context_updates`; removing a key the context does not hold does nothing. The moves are "
    "judged on the context after the reply's removals. The definition's `any_value` is a value every key the "
    "model writes takes besides its declared type or enum."
)

# (where, message, code, hint, whether it is an error: else a warning)
Problem = tuple[tuple[Any, ...], str, str, str | None, bool]


def held(update: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` (an applied one: a ``None`` value is a removal) without the removals of keys ``context``
    does not hold: there is nothing to remove, and nothing to report."""
    if None not in update.values():
        return dict(update)
    return {key: value for key, value in update.items() if value is not None or key in context}


def cleared(transition: Transition, context: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, None]:
    """The removals of the move by ``transition`` (its ``clear_keys``): the keys ``context`` holds that the
    reply's ``update`` did not write."""
    return {key: None for key in transition.clear_keys if key in context and key not in update}


def written(update: Mapping[str, Any]) -> list[str]:
    """The keys ``update`` writes (its removals left out)."""
    return [key for key, value in update.items() if value is not None]


def removed(update: Mapping[str, Any]) -> list[str]:
    """The keys ``update`` removes."""
    return [key for key, value in update.items() if value is None]


def problems(definition: FSMDefinition) -> Iterator[Problem]:
    """What is wrong with the definition's ``clearable_keys`` (errors: each must be a key its state may write)
    and its transitions' ``clear_keys`` (a key nothing names is a warning; a move to its own state is never
    taken, so its ``clear_keys`` are an error)."""
    known = _named_keys(definition)
    for sid, state in definition.states.items():
        if state.clearable_keys:
            yield from _clearable(definition, sid, state.clearable_keys)
        for index, transition in enumerate(state.transitions):
            if transition.clear_keys and transition.target_state == sid:
                where = ("states", sid, "transitions", index, "clear_keys")
                message = "a move to its own state is never taken (a reply that names it stays): it clears nothing"
                hint = f"clear the keys on the moves that come back to '{sid}', or let the model clear them here"
                hint += " (clearable_keys)"
                yield where, message, "clear_keys_never_apply", hint, True
            yield from _unknown(("states", sid, "transitions", index), transition.clear_keys, known)
    for index, move in enumerate(definition.global_transitions):
        yield from _unknown(("global_transitions", index), move.clear_keys, known)
    for sid in definition.states:
        yield from _ambiguous(definition, sid)


def _ambiguous(definition: FSMDefinition, sid: str) -> Iterator[Problem]:
    """Moves of ``sid`` to one target whose ``clear_keys`` differ: a reply names a target, not a move, so the
    first of them by priority whose conditions hold is taken, and only its keys are cleared (a warning)."""
    state = definition.states[sid]
    moves: list[tuple[tuple[Any, ...], Transition]] = [
        (("states", sid, "transitions", i), t) for i, t in enumerate(state.transitions)
    ]
    applying = definition.global_moves(sid)
    moves += [(("global_transitions", i), t) for i, t in enumerate(definition.global_transitions) if t in applying]
    by_target: dict[str, list[tuple[tuple[Any, ...], Transition]]] = {}
    for where, move in sorted(moves, key=lambda item: item[1].priority):  # stable: its own first on a tie
        by_target.setdefault(move.target_state, []).append((where, move))
    for target, same in by_target.items():
        first_where, first = same[0]
        for where, move in same[1:]:
            if sorted(move.clear_keys) != sorted(first.clear_keys):
                message = (
                    f"in '{sid}', moves to '{target}' clear different keys, and a reply names only the target: the "
                    f"first by priority whose conditions hold ({_path(first_where)}) is taken, with "
                    "its clear_keys"
                )
                hint = "give them different targets, or conditions that tell them apart"
                yield (*where, "clear_keys"), message, "clear_keys_ambiguous", hint, False


def _path(where: tuple[Any, ...]) -> str:
    """``("states", "book", "transitions", 0)`` as the loader writes it: ``states.book.transitions[0]``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where).lstrip(".")


def _clearable(definition: FSMDefinition, sid: str, keys: Collection[str]) -> Iterator[Problem]:
    state = definition.states[sid]
    writes = [
        *state.asked_keys(definition.code_only_keys, definition.moves(sid, RETURN)),
        *definition.correctable_keys(sid),
    ]
    for index, key in enumerate(keys):
        where = ("states", sid, "clearable_keys", index)
        if key.startswith("_"):
            yield where, f"'{key}' is internal to the runtime: the model never writes it", "clearable_key", None, True
        elif key in definition.code_only_keys:
            hint = "code removes it (a delta with null), or a transition's clear_keys"
            yield where, f"'{key}' is set by code: the model never writes it", "clearable_key", hint, True
        elif key not in writes:
            hint = did_you_mean(key, writes) or (
                "list it in the state's required_context_keys or writable_keys"
                if writes
                else "the state writes no keys: list them in its required_context_keys or writable_keys"
            )
            message = f"'{key}' is not a key this state may write, so the model cannot remove it here"
            yield where, message, "clearable_key", hint, True


def _unknown(where: tuple[Any, ...], keys: Collection[str], known: Collection[str]) -> Iterator[Problem]:
    for index, key in enumerate(keys):
        if key not in known and not key.startswith("_"):
            hint = did_you_mean(key, known) or "no state collects it, and no code or tool is said to set it"
            message = f"'{key}' is named nowhere else in the definition: clearing it may do nothing"
            yield (*where, "clear_keys", index), message, "unknown_clear_key", hint, False


def _named_keys(definition: FSMDefinition) -> set[str]:
    """The keys the definition names: those states collect, conditions read, code sets, ``context_schema``
    declares and sub-conversations write back."""
    from llm_fsm.logic.rules import keys_read

    named = {*definition.collected_keys, *definition.code_only_keys, *(definition.context_schema or {})}
    moves = [*definition.global_transitions, *(t for s in definition.states.values() for t in s.transitions)]
    for condition in (c for t in moves for c in t.conditions):
        read = keys_read(condition.logic) if condition.logic is not None else ()
        named.update(key.split(".")[0] for key in (*condition.requires_context_keys, *read))
    for state in definition.states.values():
        named.update(state.clearable_keys)
        named.update(state.subflow.output if state.subflow else ())
    return named
