"""Corrections: a person changing what they said earlier ("make it Friday" at a read-back).

The one rule of what the model may write, in the words the guides use (``docs/authoring.md`` and
``docs/turns.md`` quote :data:`RULE`; a test holds them to it):

    In a state the model writes the keys listed in its `writable_keys`, or, without that list, the keys it
    collects (`required_context_keys`), the keys the conditions of its moves read (global moves included) and
    `_extra`; it also corrects the keys `corrections` allows once they are in the context. It never writes
    keys starting with `_` (except `_extra`), `handler_only_keys` or a tool's `result_key`. Other writes are
    dropped and reported in `rejected`.

``corrections`` (the definition's, or a state's over it) is ``true`` (every key some state collects:
:attr:`FSMDefinition.collected_keys`), ``false`` (none, the default) or a list of such keys
(:meth:`FSMDefinition.correctable_keys`). A correctable key is writable only once it is in the context: a
correction never writes a key the state may not write. A write that changes a value already there is
reported as a correction (``TurnResult.corrections``, the ``context_update`` handlers' ``corrections``);
the moves are judged on the corrected context like on any update, so a move a correction breaks is refused.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any, TypeVar

from llm_fsm.definition.models import Corrections, FSMDefinition
from llm_fsm.definition.wording import did_you_mean

R = TypeVar("R")

RULE = (
    "In a state the model writes the keys listed in its `writable_keys`, or, without that list, the keys it "
    "collects (`required_context_keys`), the keys the conditions of its moves read (global moves included) and "
    "`_extra`; it also corrects the keys `corrections` allows once they are in the context. It never writes keys "
    "starting with `_` (except `_extra`), `handler_only_keys` or a tool's `result_key`. Other writes are dropped "
    "and reported in `rejected`."
)


def writable(
    definition: FSMDefinition, state_id: str, context: Mapping[str, Any], keys: frozenset[str]
) -> frozenset[str]:
    """``keys`` (what the state writes) with the keys it may correct that are already in ``context``."""
    fixable = [key for key in definition.correctable_keys(state_id) if key in context and key not in keys]
    return keys.union(fixable) if fixable else keys


def explained(definition: FSMDefinition, state_id: str, refused: list[R]) -> list[R]:
    """``refused`` (the engine's rejections) with the refusals of keys the state may correct once collected
    saying so: a correction never writes a new key."""
    fixable = definition.correctable_keys(state_id)
    if not fixable:
        return refused
    later = "; it may be corrected once collected, and it has not been"
    # read as Any: the engine's Rejection, which this module cannot import (the engine imports this one)
    found: list[Any] = refused
    return [r.model_copy(update={"reason": r.reason + later}) if r.key in fixable else r for r in found]


def corrected(
    definition: FSMDefinition, state_id: str, before: Mapping[str, Any], after: Mapping[str, Any], keys: Collection[str]
) -> dict[str, dict[str, Any]]:
    """The corrections a turn in ``state_id`` made, from the context ``before`` it to the context ``after``
    the model's update ``keys``: each correctable key written that ``before`` held with another value."""
    found: dict[str, dict[str, Any]] = {}
    for key in definition.correctable_keys(state_id):  # most states correct nothing: no loop
        if key in keys and key in before and after.get(key) != before[key]:
            found[key] = {"from": before[key], "to": after.get(key)}
    return found


def problems(definition: FSMDefinition) -> Iterator[tuple[tuple[Any, ...], str, str, str | None]]:
    """(where, message, code, hint) for each key a ``corrections`` list names that no state collects."""
    settings: list[tuple[tuple[str, ...], Corrections | None]] = [(("corrections",), definition.corrections)]
    settings += [(("states", sid, "corrections"), state.corrections) for sid, state in definition.states.items()]
    named = [(where, setting) for where, setting in settings if isinstance(setting, tuple) and setting]
    collected = definition.collected_keys if named else ()  # most definitions name none: nothing to read
    for where, setting in named:
        for index, key in enumerate(setting):
            if key in collected:
                continue
            if key.startswith("_") or key in definition.code_only_keys:
                whose = "internal to the runtime" if key.startswith("_") else "set by code"
                why = f"is {whose}: the model never writes it"
                hint = "only keys a state collects can be corrected"
            else:
                why = "is not collected by any state"
                collects = "its required_context_keys, writable_keys or the keys its conditions read"
                hint = did_you_mean(key, collected) or f"list keys a state collects ({collects})"
            yield (*where, index), f"'{key}' cannot be corrected: it {why}", "correction_key", hint
