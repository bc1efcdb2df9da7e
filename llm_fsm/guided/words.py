"""Values from the user's words: a guided schema offers, for a key the user states, the pieces of what
they said that can be its value.

A 135M model held to "any text up to 80 characters" writes whatever its prompt makes likely: the
definition's own words ("triage" as an issue summary), the greeting ("Hi there, I'm Sunny!" as a
topic), a looping sentence. What a user states, though, is in their message: a name, an email, an
answer, a number. So the turn's schema offers, per value:

- **text** with no closed set: the spans of the user's words (one to :data:`MAX_SPAN_WORDS` words,
  punctuation at the edges left off) that the key's schema accepts (its pattern, its bounds), and the
  text values the turn's tools answered with;
- **numbers** with no closed set: the numbers written in digits in the message, and those the tools
  answered with, that the key's schema accepts.

When nothing the user said fits (a date said in words where the schema wants ``2026-06-13``, a
number said in words), the schema is left as it was: the model writes the value in the form asked
for. Formats are never touched. Words that answer another of the state's questions and say no number
at all (no digit, no word for one) give a number no value: "employed, a nurse at the county hospital"
states no income (:mod:`llm_fsm.guided.branches`).

What counts as said: the sentences that do not ask ("Why do you need all this?" states no name; "Sydney?"
is an answer), without spans of function words and fillers ("okay, fair enough" states nothing: a key
has no value to write then), plus the times of day said with a clock's marks ("9 pm" offers ``21:00``).
A yes/no flag is answered by the words (:func:`flag`): a confirmation by a yes or a no, a flag about
something (leaving, cancelling) is true only when the words name it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from llm_fsm.guided.dates import ISO_DATE, dates, days_said, real_day, times
from llm_fsm.guided.languages import CODES, phrases, spoken, words
from llm_fsm.guided.numbers import in_digits, said_numbers

MAX_SPAN_WORDS = 8  # the longest span offered, in words
MAX_WORDS = 60  # of a longer message, the first and the last 30 words are the ones offered
MAX_OFFERED = 400  # values offered for one key (a grammar of a few thousand characters at most)
# words that carry no value on their own (articles, pronouns, prepositions, auxiliaries, fillers): a span made
# only of them ("to", "the", "all", "is fine") is not something a user states as a name or an answer. English
# always (users mix it in), and the definition's language when it is a built-in one (llm_fsm.definition.texts)
FUNCTION_WORDS: dict[str, frozenset[str]] = {code: words(code, "function") for code in CODES}


def word_set(text: str) -> frozenset[str]:
    """The words of ``text``, split at spaces."""
    return frozenset(text.split())


# a sentence that asks (it ends with "?" and opens with one of these) states nothing: "Why do you need all this?" is
# no name, "whats the difference between medium and large?" names no size ("Sydney?" is an answer, said unsure)
# ("Can I get a refund?", "Could you book 7pm?" ask for something: a request states it, so can, could, may, will
# and would are not question words)
QUESTION_WORDS = {code: words(code, "question") for code in CODES}  # English always, and the definition's


class Answering(NamedTuple):
    """The words a yes or a no is read by (:func:`answering`): ``yes`` and ``no``; ``change``, words that take back
    what was said, opening a sentence ("hmm wait, can I change the date?", "oh wait, Saturday is my sister's
    wedding"), which to a read-back say no; ``but``, words that turn a yes into "yes, but..." (the model's to read);
    ``phrases``, phrases that say yes with a no-word in them ("no problem")."""

    yes: frozenset[str]
    no: frozenset[str]
    change: frozenset[str]
    but: frozenset[str]
    phrases: tuple[str, ...]


@functools.cache
def answering(language: str | None = None) -> Answering:
    """The yes and no words of English and ``language`` (a built-in language's code), of every built-in language
    where it is None (:func:`llm_fsm.guided.languages.spoken`): in a French definition "si" is "if", no yes; in an
    Italian one "prima" is "before"; in Spanish "si" and in Dutch "prima" say yes. A yes/no flag the user confirms
    is written from them (llm_fsm.guided.schema: flags)."""
    return Answering(
        spoken("yes", language), spoken("no", language), spoken("change", language), spoken("but", language),
        phrases("yes_phrases", language),
    )  # fmt: skip


class Counting(NamedTuple):
    """The words that say a number (:func:`counting`): ``cardinal``, words that count ("me and three friends",
    "zero", "fifty two thousand"); ``numeric``, those and the words that divide or say a time of day or a day
    ("half", "noon", "Friday"): a value shaped with digits (a time, a date) may be said in them; ``days``, the last
    ("tomorrow", "noon")."""

    cardinal: frozenset[str]
    numeric: frozenset[str]
    days: frozenset[str]


@functools.cache
def counting(language: str | None = None) -> Counting:
    """The number words of English and ``language`` (a built-in language's code), of every built-in language where
    it is None, as :func:`answering` reads yes and no: in an English definition "once" is no number, in a Spanish
    one it is eleven."""
    cardinal, fraction, day = (spoken(kind, language) for kind in ("cardinal", "fraction", "day"))
    return Counting(cardinal, cardinal | fraction | day, day - cardinal - fraction)


_EDGE = " \t\n\"'`.,;:!?()[]{}<>¡¿«»“”‘’-–—*/\\|&"
_GROUPS = re.compile(r"\+?\(?\d+\)?(?:[ -]\(?\d+\)?)*")  # digits in groups: 555 123 4567, (555) 123-4567
_LONE = re.compile(r"\s\(?\d\)?$")  # a lone digit at the end: another number ("2027-06-13 3 nights")
MAX_NUMBERS = 20  # numbers offered (a message full of them keeps the grammar small)
_LARGEST = 10**15


class Topic(NamedTuple):
    """What a yes/no flag is about: the words of its ``name`` (goodbye), and of the moves that read it too."""

    name: frozenset[str]
    about: frozenset[str]


class Said(NamedTuple):
    """What a turn's values may be taken from: ``texts`` (the spans worth offering and the tools' text),
    ``numbers`` (written in digits, and the tools'), ``every`` (all spans, function words included: they
    still name a closed set's value, such as "no")."""

    texts: list[str]
    numbers: list[int | float]
    every: list[str]
    words: frozenset[str] = frozenset()  # the words stated (casefolded), for yes/no flags
    asked: bool = False  # the message only asks: every sentence of it is a question
    yes: bool | None = None  # the words say yes (True), no (False), or neither or both (None)
    numeric: bool = False  # a digit or a word for a number, a time or a day was stated ("half past", "Friday")
    counted: bool = False  # a number was stated, in digits or in words ("three", "zero"): not a day or a month
    dayword: bool = False  # a word for a day or a time of day was stated ("tomorrow", "noon", "Friday")
    digits: bool = False  # a digit was stated
    days: tuple[int, ...] = ()  # days of the month said alone ("make it the 15th"): of the month collected
    told: tuple[Any, ...] = ()  # the text and numbers the turn's tools answered with
    text: str = ""  # what the user stated (the message without the sentences that ask)
    dated: tuple[str, ...] = ()  # dates said in digits or as a day ("13/06", "tomorrow"), for a date's key only


def pool(text: str | None, results: Iterable[Any] = (), language: str | None = None) -> Said | None:
    """What ``text`` (the user's message) and ``results`` (the scalar values inside what the turn's tools
    answered) offer; None without user text. Spans made only of function words (of English and
    ``language``'s code) are not offered as text values. A yes, a no and a number said in words are read in
    English and ``language`` (a built-in language's code), in every built-in language where it is None (the
    definition declares none, or one that is not built in): :func:`answering`, :func:`counting`."""
    if not text or not text.strip():
        return None
    empty = FUNCTION_WORDS["en"] | FUNCTION_WORDS.get(language or "en", frozenset())
    text, whole = stated(text, language), text
    every = spans(text)
    texts = [span for span in every if not _only(span, empty)]
    # "two": 2, a number; not a closed set's "2" (SGD: "two rooms" also named star_rating's "2", invented values
    # rose 3 points with joint goal accuracy unchanged, benchmarks/SGD.md section 4)
    numbers = said_numbers(in_digits(text, language), language)
    texts += [time for time in [*times(text), *dates(text)] if time not in texts]
    texts += [s for sentence in _sentences(text) if len((s := sentence.strip(_EDGE)).split()) > MAX_SPAN_WORDS]
    told: list[Any] = []  # what the tools answered: offered where nothing the user said fits
    for value in _leaves(results):
        if isinstance(value, str) and value.strip():
            told.append(value.strip())
        elif isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < _LARGEST:
            told.append(value)
    words = frozenset(re.findall(r"[\w']+", text.casefold()))
    asked = not text.strip() and bool(whole.strip())
    counting_words = counting(language)
    numeric = any(c.isdigit() for c in text) or bool(words & counting_words.numeric)
    said = Said(list(dict.fromkeys(texts)), list(dict.fromkeys(numbers))[:MAX_NUMBERS], every, words, asked)
    days = tuple(int(day) for day in re.findall(r"\b(\d{1,2})(?:st|nd|rd|th)\b", text) if 1 <= int(day) <= 31)
    counted, digits = bool(numbers) or bool(words & counting_words.cardinal), any(c.isdigit() for c in text)
    return said._replace(
        yes=_answer(text, language), numeric=numeric, counted=counted, digits=digits, days=days, text=text,
        dayword=bool(words & counting_words.days),
        told=tuple(dict.fromkeys(told)), dated=tuple(days_said(text)),
    )  # fmt: skip


def _answer(text: str, language: str | None = None) -> bool | None:
    """True when ``text`` says yes and not no, False when no and not yes; None for neither, both, or "yes, but".
    In the words of English and ``language`` (:func:`answering`)."""
    said_as = answering(language)
    lowered, phrased = text.casefold(), False
    for phrase in said_as.phrases:
        if phrase in lowered:
            lowered, phrased = lowered.replace(phrase, " "), True
    # a yes or a no opens what it answers ("Oh no, the email is wrong", "Looks good, go ahead"); one further on is
    # about something else ("my mail is camille@gmail.fr, pas .com")
    opening = [sentence.split()[:4] for sentence in _sentences(lowered.replace("’", "'"))]
    words = {word.strip(_EDGE) for first in opening for word in first}
    yes = phrased or bool(words & said_as.yes)
    no = bool(words & (said_as.no | said_as.change)) or any(word.endswith("n't") for word in words)
    if yes == no or (yes and words & said_as.but):
        return None
    return yes


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+", text.strip())


def stated(text: str, language: str | None = None) -> str:
    """``text`` without the sentences that ask ("Why do you need all this?"): the rest is what the user states.
    A sentence asks when it ends with "?" and has a question word (of English or ``language``'s code) among its
    first three words ("wait, what should I bring?"); "Sydney?" is an answer, "Can I get a refund?" a request."""
    questions = QUESTION_WORDS["en"] | QUESTION_WORDS.get(language or "en", frozenset())

    def asks(sentence: str) -> bool:
        words = [word.strip(_EDGE) for word in sentence.casefold().split()[:3]]
        return sentence.rstrip("\"')» ").endswith("?") and any(word in questions for word in words)

    return " ".join(sentence for sentence in _sentences(text) if not asks(sentence))


_ENDS = re.compile(r"[.!?]['\")»]*$")  # a word that ends a sentence


def spans(text: str) -> list[str]:
    """Every run of one to :data:`MAX_SPAN_WORDS` consecutive words of ``text``, with the punctuation at its
    edges left off; longest first per start. Of a long message, the first and the last :data:`MAX_WORDS`
    halves (a name said first, the answer said last). A span ends with its sentence ("Two, please. One of them
    is a gift." offers "One of them is a gift", not "please. One")."""
    words = text.split()
    windows = [words] if len(words) <= MAX_WORDS else [words[: MAX_WORDS // 2], words[-MAX_WORDS // 2 :]]
    found: list[str] = []
    for window in windows:
        for start in range(len(window)):
            last = start + next((i + 1 for i, word in enumerate(window[start:]) if _ENDS.search(word)), len(window))
            for end in range(min(last, start + MAX_SPAN_WORDS), start, -1):
                span = " ".join(window[start:end]).strip(_EDGE)
                if any(c.isalnum() for c in span):
                    found.append(span)
    return list(dict.fromkeys(found))


def from_words(
    schema: dict[str, Any], said: Said, current: Any = None, keep: bool = False, asked: bool = True
) -> dict[str, Any] | None:
    """``schema`` (one key's value schema in a branch, perhaps ``anyOf`` with null) with each part made the
    values of ``said`` it accepts: free text and numbers from the pool; a closed set (an ``enum`` of text) the
    values the words name, or all of them where they name none and the key is ``asked`` (the state or the move's
    target requires it). None when no value can come from what was said: numbers were written and none fits (a
    branch that needs more than 8 guests, when the user wrote 4), or a closed set not asked for is named by none.

    What nothing said fits is left as the schema says (a date said in words), unless ``current`` holds the key's
    collected value: that changes only to one the user said, so the part becomes that value.

    ``keep``: the key holds a value collected before that this state does not ask for, here only to be corrected
    (a read-back, ``corrections``). Free text (no pattern) and numbers then offer that value beside what was
    said: a small model offered only spans wrote one over the name ("customer_name": "thats")."""
    if "anyOf" in schema and set(schema) == {"anyOf"}:
        found = (from_words(part, said, current, keep, asked) for part in schema["anyOf"])
        parts = [part for part in found if part is not None]
        return None if not parts else parts[0] if len(parts) == 1 else {"anyOf": parts}
    if "enum" in schema and "const" not in schema:
        return _closed_set(schema, said, current, asked)
    if "const" in schema or schema.get("format", "date") != "date" or schema.get("type") in ("null", "boolean"):
        return schema  # a date format is read as its pattern (below); other formats are the model's to write
    if schema.get("format") == "date" and "pattern" not in schema:
        schema = {**schema, "pattern": ISO_DATE.pattern}
    kind = schema.get("type")
    if (
        not said.texts
        and not said.numbers
        and not said.told
        and current is None
        and (kind in ("string", "integer", "number") or isinstance(kind, list))
    ):
        return None  # nothing stated (a question, "okay, fair enough"): no value to write
    return _open_value(schema, said, current, keep)


def _closed_set(schema: dict[str, Any], said: Said, current: Any, asked: bool) -> dict[str, Any] | None:
    """A closed set (an ``enum``) made the values the words name; where they name none, the collected
    ``current`` value if the set has it, else the whole set when the key is ``asked`` and something was said."""
    named = [value for value in schema["enum"] if isinstance(value, str) and named_in(value, said.every)]
    if named:
        return {**schema, "enum": named}
    if current is not None:
        return {"const": current} if current in schema["enum"] else None
    unasked = not asked and any(isinstance(value, str) for value in schema["enum"])
    return None if unasked or not said.every else schema  # a message that only asks chooses nothing


def _open_value(schema: dict[str, Any], said: Said, current: Any, keep: bool) -> dict[str, Any] | None:
    """A part with no closed set (free text, a number, or a value of any of those kinds) made the values of
    ``said`` it accepts; a part of another kind is left as it is."""
    kind = schema.get("type")
    if kind == "string":
        offered = _texts_offered(schema, said, current)
    elif kind in ("integer", "number"):
        offered = [n for n in said.numbers if kind == "number" or isinstance(n, int) or float(n).is_integer()]
        offered = [int(n) if kind == "integer" else n for n in offered]
        told = any(isinstance(value, int | float) and not isinstance(value, bool) for value in said.told)
        if not offered and not told:  # no number written (four, said in words): the model writes it, a
            # collected one only where it is corrected ("income is actually fifty two thousand")
            return _kept(schema, current) if current is not None and not (keep and said.counted) else schema
    elif isinstance(kind, list) and set(kind) == {"string", "number", "boolean"}:  # nothing says what it holds
        untyped = {key: value for key, value in schema.items() if key != "type"}
        return _chosen(untyped, schema, said, [*said.texts, *said.numbers], current, keep)
    else:
        return schema
    return _chosen(schema, schema, said, offered, current, keep)


def _texts_offered(schema: dict[str, Any], said: Said, current: Any) -> list[Any]:
    """The texts a free-text part is offered: the spans said, a day of the month collected ("the 15th"), and
    the dates said where the part's pattern asks for digits."""
    offered: list[Any] = list(said.texts)
    if isinstance(current, str) and ISO_DATE.fullmatch(current):  # "the 15th": of the month collected
        offered += [day for day in (f"{current[:8]}{day:02d}" for day in said.days) if real_day(day)]
    if _digits_in(schema.get("pattern")):  # "13/06/2027": a date's key is offered the date
        offered += [day for day in said.dated if day not in offered]
    return offered


def _chosen(
    schema: dict[str, Any], original: dict[str, Any], said: Said, offered: list[Any], current: Any, keep: bool
) -> dict[str, Any] | None:
    """The values of ``offered`` that ``schema`` accepts, as a closed set (``original`` is the part as it came,
    its type included); what the tools answered where nothing said fits."""
    kind = original.get("type")
    kind_free = isinstance(kind, list)  # nothing says what it holds: text or a number
    accepts = _checker(schema)
    # what the user said first; what the tools answered where nothing said fits ("9 pm then": 21:00, not the
    # 22:00 the availability check was asked about)
    fitting = [value for value in offered if accepts(value)] or [
        value for value in said.told if (isinstance(value, str) == (kind == "string") or kind_free) and accepts(value)
    ]
    if not fitting and kind == "string" and "pattern" in schema:  # a code typed loosely: "pf 4471 9902 de"
        fitting = [value for value in dict.fromkeys(_compacted(offered)) if accepts(value)]
    if not fitting:
        return _unfitted(original, said, current)
    if "pattern" in schema and kind == "string":
        fitting = _least_shaped(fitting, str(schema["pattern"]))
    elif keep and isinstance(current, str | int | float) and not isinstance(current, bool) and accepts(current):
        fitting = [current, *(value for value in fitting if value != current)]
    return {"enum": fitting[:MAX_OFFERED]}


def _unfitted(original: dict[str, Any], said: Said, current: Any) -> dict[str, Any] | None:
    """What a part becomes when nothing said or answered fits it: the collected value where there is one; else
    none for a number, nor for a value of digits the words do not say; else the part as it was."""
    kind = original.get("type")
    if current is not None:
        return _kept(original, current)
    if kind == "string" and _digits_in(original.get("pattern")) and (not said.numeric or said.digits):
        # a time or a code the words do not say ("I'm Ana"), or say wrong (a 5-character reference where 6
        # are asked): not invented; said in words ("diez y media", "tomorrow, 3 nights") it is the model's
        return original if said.dayword else None
    return None if kind in ("integer", "number") else original


def _least_shaped(fitting: list[Any], pattern: str) -> list[Any]:
    """Of the values a shaped part (an email, a code) accepts, the least spans that have it, and first the whole
    of digits written in groups ("555 123 4567", "+44 7700 900123"), not a piece of them."""
    least = [value for value in fitting if not any(other != value and other in value for other in fitting)]
    whole_only = pattern.startswith("^") and pattern.endswith("$")
    groups = [v for v in fitting if whole_only and isinstance(v, str) and _GROUPS.fullmatch(v) and not _LONE.search(v)]
    whole = [v for v in groups if not any(o != v and v in o for o in groups) and any(p != v and p in v for p in least)]
    return list(dict.fromkeys([*whole, *least]))


def _compacted(texts: Iterable[Any]) -> Iterable[str]:
    """Each text without its spaces and dashes, as typed and in capitals ("kd17 xrf": "kd17xrf", "KD17XRF"): a
    reference, a plate or a phone number as a pattern writes it."""
    for text in texts:  # not with a lone digit after it: "555 123 4567 2 people" is a phone number and a count
        if isinstance(text, str) and (compact := re.sub(r"[\s-]+", "", text)) != text and not _LONE.search(text):
            yield from (compact, compact.upper())


def _digits_in(pattern: Any) -> bool:
    """Whether a pattern asks for digits (``^[0-9]{2}:[0-9]{2}$``, ``\\d``)."""
    return isinstance(pattern, str) and ("0-9" in pattern or "\\d" in pattern)


def _kept(schema: dict[str, Any], current: Any) -> dict[str, Any] | None:
    """The collected value, where ``schema`` (a branch's part) accepts it; None where the branch needs another
    (a move for fewer than 50 employees, 120 collected and no new number said)."""
    return {"const": current} if _checker(schema)(current) else None


def flag(schema: dict[str, Any], said: Said, topic: Topic | None, sole: bool = False) -> dict[str, Any] | None:
    """``schema`` (a yes/no key's value, perhaps ``anyOf`` with null) with the answers the words allow: a
    confirmation (``topic`` None) is true on a yes and false on a no; a flag about something (leaving, cancelling)
    is true when the words name it ("Bye!" for ``user_said_goodbye``) without a no, either when they only touch
    what its moves are about, and false otherwise (:func:`related`). None when nothing is left.

    ``sole``: the flag is all its state asks, the state's question ("block the card?", "bestaetigt"): a yes or a
    no answers it, whatever its name says; words that say neither ("will my direct debits still go out?", a new
    address) leave it null, unless they name what it is about ("restarted it" for ``restarted``). Beside other
    keys, the words may answer a flag without a yes ("send it to 14 Albert Road, can I get it quicker?")."""
    if sole and said.yes is not None:
        return _answers(schema, {said.yes}, answered=True)
    if sole and (topic is None or not related(said.words, topic.name)):
        return _answers(schema, set())
    if topic is None:
        allowed = {True, False} if said.yes is None else {said.yes}
    elif related(said.words, topic.name) and said.yes is not False:
        allowed = {True}
    else:
        allowed = {True, False} if related(said.words, topic.about) else {False}
    # a yes, a no, or the thing named is an answer: written, not left null ("Bye!" and staying)
    answered = topic is None and said.yes is not None or allowed == {True}
    return _answers(schema, allowed, answered)


def related(words: Iterable[str], topic: Iterable[str]) -> bool:
    """Whether one of ``words`` names the topic: the same word, one sharing its first four letters with a topic word
    (cancel, cancelled; leave, leaving), or the end of one (bye, goodbye)."""
    topic = list(topic)
    for word in words:
        for other in topic:
            if word == other or (len(word) >= 3 and other.endswith(word)):
                return True
            if len(word) >= 5 and len(other) >= 5 and word[:4] == other[:4]:
                return True
    return False


def names(key: str, words: Iterable[str]) -> bool:
    """Whether ``words`` (stated, casefolded) name ``key``: a word of its name of three letters or more, or its
    plural or -ly form ("income is actually 52,000" names annual_income; "my debts" and "a month" name
    monthly_debt_payments; "I drive" does not name driver_name)."""
    parts = re.split(r"[_\W\d]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", key).casefold())
    name = {part for part in parts if len(part) >= 3 and part not in FUNCTION_WORDS["en"]}
    said = {word.removesuffix("'s") for word in words}  # "rent's 1100" names the rent
    return any(a == b + end or b == a + end for a in said for b in name for end in ("", "s", "es", "ly"))


def _answers(schema: dict[str, Any], allowed: set[bool], answered: bool = False) -> dict[str, Any] | None:
    if "anyOf" in schema and set(schema) == {"anyOf"}:
        found = (_answers(each, allowed, answered) for each in schema["anyOf"])
        parts = [part for part in found if part is not None]
        return None if not parts else parts[0] if len(parts) == 1 else {"anyOf": parts}
    if schema.get("type") == "null":
        return None if answered else schema
    if "const" in schema:
        return schema if schema["const"] in allowed or not isinstance(schema["const"], bool) else None
    if "enum" in schema:
        kept = [value for value in schema["enum"] if value in allowed or not isinstance(value, bool)]
        return {**schema, "enum": kept} if kept else None
    if schema.get("type") == "boolean" and not allowed:
        return None
    if schema.get("type") == "boolean" and len(allowed) == 1:
        return {"type": "boolean", "const": next(iter(allowed))}
    return schema


def _only(span: str, words: frozenset[str]) -> bool:
    """Whether every word of ``span`` is one of ``words`` (a number is never a function word)."""
    return all(word.strip(_EDGE).casefold() in words for word in span.split())


def named_in(value: str, texts: Sequence[str]) -> bool:
    """Whether the user's words name ``value`` (``burr_grinder`` in "the burr grinder", any case)."""
    wanted = _plain(value)
    return bool(wanted) and any(_plain(text) == wanted for text in texts)


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[_\-]+", " ", text).casefold().split())


def accepts(schema: Mapping[str, Any], value: Any) -> bool:
    """Whether ``schema`` accepts ``value``."""
    return _checker(schema)(value)


def _checker(schema: Mapping[str, Any]) -> Callable[[Any], bool]:
    import jsonschema  # where first used (checks the values a turn offers)

    validator = jsonschema.Draft202012Validator(dict(schema))

    def accepts(value: Any) -> bool:
        try:
            return bool(validator.is_valid(value))
        except re.error:  # a pattern Python's re does not read: nothing is known to fit
            return False

    return accepts


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


__all__ = [
    "FUNCTION_WORDS",
    "QUESTION_WORDS",
    "Answering",
    "Counting",
    "MAX_NUMBERS",
    "MAX_OFFERED",
    "Said",
    "Topic",
    "MAX_SPAN_WORDS",
    "MAX_WORDS",
    "accepts",
    "answering",
    "counting",
    "flag",
    "from_words",
    "named_in",
    "names",
    "pool",
    "related",
    "spans",
    "stated",
    "word_set",
]
