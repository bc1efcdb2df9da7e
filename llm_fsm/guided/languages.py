"""The words of each built-in language, read once from ``languages/<code>.json``. Each file holds, per field:

- ``function``: words that carry no value on their own (articles, pronouns, fillers): a span of only them states
  nothing;
- ``question``: words that open a question ("what", "wann"): a sentence that ends with "?" and has one states
  nothing;
- ``yes``, ``no``: words that say yes, or no; ``yes_phrases`` (a list): phrases that say yes with a no-word in
  them ("no problem");
- ``but``: words that turn a yes into "yes, but..."; ``change``: words that take back what was said ("wait");
- ``clause``: words that join two clauses ("and", "pero"): a number said in one is not a key named in the other;
- ``cardinal``, ``fraction``, ``day``: words that count ("three"), that divide ("half"), that name a time of day
  or a day ("noon", "Friday");
- ``months`` (a list of twelve): each month's names, January first, its spellings and abbreviations apart by spaces;
- ``day_of``: the word between a day and its month's name ("13 of June", "13 de junio");
- ``times`` (an object): a time of day, ``HH:MM``, and the words that say it ("noon");
- ``thousand``, ``million``: the words that scale a number said in digits ("42 thousand", "3 Millionen");
- ``between``: the words that open a range said with "and" ("between 40 and 50k"), and ``between_and``: its "and";
  ``range_to``: the word between a range's ends ("3 to 4 thousand", "3 bis 4");
- ``rate``, ``period``: the words of a rate ("a", "per"; "year", "month"): "12k miles a year" names no key of that
  thing (vehicle_year), only one of that rate (annual_mileage); English's only, as key names are paired by their
  English "-ly" form (monthly_rent);
- ``confirming``: the starts of a yes/no key's name that make it a confirmation ("confirm", "acept", "bestätig"),
  and ``generic``: the words of a key's name or a move's description that name who or how, not what ("user",
  "says"): both read from the definition's names, in every language.

Words are apart by spaces; a field a language does not fill is empty. Where a reader knows the definition's language
it reads that language's words beside English's (:func:`spoken`, :func:`phrases`): a word of one language can be a
function word of another ("ma" is Italian "but" and French "my", "si" Spanish "yes" and French "if", "prima" Dutch
"fine" and Italian "before", "once" Spanish "eleven"). So each language lists its own words in full, those it
shares with another too ("mil", "sábado", "claro"): none is read through another language's list.

Where no language is known every language's words are read (as guided mode always has), so a language's
``cardinal`` leaves out its words that are common English or function words too: Italian "due" ("due date"),
Portuguese "um" (a hesitation) and "dos" ("of the"), Dutch "een" ("a"; "één" is listed). text2num still writes
them as numbers in their own language (:func:`llm_fsm.guided.numbers.in_digits`)."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

CODES = ("en", "es", "de", "fr", "it", "pt", "nl")  # the built-in languages, in the order their words are read


@functools.cache
def language(code: str) -> dict[str, object]:
    """The word classes of the language ``code`` (its JSON file as read)."""
    text = resources.files("llm_fsm.guided").joinpath("languages", f"{code}.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


@functools.cache
def words(code: str, kind: str) -> frozenset[str]:
    """The words of class ``kind`` of the language ``code``."""
    return frozenset(str(language(code)[kind]).split())


@functools.cache
def union(kind: str) -> frozenset[str]:
    """The words of class ``kind`` of every built-in language."""
    return frozenset(word for code in CODES for word in words(code, kind))


@functools.cache
def spoken(kind: str, code: str | None = None) -> frozenset[str]:
    """The words of class ``kind`` of English and of the language ``code`` (a built-in one's; English alone for
    another); of every built-in language where ``code`` is None (a reader that does not know the language reads
    every one's, as it always has)."""
    if code is None:
        return union(kind)
    return words("en", kind) | (words(code, kind) if code in CODES else frozenset())


def either(words: frozenset[str]) -> str:
    """A regular expression's alternatives for any of ``words``, the longest first (a word is not read as its
    start: "millions" before "million")."""
    return "|".join(re.escape(word) for word in sorted(words, key=lambda word: (-len(word), word)))


@functools.cache
def phrases(kind: str, code: str | None = None) -> tuple[str, ...]:
    """The phrases of class ``kind`` (a list in each file) of English and of the language ``code``, as
    :func:`spoken` reads words: of every built-in language, in order, where ``code`` is None."""
    codes = CODES if code is None else ("en", *([code] if code in CODES and code != "en" else []))
    return tuple(phrase for each in codes for phrase in language(each)[kind])  # type: ignore[attr-defined]  # a list in each file


def months() -> dict[str, int]:
    """Every built-in language's names of the months (casefolded), each with its month's number (January is 1).
    A name two languages share names the same month in both ("agosto", "april"); one that named two would be an
    error in a file, and raises ValueError."""
    found: dict[str, int] = {}
    for code in CODES:
        listed = language(code)["months"]
        for number, names in enumerate(listed if isinstance(listed, list) else [], start=1):  # a list in each file
            for name in str(names).casefold().split():
                if found.setdefault(name, number) != number:
                    raise ValueError(f"{code}.json: {name!r} names month {number} and month {found[name]}")
    return found


def times() -> dict[str, str]:
    """Every built-in language's words for a time of day (casefolded), each with its time (``HH:MM``): "noon" is
    12:00, "minuit" 00:00."""
    found: dict[str, str] = {}
    for code in CODES:
        said_as = language(code)["times"]
        for time, said in (said_as if isinstance(said_as, dict) else {}).items():  # an object in each file
            for word in str(said).casefold().split():
                if found.setdefault(word, str(time)) != time:
                    raise ValueError(f"{code}.json: {word!r} says {time} and {found[word]}")
    return found
