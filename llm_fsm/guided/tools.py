"""Guided replies in the JSON tool form (a small model on a server of your own): the moves that wait on a tool
the turn still offers, and the tools' arguments taken from what the user said (docs/models.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from llm_fsm.definition.models import FSMDefinition, State, Transition
from llm_fsm.guided.branches import NULL, choices_of, leaves_open, parts_of, target_of, update_of
from llm_fsm.guided.words import Said, from_words, names, pool


def awaiting_tools(
    definition: FSMDefinition, state_id: str, schema: dict[str, Any], context: Mapping[str, Any], pending: set[str]
) -> dict[str, Any] | None:
    """A guided reply ``schema`` without the moves that wait on a tool the turn still offers, so the model calls
    the tool first or stays; None where every move it offers waits (the tool is called first). A move waits
    where the values its branch writes (each it may write: "8:30" is 08:30 or 20:30) leave its conditions
    failing only where they read a ``pending`` key (a tool's ``result_key``: only tools write it), or holding
    where one of them reads such a key that has no value yet (``!booking.found`` holds before the lookup). A move
    to the same place with no condition, or with none that reads a pending key, does not wait. At "Oh, OK. 9 pm
    then." a 135M model moved to the contact details, and the free table the move needs was the one the tool
    had found for 22:00."""
    waits = _Waiting(definition, state_id, context, pending)
    transition = schema["properties"]["transition"]
    branches = transition.get("anyOf", [transition])
    kept = [branch for branch in branches if not waits(branch)]
    if not kept:
        return None
    if len(kept) == len(branches):
        return schema
    return {**schema, "properties": {**schema["properties"], "transition": {"anyOf": kept}}}


class _Waiting:
    """Whether a branch of a guided reply waits on a tool (:func:`awaiting_tools`), for one turn: its
    ``definition``, state, ``context`` and ``pending`` result keys, with what :func:`can_fail` found kept per
    condition and values read (the ways of writing a branch share them)."""

    def __init__(self, definition: FSMDefinition, state_id: str, context: Mapping[str, Any], pending: set[str]) -> None:
        self.definition, self.state_id, self.context, self.pending = definition, state_id, context, pending
        self.seen: dict[tuple[int, str], bool] = {}

    def __call__(self, branch: dict[str, Any]) -> bool:
        """Whether no way of writing ``branch`` takes its move without the tool, and some way waits on it."""
        from llm_fsm.logic.rules import keys_read

        target = target_of(branch)
        moves = [t for t in self.definition.moves(self.state_id, None) if t.target_state == target]
        if not moves or any(not move.conditions for move in moves):
            return False
        combos = [dict(self.context)]
        reading = {key.split(".")[0] for move in moves for condition in move.conditions for key in self.keys(condition)}
        compared = {
            key.split(".")[0]
            for move in moves
            for condition in move.conditions
            for key in (keys_read(condition.logic) if condition.logic is not None else ())
        }
        for key, value in update_of(branch).items():
            if key not in reading:
                continue  # what no condition of the move reads cannot change whether it holds
            choices = [] if value == NULL else choices_of(value)
            if choices is not None and key not in compared:
                choices = choices[:1]  # a key only needed (requires_context_keys): any value of it is as good
            if choices is None:
                return False  # a value still open (free text): whether the move holds cannot be told
            kept = [fixed for fixed in combos if NULL in parts_of(value) or not choices]  # null keeps the value
            combos = [{**fixed, key: choice} for fixed in combos for choice in choices] + kept
            if len(combos) > MAX_COMBOS:
                return False
        found = {self.status(move, fixed) for move in moves for fixed in combos}
        return "waits" in found and "holds" not in found  # no way of writing it takes the move without the tool

    def keys(self, condition: Any) -> set[str]:
        """The keys ``condition`` reads."""
        from llm_fsm.definition.condition_values import condition_keys

        return set(condition_keys(condition))

    def read(self, condition: Any) -> set[str]:
        """The keys ``condition`` reads under a pending result key."""
        return {key for key in self.keys(condition) if key.split(".")[0] in self.pending}

    def status(self, move: Any, fixed: dict[str, Any]) -> str:
        """ "holds", "waits" (on a pending result) or "fails" (on what the model writes or was collected)."""
        from llm_fsm.definition.conditions import condition_failure

        failing = [condition for condition in move.conditions if condition_failure(condition, fixed)]
        if failing:
            return "waits" if all(self.read(condition) for condition in failing) else "fails"
        # holding, where the result could still break it (``!booking.found`` before the lookup; an ``or`` that
        # holds on what was collected does not wait)
        return "waits" if any(self.broken(condition, fixed) for condition in move.conditions) else "holds"

    def broken(self, condition: Any, fixed: dict[str, Any]) -> bool:
        """``can_fail`` for a result not there yet, once per condition and values of what it reads (the ways
        of writing a branch)."""
        from llm_fsm.definition.condition_values import can_fail
        from llm_fsm.logic.rules import has_key, value_at

        unknown = [key for key in self.read(condition) if not has_key(fixed, key)]
        known = json.dumps([value_at(fixed, key) for key in sorted(self.keys(condition))], default=str)
        if (id(condition), known) not in self.seen:
            self.seen[id(condition), known] = can_fail(condition, fixed, unknown)
        return self.seen[id(condition), known]


MAX_COMBOS = 32  # of the values a branch may write, the ways checked for a move that waits on a tool


def settled(definition: FSMDefinition, state: State, move: Transition, context: Mapping[str, Any]) -> bool:
    """Whether ``move``, which holds on ``context``, holds whatever the tools of ``state`` whose results are not
    there yet answer (``!rx.found`` before the lookup does not; an ``or`` that holds on what was collected does)."""
    from llm_fsm.definition.condition_values import can_fail
    from llm_fsm.logic.rules import has_key, keys_read

    tools = [definition.tools[name] for name in state.tools if name in definition.tools]
    results = {tool.result_key for tool in tools if tool.result_key and tool.result_key not in context}
    for condition in move.conditions if results else ():
        read = keys_read(condition.logic) if condition.logic is not None else set()
        unknown = [key for key in read if key.split(".")[0] in results and not has_key(context, key)]
        if can_fail(condition, context, unknown):
            return False
    return True


def guided_arguments(
    schema: dict[str, Any], text: str | None, context: Mapping[str, Any], language: str | None = None
) -> dict[str, Any]:
    """The JSON tool form's ``schema`` with each call's scalar arguments taken from what was said in ``text`` or
    collected in ``context`` where they fit; an argument nothing fits is left as declared. A shaped argument (a
    pattern: a time, a date) takes only what was said where that fits it ("9 pm then" asks about 21:00, not the
    22:00 collected; "make it the 12th" is the 12th of the month collected under its name), and where what was
    said fits a few of a call's arguments (a departure and a return date) it is theirs that the words name alone
    ("move the return to December 20"): the others keep what was collected under their names, or, where the
    words name none of them, are offered it after what was said. ``language``: the definition's built-in language's
    code, whose words are read beside English's (every built-in language's where None, as the turn calls it)."""
    said = pool(text, (), language)
    if said is None:
        return schema
    items = schema["properties"]["tool_calls"]["items"]
    for call in items.get("anyOf", [items]):
        arguments = call["properties"]["arguments"]
        properties = arguments.get("properties") if isinstance(arguments, dict) else None
        if not isinstance(properties, dict):
            continue
        narrowed, told = _from_said(properties, said, context)
        narrowed.update(_shared(told, properties, said, context))
        call["properties"]["arguments"] = {**arguments, "properties": narrowed}
    return schema


def _from_said(
    properties: dict[str, Any], said: Said, context: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A call's argument ``properties`` each made the values said or collected that fit it (:func:`from_words`),
    and apart, the shaped arguments that what was ``said`` in this message fits, and how (a shaped argument is
    offered what was collected for it, not any value of its form: a date of birth)."""
    # what was said first, then what was collected: a party of 2 collected stays possible beside "friday at 7"
    collected = [value for value in context.values() if not isinstance(value, bool)]
    texts = [value for value in collected if isinstance(value, str)]
    numbers = [value for value in collected if isinstance(value, int | float)]
    known = said._replace(texts=[*said.texts, *texts], numbers=[*said.numbers, *numbers])
    now = said._replace(told=())
    narrowed, told = dict(properties), {}  # told: the shaped arguments what was said fits, and how
    for name, value in properties.items():
        if not isinstance(value, dict) or not leaves_open(value):
            continue
        mine = _collected(context, name)
        current = mine[0] if len(mine) == 1 else None
        shaped = any("pattern" in part or part.get("format") == "date" for part in parts_of(value))
        source = known  # a shaped one: what was collected for it, not any value of its form (a date of birth)
        if shaped:
            source = said._replace(texts=[*said.texts, *(v for v in mine if isinstance(v, str))])
        found = from_words(value, source)
        if found is not None and shaped and (own := from_words(value, now, current)) and _listed(own):
            told[name] = own
        narrowed[name] = found if found is not None else value
    return narrowed, told


def _shared(
    told: dict[str, dict[str, Any]], properties: dict[str, Any], said: Said, context: Mapping[str, Any]
) -> dict[str, Any]:
    """The shaped arguments of ``told`` where what was said fits several of them (a departure and a return date):
    it is theirs that the words name alone; the others keep what was collected under their names, or, where the
    words name none of them, are offered it after what was said."""
    now = said._replace(told=())
    nothing = now._replace(texts=[], numbers=[], every=[], days=(), dated=())
    settled: dict[str, Any] = {}
    for name, own in told.items():
        rivals = {other for other in told if _values(told[other]) & _values(own)}  # what was said fits them too
        alone = {n for n in rivals if any(names(n, {word}) and not _named_by(rivals, word, n) for word in now.words)}
        mine = _collected(context, name)
        kept = from_words(properties[name], nothing, mine[0]) if len(mine) == 1 else None
        if len(rivals) == 1 or name in alone and len(alone) <= len(_values(own)):
            settled[name] = own
        elif name in alone:  # more of them named than values said: which one changes is the model's
            settled[name] = _with(own, kept)
        elif alone:  # the words name another of them: this one keeps its value, or is the model's to write
            settled[name] = kept or properties[name]
        else:
            settled[name] = _with(own, kept)
    return settled


def _collected(context: Mapping[str, Any], name: str) -> list[Any]:
    """What was collected for a tool's argument ``name``: under its name, or else under the keys whose names share
    a word with it (``appointment_date`` or ``new_date`` for ``date``, ``phone_number`` for ``phone``), not a date
    of birth; yes/no values left out."""
    if context.get(name) is not None:
        keys = [name]
    else:
        words = _words_of(name)
        keys = [key for key in context if _words_of(key) & words and not _words_of(key) & _ANOTHER]
    return [v for v in (context[key] for key in keys) if isinstance(v, str | int | float) and not isinstance(v, bool)]


def _words_of(key: str) -> set[str]:
    return {part for part in re.split(r"[_\W\d]+", key.casefold()) if len(part) > 1}


_ANOTHER = frozenset({"birth", "birthday", "dob", "born"})  # a date of birth is no date a tool is asked about


def _named_by(told: Collection[str], word: str, name: str) -> bool:
    """Whether ``word`` names another argument of ``told`` than ``name`` (a word naming two names neither)."""
    return any(names(other, {word}) for other in told if other != name)


def _values(schema: dict[str, Any]) -> set[Any]:
    """The values a value schema lists (:func:`_listed`)."""
    return {json.dumps(value) for part in parts_of(schema) for value in part.get("enum", ())}


def _listed(schema: dict[str, Any]) -> bool:
    """Whether a value schema lists its values (an ``enum``, perhaps beside null): what the words gave it."""
    return any("enum" in part for part in parts_of(schema))


def _with(said: dict[str, Any], kept: dict[str, Any] | None) -> dict[str, Any]:
    """The values ``said`` lists, then the collected one ``kept`` holds (a ``const``), once."""
    if kept is None or "const" not in kept:
        return said
    parts = [
        {**part, "enum": [*part["enum"], kept["const"]]}
        if "enum" in part and kept["const"] not in part["enum"]
        else part
        for part in parts_of(said)
    ]
    return parts[0] if len(parts) == 1 else {"anyOf": parts}
