"""Working memory: named text slots the model and code keep up to date, shown in every prompt.

A definition declares them once::

    "memory": {
      "background": {"goals": {"description": "What the user wants overall", "max_chars": 400}},
      "slots": {"open_questions": {"description": "Questions still to answer", "max_chars": 300},
                "approved_budget": {"description": "Set by the back office", "model_writes": false}}
    }

``background`` (vision, goals, a to-do list) and ``slots`` (the working notes, S1's "buckets") are
both slots: a text of at most ``max_chars`` characters, starting as ``initial``. They differ only in
where the prompt shows them (``<background>`` first, then ``<memory>``). Slot names are identifiers,
unique across both groups.

What the model reads: the slots' descriptions and bounds are definition-only, so they are part of the
cache-stable prefix (``<memory_rules>``); their values change, so they come after it, with the
running summary (see :mod:`llm_fsm.memory.summaries`), before the context and the history.

Who writes:

- the model, through ``"memory_update": {"slot": "the slot's new whole text"}`` inside ``transition``,
  next to ``context_update``. ``null`` leaves a slot alone, ``""`` empties it; any other JSON value is
  kept as its JSON text. A slot that is not declared, or that only code writes (``"model_writes":
  false``), is dropped; a text longer than ``max_chars`` is cut to ``max_chars``. Each is reported as a
  :class:`~llm_fsm.snapshot.Rejection` of kind ``memory`` in ``TurnResult.rejected`` (like a dropped
  context key, it calls for no corrective call). The update of the reply the turn settles on is kept,
  as its valid context updates are;
- handlers, through their ``memory`` argument (:class:`MemoryAccess`: ``memory["goals"] = "..."``);
- code between turns, through ``Conversation.update_memory({...})``.

Code is held to the same bounds but refused rather than cut: an undeclared slot, a value that is not
text, or one longer than ``max_chars`` raises :class:`~llm_fsm.errors.MemoryValueError` naming the
slot (in a handler, the turn's ``HandlerError``), since code can fix what it writes and a model cannot.

The snapshot keeps the slots that were written (``Snapshot.memory``); a slot never written reads as
its ``initial`` text. Snapshots from before memory existed load with no slot written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from llm_fsm.definition.memory import MAX_SLOTS, MemorySpec, Slot
from llm_fsm.errors import MemoryValueError

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.snapshot import Rejection, Snapshot

__all__ = ["MAX_SLOTS", "MemoryAccess", "MemorySpec", "Slot", "current", "code_update", "with_memory_update"]

# -- reading ---------------------------------------------------------------------------------------


def current(definition: FSMDefinition, snapshot: Snapshot) -> dict[str, str]:
    """Every declared slot's text in ``snapshot`` (a slot never written: its ``initial`` text)."""
    return values(definition, snapshot.memory)


def values(definition: FSMDefinition, written: Mapping[str, str]) -> dict[str, str]:
    spec = definition.memory
    if spec is None:
        return {}
    return {name: written.get(name, slot.initial) for name, slot in spec.all.items()}


# -- writes by the model -----------------------------------------------------------------------------


def apply_model_update(
    definition: FSMDefinition, written: Mapping[str, str], update: Mapping[str, Any], *, attempt: int = 1
) -> tuple[dict[str, str], dict[str, str], list[Rejection]]:
    """``written`` after a reply's ``memory_update``: the new slots, what was applied, what was refused or cut."""
    from llm_fsm.snapshot import Rejection
    from llm_fsm.values import clean_text

    result, applied, rejected = dict(written), {}, []
    spec = definition.memory
    declared = spec.all if spec is not None else {}

    def refuse(key: str, reason: str) -> None:
        rejected.append(Rejection(kind="memory", reason=reason, key=key, attempt=attempt))

    for key, value in update.items():
        if value is None:
            continue
        slot = declared.get(key)
        if slot is None:
            names = ", ".join(spec.model_slots) if spec is not None else ""
            refuse(key, f"memory slot '{key}' is not declared ({'slots: ' + names if names else 'no memory'}): dropped")
            continue
        if not slot.model_writes:
            refuse(key, f"memory slot '{key}' is written only by code; the model may not write it: dropped")
            continue
        text = value
        if not isinstance(value, str):  # kept, as its JSON text, and said
            text = json.dumps(value, ensure_ascii=False)
            refuse(key, f"memory slot '{key}' takes text, got {_json_kind(value)}: written as its JSON text")
        # lone surrogates replaced: the slot is saved with the snapshot, and no store could write them
        text = clean_text(text)
        if len(text) > slot.max_chars:
            refuse(key, f"memory slot '{key}' holds at most {slot.max_chars} characters: {len(text)} were cut to fit")
            text = text[: slot.max_chars]
        result[key] = applied[key] = text
    return result, applied, rejected


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


# -- writes by code --------------------------------------------------------------------------------


def checked_write(definition: FSMDefinition, key: Any, value: Any) -> str:
    """``value`` for slot ``key`` when code writes it; :class:`MemoryValueError` naming what is wrong."""
    spec = definition.memory
    if spec is None:
        raise MemoryValueError(f"definition '{definition.name}' declares no memory: there is no slot '{key}'")
    slot = spec.all.get(key) if isinstance(key, str) else None
    if slot is None:
        raise MemoryValueError(f"memory slot {key!r} is not declared (slots: {', '.join(spec.all)})")
    if not isinstance(value, str):
        raise MemoryValueError(f"memory slot '{key}' holds text, not {type(value).__name__}")
    if len(value) > slot.max_chars:
        raise MemoryValueError(f"memory slot '{key}' holds at most {slot.max_chars} characters, not {len(value)}")
    from llm_fsm.values import clean_text

    return clean_text(value)


def code_update(definition: FSMDefinition, written: Mapping[str, str], delta: Mapping[str, Any]) -> dict[str, str]:
    """``written`` after code's ``delta`` (None: back to the slot's initial text); all checked before any is set."""
    if not isinstance(delta, Mapping):
        raise MemoryValueError(f"a memory update is an object of slot -> text, not {type(delta).__name__}")
    result = dict(written)
    checked = {key: None if value is None else checked_write(definition, key, value) for key, value in delta.items()}
    for key, text in checked.items():
        if text is None:
            result.pop(key, None)
        else:
            result[key] = text
    return result


class MemoryAccess(MutableMapping[str, str]):
    """The working memory as a handler sees it (its ``memory`` argument): read and write slots by name.

    Writes are checked (:func:`checked_write`) and go into the turn: committed with it, undone if it
    fails. ``del memory[slot]`` puts a slot back to its initial text.
    """

    def __init__(self, definition: FSMDefinition, written: Mapping[str, str]) -> None:
        self._definition = definition
        self.written = dict(written)
        self.changed: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        return values(self._definition, self.written)[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.written[key] = self.changed[key] = checked_write(self._definition, key, value)

    def __delitem__(self, key: str) -> None:
        # checked with an empty text only to refuse a slot that is not declared
        checked_write(self._definition, key, "")
        self.written.pop(key, None)
        self.changed[key] = values(self._definition, {})[key]

    def __iter__(self) -> Iterator[str]:
        return iter(values(self._definition, self.written))

    def __len__(self) -> int:
        return len(values(self._definition, self.written))

    def __repr__(self) -> str:
        return f"MemoryAccess({values(self._definition, self.written)!r})"


# -- the reply schema ------------------------------------------------------------------------------


def with_memory_update(
    schema: dict[str, Any], definition: FSMDefinition, *, strict: bool, guided: bool = False
) -> dict[str, Any]:
    """``schema`` (a reply schema) allowing ``transition.memory_update`` for the slots the model writes.

    Strict (every property required, every object closed): each slot is text or null. Guided: the
    update is optional and each text bounded by its slot's ``max_chars`` (a grammar holds the model to it).
    """
    spec = definition.memory
    if spec is None or not spec.model_slots:
        return schema

    def text(name: str) -> dict[str, Any]:
        bound = {"maxLength": spec.all[name].max_chars} if guided else {}
        return {"anyOf": [{"type": "string", **bound}, {"type": "null"}]} if guided else {"type": ["string", "null"]}

    update: dict[str, Any] = {"type": "object"}
    if strict:
        names = spec.model_slots
        update.update(properties={name: text(name) for name in names}, additionalProperties=False)
        if not guided:
            update["required"] = names
    return _patched(schema, update, required=strict and not guided)


def _patched(schema: dict[str, Any], update: dict[str, Any], *, required: bool) -> dict[str, Any]:
    """A copy of a reply schema whose transition object(s) (one, or the branches of ``anyOf``) take ``update``."""
    transition = schema.get("properties", {}).get("transition")
    if transition is None:
        return schema

    def patch(branch: dict[str, Any]) -> dict[str, Any]:
        if "anyOf" in branch:
            return {**branch, "anyOf": [patch(b) for b in branch["anyOf"]]}
        properties = dict(branch.get("properties", {}))
        ordered: dict[str, Any] = {}
        for name, value in properties.items():  # next to context_update: before the move when it comes first
            ordered[name] = value
            if name == "context_update":
                ordered["memory_update"] = update
        # a branch without context_update (none in the reply schemas today) still gets it, at the end
        ordered.setdefault("memory_update", update)
        patched = {**branch, "properties": ordered}
        if required:
            patched["required"] = [*branch.get("required", []), "memory_update"]
        return patched

    return {**schema, "properties": {**schema["properties"], "transition": patch(transition)}}


# -- the prompt --------------------------------------------------------------------------------------


def rules(definition: FSMDefinition) -> list[dict[str, Any]]:
    """The slots as the cache-stable part of the prompt describes them (definition-only)."""
    spec = definition.memory
    if spec is None:
        return []
    groups = [("background", spec.background), ("memory", spec.slots)]
    return [
        {"name": name, "group": group, "description": slot.description, "max_chars": slot.max_chars,
         "model_writes": slot.model_writes}
        for group, slots in groups for name, slot in slots.items()
    ]  # fmt: skip


def sections(definition: FSMDefinition, snapshot: Snapshot) -> dict[str, list[dict[str, str]]]:
    """The slots' texts for the volatile part of the prompt, secret-looking values masked."""
    spec = definition.memory
    if spec is None:
        return {"background": [], "memory": []}
    # cut to the bounds the definition sets now (a snapshot may come from a version with looser ones)
    texts = definition.masked(
        {name: text[: spec.all[name].max_chars] for name, text in current(definition, snapshot).items()}
    )
    return {
        "background": [{"name": name, "text": texts[name]} for name in spec.background],
        "memory": [{"name": name, "text": texts[name]} for name in spec.slots],
    }
