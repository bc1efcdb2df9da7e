"""A guided schema's branches, as what the user said makes them (``llm_fsm.guided.schema`` builds the branches).

- a message that only asks ("how much does it cost?") goes to a detour, where the state has one (a state whose
  moves come back: ``"$return"``); a 135M model stayed and answered nothing;
- each value is taken from the words (:func:`llm_fsm.guided.words.from_words`), each yes/no flag answered by
  them (:func:`llm_fsm.guided.words.flag`);
- null leaves a collected value, so where that value breaks a move, the move's branch needs one written;
- a correction that names a value it corrects ("income is actually 52,000") leaves the others as collected;
- a number said beside a key's name is not offered to another key ("the rent is 1,100 and the deposit is 2k":
  1100 is the rent's, 2000 the deposit's), unless that leaves it none; an email or web address that fits a key's
  form is not free text's (a name is not "maya.chen@example.com");
- where the words decide a key in one branch, a branch that left it free does not invent one;
- the JSON tool form's arguments come from what was said or collected, where they fit (:func:`guided_arguments`),
  and working-memory slots from what was said (:func:`guided_memory`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from llm_fsm.definition.models import RETURN, FSMDefinition
from llm_fsm.definition.texts import language_code
from llm_fsm.guided import languages
from llm_fsm.guided.numbers import Placed, placed_numbers, ranges_joined
from llm_fsm.guided.words import Said, Topic, accepts, flag, from_words, names, pool

NULL: dict[str, Any] = {"type": "null"}
NOTHING = Said([], [], [])  # what a held value is taken from: it stays as collected


def as_said(
    definition: FSMDefinition,
    state_id: str,
    branches: list[dict[str, Any]],
    said: Said,
    context: Mapping[str, Any],
    flags: Mapping[str, Topic | None],
    sole: str | None = None,
    kept: Collection[str] = (),
) -> list[dict[str, Any]]:
    """``branches`` (of a turn in ``state_id``) as ``said`` makes them; ``flags``: the yes/no keys and what each
    is about (:func:`llm_fsm.guided.values.flag_topic`); ``sole``: the yes/no key that is all the state asks (see
    :func:`llm_fsm.guided.words.flag`); ``kept``: the collected keys the state does not ask for, whose free text stays
    on offer (``from_words``'s ``keep``). The branches as they were where none would be left."""
    if said.asked:
        detours = [branch for branch in branches if _detour(definition, target_of(branch), state_id)]
        branches = detours or branches
    # a correction that names what it corrects ("income is actually 52,000") leaves the other values as they are;
    # one that names none may correct any at a read-back, and a number elsewhere ("we're 30 now"): a state with
    # questions of its own holds collected text, which any span of an answer fits ("roughly" as a name)
    named = {key for key in kept if names(key, said.words)}
    held = {key for key in kept if context.get(key) is not None and key not in flags} - named
    if not named:
        reading_back = sole is not None or not definition.states[state_id].required_context_keys
        held = set() if reading_back else {key for key in held if isinstance(context[key], str)}
    keys = {key for branch in branches for key, value in update_of(branch).items() if leaves_open(value)}
    language = language_code(definition.language) if definition.language else None
    claims = Claims(owned_numbers(said.text, keys, language), _addresses(said.text, branches))
    here = definition.states[state_id].required_context_keys

    def asks(branch: dict[str, Any]) -> set[str]:
        target = definition.states.get(target_of(branch))
        return {*here, *(target.required_context_keys if target is not None else ())}

    found = [
        words
        for branch in branches
        if (words := _from_words(branch, said, context, flags, sole, kept, held, claims, asks(branch))) is not None
    ]
    found = [(_holding(definition, state_id, branch, context), bound, free) for branch, bound, free in found]
    return _unbound(found) or [branch for branch, _, _ in found] or branches


def _holding(
    definition: FSMDefinition, state_id: str, branch: dict[str, Any], context: Mapping[str, Any]
) -> dict[str, Any]:
    """A move's ``branch`` whose one key with several values on offer (a time said without am or pm: 05:45 and
    17:45) keeps those with which the move's conditions hold, the other keys being collected or given one value;
    the branch as it is where that cannot be told (a free value, several such keys) or no value would be left."""
    from llm_fsm.definition.conditions import unmet_condition

    target = target_of(branch)
    moves = [t for t in definition.moves(state_id, None) if t.target_state == target and t.conditions]
    if target == state_id or not moves:
        return branch
    fixed, several = dict(context), None
    for key, schema in update_of(branch).items():
        choices = choices_of(schema)
        if choices and len(choices) == 1:
            fixed[key] = choices[0]
        elif choices:
            if several is not None:
                return branch
            several = key, choices
    if several is None:
        return branch
    key, choices = several
    kept = [value for value in choices if any(unmet_condition(t, {**fixed, key: value}) is None for t in moves)]
    if not kept or len(kept) == len(choices):
        return branch
    narrowed = [{"enum": kept} if part != NULL else part for part in parts_of(update_of(branch)[key])]
    update = branch["properties"]["context_update"]
    values = {**update_of(branch), key: narrowed[0] if len(narrowed) == 1 else {"anyOf": narrowed}}
    return {**branch, "properties": {**branch["properties"], "context_update": {**update, "properties": values}}}


def choices_of(schema: dict[str, Any]) -> list[Any] | None:
    """The values ``schema`` allows besides null, when it names them all (a constant, a closed set); else None."""
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return [value for value in schema["enum"] if value is not None]
    if set(schema) == {"anyOf"}:
        values: list[Any] = []
        for part in schema["anyOf"]:
            found = [] if part == NULL else choices_of(part)
            if found is None:
                return None
            values += found
        return values
    return None


def guided_memory(schema: dict[str, Any], text: str | None, language: str | None = None) -> dict[str, Any]:
    """A guided reply ``schema`` whose working-memory slots (``memory_update``) hold what the user said: spans
    and sentences of ``text`` or nothing (a 135M model wrote 300 characters of "1.1.2.1.0..." into a slot, and
    every reply was cut at the token limit). Unchanged without user text."""
    said = pool(text, (), language)
    if said is None:
        return schema
    transition = schema["properties"]["transition"]
    for branch in transition.get("anyOf", [transition]):
        memory = branch["properties"].get("memory_update")
        if isinstance(memory, dict) and isinstance(memory.get("properties"), dict):
            slots = {name: from_words(value, said) or NULL for name, value in memory["properties"].items()}
            branch["properties"]["memory_update"] = {**memory, "properties": slots}
    return schema


def _from_words(
    branch: dict[str, Any],
    said: Said,
    context: Mapping[str, Any],
    flags: Mapping[str, Topic | None],
    sole: str | None = None,
    kept: Collection[str] = (),
    held: Collection[str] = (),
    claims: Claims | None = None,
    asked: Collection[str] | None = None,
) -> tuple[dict[str, Any], set[str], set[str]] | None:
    """``branch`` with its values taken from what was said (None: a value it needs cannot be), with the keys
    whose value the words decided and those left free (nothing said fits their form); yes/no ``flags`` (key ->
    what it is about, :func:`llm_fsm.guided.values.flag_topic`) as the words answer them; the ``held`` keys keep
    their collected value; ``claims``: what is some key's and no other's (:class:`Claims`)."""
    values: dict[str, Any] = {}
    bound: set[str] = set()
    free: set[str] = set()
    answered = False  # a key with no value yet that the words gave one (a closed set's, a text's), not a flag
    for key, schema in update_of(branch).items():
        schema = _null_keeps(schema, context.get(key))
        source = NOTHING if key in held and leaves_open(schema) else said  # a closed set's value is named by the words
        if source is said and claims is not None:
            source = _claimed(said, key, schema, claims, context.get(key))
        value = from_words(schema, source, context.get(key), key in kept, asked is None or key in asked)
        values[key] = flag(value, said, flags[key], key == sole) if key in flags and value is not None else value
        answered = answered or (key not in flags and context.get(key) is None and value not in (None, schema))
        if leaves_open(schema):
            (free if value == schema else bound).add(key)
    if answered and not said.counted:  # "I'm employed, a nurse at the county hospital" answers, and says no income
        for key in free:
            if context.get(key) is None and _counts(values[key]):
                values[key] = NULL if NULL in values[key].get("anyOf", ()) else None
    if any(value is None for value in values.values()):
        return None
    update = branch["properties"]["context_update"]
    return (
        {**branch, "properties": {**branch["properties"], "context_update": {**update, "properties": values}}},
        bound,
        free,
    )


class Claims(NamedTuple):
    """What the words give one key and no other: ``numbers`` said beside a key's name (:func:`owned_numbers`),
    and ``addresses`` (emails, web addresses) that fit a key's form, which free text is not offered."""

    numbers: Mapping[str, list[int | float]]
    addresses: frozenset[str]


def owned_numbers(text: str, keys: Iterable[str], language: str | None = None) -> dict[str, list[int | float]]:
    """The numbers of ``text`` said beside one of ``keys``' names (:func:`llm_fsm.guided.words.names`), per key.
    In each clause (a sentence, or a part of one after a comma or an "and"), each name takes the number nearest
    it, the nearest pairs first and one said after a name before one said before it ("the rent is 1,100 and the
    deposit is 2k": rent 1100, deposit 2000; "rent 1100 deposit 2000"; "I'm 34 with an income of 52k": income
    52000, and 34 is no key's), with the rest of a range ("3-4k") or the parts of a spaced number ("1 500"). A
    word that names two keys ("monthly" of monthly_income and monthly_expenses) names neither, and one said as a
    rate ("12k miles a year", "per month") names no key. Joining and range words are English's and ``language``'s
    (a built-in language's code; every built-in language's where None)."""
    owned: dict[str, list[int | float]] = {}
    keys = sorted(keys)
    for clause in _clauses(language).split(ranges_joined(text, language)):  # "between 40 and 50k" is one clause
        named, words = [], list(re.finditer(r"[\w']+|/", clause.casefold()))
        for index, word in enumerate(words):
            found = [key for key in keys if names(key, {word.group().removesuffix("'s")})]
            if index > 0 and words[index - 1].group() in _RATE and word.group() in _PERIODS:  # "12k miles a year"
                found = [key for key in found if word.group() + "ly" in re.split(r"[_\W\d]+", key.casefold())]
            if len(found) == 1:
                named.append((word.start(), word.end(), found[0]))
        placed = placed_numbers(clause, language)
        pairs = sorted(
            (number.start - end if number.start >= end else start - number.end, number.start < end, index, n)
            for index, (start, end, _) in enumerate(named)
            for n, number in enumerate(placed)
        )
        taken: set[int] = set()
        names_done: set[int] = set()
        for _, _, index, n in pairs:
            if index in names_done or n in taken:
                continue
            names_done.add(index)
            first = placed[n]
            with_it = [
                m
                for m, other in enumerate(placed)
                if m not in taken
                and (m == n or first.start <= other.start and other.end <= first.end or _ranged(placed, n, m))
            ]
            taken.update(with_it)
            owned.setdefault(named[index][2], []).extend(placed[m].number for m in with_it)
    return owned


def _ranged(placed: list[Placed], n: int, m: int) -> bool:
    """Whether the ``m``-th number of ``placed`` is the other end of a range whose end the ``n``-th is."""
    return placed[n].ranged and m == n + 1 or placed[m].ranged and m == n - 1


# "a year", "per month", "/mo": a rate, which names a key of that rate (monthly_rent), not of that thing (vehicle_year)
_RATE = languages.words("en", "rate") | {"/"}  # "/mo" is a rate too
_PERIODS = languages.words("en", "period")


@functools.cache
def _clauses(language: str | None) -> re.Pattern[str]:
    """Where a message's clauses part: after a sentence's end, at a comma, and at a word that joins two clauses
    ("and", "but") of English and ``language`` (every built-in language's where None): per language, as "en" is
    Dutch "and" and French "in", "ma" Italian "but" and French "my"."""
    joiners = languages.either(languages.spoken("clause", language))
    return re.compile(rf"(?<=[.!?;])\s+|,\s+|\s+(?:{joiners})\s+", re.IGNORECASE)


def _claimed(said: Said, key: str, schema: dict[str, Any], claims: Claims, current: Any) -> Said:
    """What ``said`` offers ``key`` (whose value schema is ``schema``, holding ``current``): the numbers said beside
    its name, else those said beside no key's name (all of them where that would leave none), and, to free text,
    no address that fits another key's form."""
    numbers, texts = said.numbers, said.texts
    if claims.numbers:
        mine = claims.numbers.get(key, [])
        others = {number for owner, some in claims.numbers.items() if owner != key for number in some} - set(mine)
        rest = [number for number in numbers if number not in others and number not in mine]
        # its own: only those, unless they are what it holds ("deposit was 2000 but it's 1800 now")
        numbers = (mine if any(n != current for n in mine) else [*mine, *rest]) or numbers
    if claims.addresses and any(_free(part) for part in parts_of(schema)):
        texts = [text for text in texts if not any(address in text for address in claims.addresses)]
    return said._replace(numbers=numbers, texts=texts)


def _addresses(text: str, branches: list[dict[str, Any]]) -> frozenset[str]:
    """The emails and web addresses of ``text`` that a value of one of the ``branches`` shaped for them accepts
    (the schemas are read only where the text has one)."""
    words = {word.strip(".,;:!?()[]<>\"'") for word in text.split() if "@" in word or "://" in word}
    if not words:
        return frozenset()
    shaped = [part for branch in branches for value in update_of(branch).values() for part in parts_of(value)]
    shaped = [part for part in shaped if _shaped(part)]
    return frozenset(word for word in words if any(accepts(schema, word) for schema in shaped))


def _shaped(schema: dict[str, Any]) -> bool:
    """Whether a value schema asks for text of a form (a pattern, or a format other than a date's) that plain
    words do not fit."""
    shape = "pattern" in schema or schema.get("format", "date") != "date"
    return schema.get("type") == "string" and shape and not _free(schema)


def _free(schema: dict[str, Any]) -> bool:
    """Whether a value schema is free text: a string that plain words fit (a name, a description)."""
    kind = schema.get("type")
    text = kind == "string" or (isinstance(kind, list) and "string" in kind)  # a key with no type holds text too
    return text and not {"enum", "const"} & set(schema) and accepts(schema, "plain words")


def parts_of(schema: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = schema["anyOf"] if set(schema) == {"anyOf"} else [schema]
    return parts


def target_of(branch: dict[str, Any]) -> str:
    target: str = branch["properties"]["target_state"]["enum"][0]
    return target


def _detour(definition: FSMDefinition, target: str, here: str) -> bool:
    """Whether ``target`` is a detour from ``here``: another state, one of whose moves goes back ("$return")."""
    state = definition.states.get(target)
    return target != here and state is not None and any(t.target_state == RETURN for t in state.transitions)


def update_of(branch: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = branch["properties"]["context_update"]["properties"]
    return properties


def _null_keeps(schema: dict[str, Any], current: Any) -> dict[str, Any]:
    """``schema`` without its null where the key holds ``current`` and no other part accepts it: null leaves
    the collected value, so a move that needs another (fewer than 50 employees, 120 collected) needs it written."""
    if current is None or set(schema) != {"anyOf"} or NULL not in schema["anyOf"]:
        return schema
    others = [part for part in schema["anyOf"] if part != NULL]
    if not others or any(accepts(part, current) for part in others):
        return schema
    return others[0] if len(others) == 1 else {"anyOf": others}


def _counts(schema: dict[str, Any]) -> bool:
    """Whether a value schema holds a number (an integer or a number, perhaps beside null)."""
    return any(part.get("type") in ("integer", "number") for part in schema.get("anyOf", [schema]))


def leaves_open(schema: dict[str, Any]) -> bool:
    """Whether a value schema leaves text or a number open (not a closed set, a constant or a yes/no)."""
    return any(
        part.get("type") in ("string", "integer", "number") or isinstance(part.get("type"), list)
        for part in parts_of(schema)
        if not {"enum", "const"} & set(part)
    )


def _unbound(found: list[tuple[dict[str, Any], set[str], set[str]]]) -> list[dict[str, Any]]:
    """The branches that do not invent a value the words give elsewhere: where the words decide a key in one
    branch, a branch that left it free (nothing said fits its form: a corrected email without its dot, where
    staying needs one) offers it null, or is dropped when it needs a value."""
    decided = set().union(*(bound for _, bound, _ in found))
    kept = []
    for branch, _, free in found:
        values = dict(update_of(branch))
        for key in free & decided:
            schema = values[key]
            if set(schema) != {"anyOf"} or NULL not in schema["anyOf"]:
                break
            values[key] = NULL
        else:
            update = branch["properties"]["context_update"]
            kept.append(
                {**branch, "properties": {**branch["properties"], "context_update": {**update, "properties": values}}}
            )
    return kept


__all__ = ["NULL", "as_said", "guided_memory"]
