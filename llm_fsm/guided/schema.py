"""Guided replies: a reply schema made for each turn, for small models held to it by a grammar.

A small model (SmolLM2-135M, say) held to the plain strict schema writes valid JSON but stays in its
state nearly every turn: it chooses ``target_state`` before it has written what it learned, from an
enum that offers every move. The guided schema, built per turn from the state, its transitions and
the context so far, changes three things (``benchmarks/REAL_MODEL.md`` has the figures):

- ``context_update`` comes before ``target_state``, so the move is chosen after the extraction;
- the moves are narrowed to those the update can make possible, and tied to it: a move whose
  conditions read keys the context lacks is offered only together with values for those keys, and
  staying only while one of them is left null (a branch per move, as ``anyOf``); a move that needs a
  key this state may not write, or whose conditions already fail on keys it may not change, is not
  offered at all; and where an earlier (lower ``priority`` number) move holds on the mere presence of
  its keys, a later move is offered only with one of those left null, as the prompt says priority works;
- values are typed: from ``context_schema`` when it describes the key, otherwise from how the
  conditions use it (compared with ``true``/``false``: boolean; with numbers: number; else text), and
  text is bounded, so a looping model ends its value instead of running to the token limit; text a
  condition needs a value to contain (``{"in": ["@", {"var": "email"}]}``) is a pattern, and a declared
  email holds an "@";
- patterns are written as a grammar holds them (:func:`portable_pattern`).

Modules: this one builds the schema; :mod:`llm_fsm.guided.conditions` reads what the transitions'
conditions say about each key; :mod:`llm_fsm.guided.patterns` writes patterns as a grammar holds them.

The turn (``llm_fsm.turn.runner``) adds the JSON tool form's request, bounded to as many calls as there are
tools that have not answered yet in the turn, and only while tool rounds are left; the prompt of a guided
turn has no reply template and no example dialogue (a 135M model copied both).

The engine still checks every reply as usual: the schema only makes the likely moves easy to write.
An opening (no user text yet) offers no keys at all, since there is nothing to extract.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypeVar

from llm_fsm.definition.key_values import closed_set, inferred_type, is_number, text_shape, tool_shape
from llm_fsm.definition.models import RETURN, FSMDefinition, State
from llm_fsm.definition.reply_schema import writable_keys
from llm_fsm.definition.texts import language_code
from llm_fsm.guided.branches import NULL, as_said
from llm_fsm.guided.clearing import with_clearing
from llm_fsm.guided.conditions import (
    asked_elsewhere,
    contained,
    narrowed_by,
    needed_keys,
    required_keys,
)
from llm_fsm.guided.entered import MAX_EARLIER, MAX_MESSAGE, keys_of, message_schema
from llm_fsm.guided.patterns import MAX_TEXT, containing, portable_pattern, portable_patterns
from llm_fsm.guided.values import derived_values, flag_topic
from llm_fsm.guided.words import named_in, pool, spans

__all__ = [  # portable_pattern(s) and MAX_TEXT are defined in llm_fsm.guided.patterns, and imported from here
    "LOOP_WORDS",
    "MAX_EARLIER",
    "MAX_MESSAGE",
    "MAX_STAY_BRANCHES",
    "MAX_TEXT",
    "guided_schema",
    "tidy",
    "portable_pattern",
    "portable_patterns",
    "value_schema",
]

# the longest run of words a looping message repeats ("Please book the workshop for £10.00. I'm unable to provide
# details." is 13 words, and came back until the token limit)
LOOP_WORDS = 24
MAX_STAY_BRANCHES = 8  # past this, staying is left unconstrained (the schema would grow as a product)
_VALUE_KEYWORDS = ("type", "enum", "const", "minimum", "maximum", "maxLength", "minLength", "pattern")


def guided_schema(
    definition: FSMDefinition,
    state_id: str,
    context: Mapping[str, Any],
    *,
    opening: bool = False,
    protected: Collection[str] = (),
    eager: bool = True,
    narrow: bool = True,
    back_to: str | None = None,
    said: str | None = None,
    results: Iterable[Any] = (),
    earlier: Iterable[str] = (),
) -> dict[str, Any]:
    """The reply schema of one turn in ``state_id`` on ``context`` (see the module's description).

    The moves are the state's own and the global ones that apply (``FSMDefinition.moves``), a
    ``"$return"`` one going to ``back_to`` (left out without it). ``eager=False`` lets the model stay
    whatever it wrote; ``narrow=False`` leaves out the values the transitions' simple comparisons
    allow. Both are on in guided mode: the variants exist to measure them. ``said``: the user's message,
    ``results``: what the turn's tools answered; the values of free text and numbers are taken from them
    where they fit (:mod:`llm_fsm.guided.words`). ``earlier``: the conversation's messages so far; the message
    opens like none of them (:func:`llm_fsm.guided.patterns.not_opening_like`).
    """
    state = definition.states[state_id]
    asks = state.required_context_keys
    # a yes/no key that is all the state asks is the state's question (a read-back's "confirmed")
    question = asks[0] if len(asks) == 1 and value_schema(definition, state, asks[0]).get("type") == "boolean" else None
    keys = _reply_keys(definition, state_id, context, opening, protected, question)
    # values collected before that the state does not ask for, here to be corrected (a read-back, corrections)
    kept = [key for key in keys if key in context and key not in asks]
    values = {key: value_schema(definition, state, key) for key in keys}
    # yes/no flags last: the model writes what the user's words hold (a name, the field to correct) before
    # it judges a flag (confirmed, cancelled), and a grammar writes keys in this order
    values = dict(sorted(values.items(), key=lambda item: item[1].get("type") == "boolean"))
    # the keys the state asks for that its conditional moves need: the flow, which a move on judgment alone
    # (a hand-over, a detour) gives way to (where only unconditional moves lead on, one of them is the flow)
    conditional = [t for t in definition.moves(state_id, back_to) if t.conditions]
    flow = {key for t in conditional for key in (needed_keys(t, context, keys) or ())}
    collected = [key for key in state.required_context_keys if key in values and key in flow]
    # a state whose own moves have no conditions ("The role is known: ask about budget") leaves once what it
    # collects is known: its own moves need the keys it still lacks, and a move on judgment alone from elsewhere
    # (a global hand-over) is taken by a reply that collects none of them
    lacking = [] if conditional else [k for k in state.required_context_keys if k in values and context.get(k) is None]
    collected = collected or lacking
    moves: list[dict[str, Any]] = []
    # per earlier move that an update can be seen to fulfil: key -> a value that breaks it (None: only null)
    fulfilled: list[dict[str, dict[str, Any] | None]] = []
    for transition in definition.moves(state_id, back_to):
        needed = needed_keys(transition, context, keys)
        if needed is None:
            continue
        if lacking and transition in state.transitions:
            needed = lacking
        # the keys it needs, and the collected ones its conditions read that the update may write again: a
        # value written in the move's branch keeps the move (a corrected email still holds an "@")
        reads = keys_of(transition)
        read = [key for key in values if key not in needed and key in context and key in reads]
        # a move with conditions beyond a grammar still needs what its plain parts need (customer_confirmed
        # true beside a total within a cent): it is offered with those values, never forced
        forced, needed = needed, needed or _plainly_missing(transition, context, values)
        narrowed = {
            key: narrowed_by(values[key], transition, key, _format_parts(definition, key)) for key in [*needed, *read]
        }
        narrowed = narrowed if narrow else {}
        own = {**values, **narrowed}
        # an earlier (higher-priority) move the update fulfils wins: this one is offered with one of its keys
        # left null or given a value that breaks it
        groups = [_breakers(earlier, needed) for earlier in fulfilled] if eager else []
        # a key the move ties to others (a price to the product's) is offered with the consistent values only
        offers = _named_offers(derived_values(transition, context, own), said) if narrow else []
        offers = offers or [{}]
        if eager and not transition.conditions and collected and not (lacking and transition in state.transitions):
            # a move on the model's judgment alone (a hand-over, a cancellation) is taken only by a reply that
            # collects none of what the state asks for: a user who answers the question is on the flow
            groups.extend([(key, None)] for key in collected)
        moves.extend(
            _branch(transition.target_state, {**own, **offer}, need=[*needed, *offer], given=_given(combo))
            for combo in _combos([group for group in groups if group is not None])
            for offer in offers
        )
        breaking = {
            key: _breaking(values[key], own[key], contained(transition, key), _format_parts(definition, key))
            for key in forced
        }
        if eager and (unfulfilled := _unfulfilled(offers, breaking)) is not None:
            fulfilled.append(unfulfilled)
    stays = [_branch(state.id, values, given=_given(combo)) for combo in _combos([list(m.items()) for m in fulfilled])]
    targets = [back_to if t.target_state == RETURN else t.target_state for t in state.transitions]
    open_ = {branch["properties"]["target_state"]["enum"][0] for branch in moves}
    onward = all(target is not None and not definition.states[target].terminal for target in targets)
    # a state where the user may take a value back (clearable_keys) keeps its stay: a removal stays to ask again
    leaves = eager and not state.clearable_keys
    if leaves and not asks and said and targets and onward and all(target in open_ for target in targets):
        # a state with nothing to collect whose own moves are all open (a greeting, a help detour with the way
        # back) exists to route: the user's message is routed to one of its own moves, where a small model
        # offered "stay" beside them stayed forever. Not to a global one: the model takes the first move its
        # prompt lists, and a hand-over (priority 5) forced on "ok, thanks" is worse than staying. A move that
        # waits on code, nowhere to go back to, or a move that ends the conversation (a chat whose only way out
        # is goodbye) keeps staying
        stays = []
        moves = [branch for branch in moves if branch["properties"]["target_state"]["enum"][0] in targets]
    language = language_code(definition.language) if definition.language else None
    offered = pool(said, results, language) if narrow else None
    if leaves and asks and offered is not None and not offered.asked and _done(definition, state, context, open_):
        # everything the state asks is known and one of its own moves holds: a reply that only stays would stay
        # forever (a small model writes the same values on every turn). A message that only asks may still stay
        stays = []
    branches = _unique([*moves, *stays])
    if offered is not None:
        flags = {key: flag_topic(definition, key) for key, schema in values.items() if schema.get("type") == "boolean"}
        sole = question if question in flags else None  # answered by a yes or a no (guided_words.flag)
        branches = as_said(definition, state.id, branches, offered, context, flags, sole, kept)
    branches = with_clearing(definition, state_id, context, branches, back_to)  # null removes; any_value
    transitions = branches[0] if len(branches) == 1 else {"anyOf": branches}
    return {
        "type": "object",
        "properties": {"transition": transitions, "message": message_schema(earlier)},
        "required": ["transition", "message"],
        "additionalProperties": False,
    }


def _reply_keys(
    definition: FSMDefinition,
    state_id: str,
    context: Mapping[str, Any],
    opening: bool,
    protected: Collection[str],
    question: str | None,
) -> list[str]:
    """The keys a reply in ``state_id`` may write: none in the opening message; else the state's writable keys
    (not ``protected`` ones, or the definition's code-only keys), less those another state asks for unless
    collected and the state asks only its yes/no ``question``, and the keys it may correct once collected."""
    state = definition.states[state_id]
    every = definition.moves(state_id, RETURN)
    keys = [] if opening else writable_keys(state, protected or definition.code_only_keys, every)
    if state.writable_keys is None:  # a key another state asks for is that state's to collect (asked_elsewhere)
        elsewhere = asked_elsewhere(definition, state_id)
        keys = [key for key in keys if key not in elsewhere or (question and key in context)]
    if not opening:  # and the keys it may correct, once collected (llm_fsm.definition.corrections)
        keys += [key for key in definition.correctable_keys(state_id) if key in context and key not in keys]
    return keys


def _unfulfilled(
    offers: list[dict[str, Any]], breaking: Mapping[str, dict[str, Any] | None | bool]
) -> dict[str, dict[str, Any] | None] | None:
    """How staying (or a later move) leaves a move unfulfilled, key by key (None: the key left null, else a value
    schema that breaks the move): the first key a move ties to others (the product) left null where it has
    ``offers``; else one of the keys it was forced to need left null or ``breaking`` it. None where neither can
    be said (no key forced, or a breaking value JSON Schema cannot say)."""
    if offers != [{}]:  # staying leaves the first key it ties (the product) null
        return {next(iter(offers[0])): None}
    if breaking and all(value is not False for value in breaking.values()):
        # staying (or a later move) leaves one of its keys null, or gives a value that breaks it
        return breaking  # type: ignore[return-value]  # False was ruled out just above
    return None


_WORDS = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def tidy(message: str) -> str:
    """A ``message`` without what a small model writes once it has lost its way: a run of one to ``LOOP_WORDS`` words
    said a third time in a row ("I'm happy, I'm happy. I'm happy."), cut after its first time (at its last
    sentence end, where it crosses one), and the prompt's own tags ("</assistant>"), cut where they start.
    Text that needs neither comes back as it was."""
    for tag in ("</", "&lt;/"):
        if tag in message and message.index(tag) > 0:
            message = message[: message.index(tag)].rstrip()
    found = list(_WORDS.finditer(message))
    words = [match.group().casefold() for match in found]
    for start in range(len(words)):
        for size in range(1, LOOP_WORDS + 1):
            run = words[start : start + size]
            if (
                len(words) >= start + 3 * size
                and run == words[start + size : start + 2 * size] == words[start + 2 * size : start + 3 * size]
            ):
                first, end = found[start].start(), found[start + size - 1].end()
                if kept := [m.start() + 1 for m in _SENTENCE_END.finditer(message, first, end)]:
                    return message[: kept[-1]]  # the run crosses a sentence: "Your email? And your" → "Your email?"
                return message[:end] + "." if message[end - 1].isalnum() else message[:end]
    return message


T = TypeVar("T")


def _combos(groups: list[list[T]]) -> list[tuple[T, ...]]:
    """One item from each group (a group left empty cannot be satisfied: no combination); bounded."""
    if any(not group for group in groups):
        return []
    combos = list(itertools.product(*groups))
    return combos if len(combos) <= MAX_STAY_BRANCHES else [()]


def _breakers(
    earlier: Mapping[str, dict[str, Any] | None], needed: Collection[str]
) -> list[tuple[str, dict[str, Any] | None]] | None:
    """The ways a move needing ``needed`` can leave an earlier one unfulfilled: one of the earlier move's
    keys null or breaking it. None when the two moves need a key in common: then what tells them apart
    is the value or the description, and the model chooses (the engine checks), as without guidance."""
    if any(key in needed for key in earlier):
        return None
    return list(earlier.items())


def _given(combo: Iterable[tuple[str, dict[str, Any] | None]]) -> dict[str, dict[str, Any]]:
    """The value schema of each key a combination constrains (null, or null or a breaking value)."""
    given: dict[str, dict[str, Any]] = {}
    for key, breaking in combo:
        schema = NULL if breaking is None else {"anyOf": [breaking, NULL]}
        # two earlier moves constrain the same key in different ways: null is what breaks both
        given[key] = NULL if key in given and given[key] != schema else schema
    return given


def _breaking(
    base: dict[str, Any], narrowed: dict[str, Any], parts: list[str], given: list[str]
) -> dict[str, Any] | None | bool:
    """A schema of the values ``narrowed`` rules out (within ``base``): None when it narrows nothing
    (only null breaks it), False when that cannot be said in JSON Schema without ``not``. ``parts``: the
    text the move needs the value to contain, ``given``: what its format already makes it contain; a value
    breaks the move by lacking one of the others (said only for single characters)."""
    parts = [part for part in parts if part not in given]
    if parts:
        return _lacking_parts(base, narrowed, parts, given)
    if narrowed == base:
        return None
    allowed = [narrowed["const"]] if "const" in narrowed else narrowed.get("enum")
    universe = [True, False] if base.get("type") == "boolean" else base.get("enum")
    if allowed is not None and universe is not None:  # a finite set of values: the others break it
        allowed = [value for value in allowed if _within(narrowed, value)]
        rest = [value for value in universe if value not in allowed]
        return None if not rest else {**base, "enum": rest}
    kind = narrowed.get("type")
    if kind in ("integer", "number") and not {"const", "enum"} & set(narrowed):
        # each bound the move needs, turned around: a value past any one of them breaks it
        outside = [{"type": kind, _TURNED[bound]: narrowed[bound]} for bound in _TURNED if bound in narrowed]
        if outside:
            return outside[0] if len(outside) == 1 else {"anyOf": outside}
    return False


# a numeric bound, and the bound a value past it keeps: past ``minimum: 5`` is ``exclusiveMaximum: 5``
_TURNED = {
    "minimum": "exclusiveMaximum",
    "exclusiveMinimum": "maximum",
    "maximum": "exclusiveMinimum",
    "exclusiveMaximum": "minimum",
}


def _lacking_parts(
    base: dict[str, Any], narrowed: dict[str, Any], parts: list[str], given: list[str]
) -> dict[str, Any] | bool:
    """The values of ``base`` that lack one of ``parts`` (single characters the move needs the text to contain,
    beyond what its format gives): False where the move narrows more than the pattern, a part is longer than a
    character, or a pattern cannot say it."""
    changed = {k for k in {*base, *narrowed} if base.get(k) != narrowed.get(k)}
    if changed != {"pattern"} or any(len(part) != 1 for part in parts):
        return False
    limit = int(base.get("maxLength", MAX_TEXT))
    lacking = [containing(given, limit, without=part) for part in parts]
    if None in lacking:
        return False
    branches = [{**base, "pattern": pattern} for pattern in lacking]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _within(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` keeps the numeric bounds of ``schema`` (a value that is not a number keeps none)."""
    if not is_number(value):
        return not {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(schema)
    return (
        value >= schema.get("minimum", value)
        and value <= schema.get("maximum", value)
        and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
        and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"])
    )


def value_schema(definition: FSMDefinition, state: State, key: str) -> dict[str, Any]:
    """What a value of ``key`` may be: its ``context_schema`` (types, enums and bounds), else the type its
    conditions in ``state`` compare it as; text is bounded to :data:`MAX_TEXT` characters."""
    declared = (definition.context_schema or {}).get(key)
    if declared:
        schema = {k: v for k, v in declared.items() if k in _VALUE_KEYWORDS}
        if isinstance(schema.get("type"), list) and "null" in schema["type"]:  # null is offered anyway
            rest = [kind for kind in schema["type"] if kind != "null"]
            schema["type"] = rest[0] if len(rest) == 1 else rest
    else:
        schema = {"type": inferred_type(definition.moves(state.id, RETURN), key)}
        closed, shape = closed_set(definition, key), text_shape(definition, key)
        if closed and schema["type"] in ("string", None):  # it only ever routes on these: offer exactly them
            schema = {"type": "string", "enum": closed}
        elif shape and schema["type"] == "string":  # ordered as text against "17:00": written as "21:00"
            schema["pattern"] = shape
        elif schema["type"] in ("string", None) and (taken := tool_shape(definition, key)):  # a tool's date
            schema = {"type": "string", **{k: v for k, v in taken.items() if k == "pattern" or v in _GRAMMAR_FORMATS}}
    types = schema.get("type")
    if (types == "string" or (isinstance(types, list) and "string" in types)) and "enum" not in schema:
        schema["maxLength"] = min(int(schema.get("maxLength", MAX_TEXT)), MAX_TEXT)
    parts = _format_parts(definition, key)
    if parts and types == "string" and "pattern" not in schema:
        schema["pattern"] = containing(parts, schema["maxLength"])
    elif declared and declared.get("format") in _GRAMMAR_FORMATS:
        schema["format"] = declared["format"]
    if not schema.get("type") and "enum" not in schema and "const" not in schema:
        # nothing says what the key holds: any scalar, but bounded, so that a looping model still ends it
        schema = {"type": ["string", "number", "boolean"], "maxLength": MAX_TEXT}
    return schema


# the formats llama.cpp's grammars hold; an email (all jsonschema checks of one: an "@") becomes a pattern
_GRAMMAR_FORMATS = frozenset({"date", "time", "date-time", "uuid"})


def _format_parts(definition: FSMDefinition, key: str) -> list[str]:
    """The text ``key``'s declared format makes its value contain (an email's "@")."""
    declared = (definition.context_schema or {}).get(key) or {}
    return ["@"] if declared.get("format") in ("email", "idn-email") and "pattern" not in declared else []


def _branch(
    target: str,
    values: Mapping[str, dict[str, Any]],
    *,
    need: Collection[str] = (),
    given: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    given = given or {}

    def value(key: str) -> dict[str, Any]:
        if key in need:
            return values[key]
        if key in given:
            return given[key]
        return {"anyOf": [values[key], NULL]}

    update = {
        "type": "object",
        "properties": {key: value(key) for key in values},
        "required": list(values),
        "additionalProperties": False,
    }
    return {
        "type": "object",
        # context_update first: a grammar writes properties in order, so the model writes what it
        # learned before it names the move
        "properties": {"context_update": update, "target_state": {"type": "string", "enum": [target]}},
        "required": ["context_update", "target_state"],
        "additionalProperties": False,
    }


def _done(definition: FSMDefinition, state: State, context: Mapping[str, Any], offered: Collection[str]) -> bool:
    """Whether ``context`` holds every key ``state`` asks for and one of its own moves, offered, holds on it,
    whatever its tools answer (``!rx.found`` holds only before the lookup)."""
    from llm_fsm.definition.conditions import unmet_condition
    from llm_fsm.guided.tools import settled

    if any(context.get(key) is None for key in state.required_context_keys):
        return False
    own = [t for t in state.transitions if t.target_state in offered]
    return any(unmet_condition(t, dict(context)) is None and settled(definition, state, t, context) for t in own)


def _plainly_missing(transition: Any, context: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """The keys a move's plain requirements and comparisons need that the context lacks, when its
    conditions also hold parts a grammar cannot say (else [], as ``needed_keys`` says for plain moves)."""
    required, plain = required_keys(transition)
    return [] if plain else [key for key in required if key in values and context.get(key) is None]


def _named_offers(offers: list[dict[str, dict[str, Any]]], said: str | None) -> list[dict[str, dict[str, Any]]]:
    """Of the consistent combinations, those whose text values the user's words name, if any do."""
    texts = spans(said) if said else []
    named = [
        offer
        for offer in offers
        if any(isinstance(v.get("const"), str) and named_in(v["const"], texts) for v in offer.values())
    ]
    return named or offers


def _unique(branches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for branch in branches:
        if branch not in seen:
            seen.append(branch)
    return seen
