"""Phrase -> value cases read from tests/data/phrases/<kind>.<language>.json, each run through its kind's extractor
(tests/data/phrases/README.md): what guided mode reads from a user's words, as data, one parametrised test."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.guided.branches import owned_numbers
from llm_fsm.guided.dates import dates, days_said
from llm_fsm.guided.words import Said, from_words, names, pool

PHRASES = Path(__file__).resolve().parents[1] / "data" / "phrases"
TODAY = datetime.date(2026, 11, 27)  # a date said without its year is the next such day from this one
CLOCK = {"type": "string", "pattern": "^[0-9][0-9]:[0-9][0-9]$"}  # a time of day as a move compares it
PHONE = {"type": "string", "pattern": "^\\+?[0-9]{7,15}$"}  # a phone number as a pattern writes it
EMAIL = {"type": "string", "pattern": "@"}
COUNT = {"type": "integer", "minimum": 1, "maximum": 8}  # a party's size
ANY = "any"  # <kind>.any.json: the cases of a definition that declares no language (the reader is given None)


def said(phrase: str, language: str | None) -> Said:
    found = pool(phrase, language=language)
    assert found is not None, phrase
    return found


def offered(schema: dict[str, Any], phrase: str, language: str | None) -> list[Any] | None:
    """The values a key of ``schema`` is offered from the phrase, in order; [] where none can be written (nothing
    said fits), None where the key is left to the model as its schema says (said in words: "diez y media")."""
    narrowed = from_words(schema, said(phrase, language))
    if narrowed is None:
        return []
    return list(narrowed["enum"]) if "enum" in narrowed else None


def numbers(phrase: str, language: str | None) -> list[int | float]:
    """The numbers the guided reader takes from the phrase."""
    said = pool(phrase, language=language)
    return [] if said is None else said.numbers


def yes(phrase: str, language: str | None) -> bool | None:
    """True for a yes, False for a no, None for neither."""
    said = pool(phrase, language=language)
    return None if said is None else said.yes


def counted(phrase: str, language: str | None) -> bool:
    """Whether a number was said, in digits or in words ("three", "zero"; not "once" in English)."""
    return said(phrase, language).counted


def asks(phrase: str, language: str | None) -> bool:
    """Whether the phrase only asks (every sentence of it a question): it states nothing."""
    return said(phrase, language).asked


def texts(phrase: str, language: str | None) -> list[str]:
    """The spans of the phrase offered as free text (a question's and function words' are not)."""
    return said(phrase, language).texts


def dated(phrase: str, language: str | None) -> list[str]:
    """The dates said with a month's name, as YYYY-MM-DD (from TODAY where no year is said)."""
    return dates(phrase, TODAY)


def days(phrase: str, language: str | None) -> list[str]:
    """The dates said in digits, as YYYY-MM-DD (from TODAY where no year is said)."""
    return days_said(phrase, TODAY)


def times(phrase: str, language: str | None) -> list[str] | None:
    """The times of day a clock-shaped key is offered (see :func:`offered`)."""
    return offered(CLOCK, phrase, language)


def emails(phrase: str, language: str | None) -> list[str] | None:
    """The values an email key (a pattern with "@") is offered: the least span that has one."""
    return offered(EMAIL, phrase, language)


def phones(phrase: str, language: str | None, pattern: str = PHONE["pattern"]) -> list[str] | None:
    """The values a phone key (of ``pattern``) is offered: the digits written in groups whole first."""
    return offered({"type": "string", "pattern": pattern}, phrase, language)


def codes(phrase: str, language: str | None, pattern: str) -> list[str] | None:
    """The values a key of ``pattern`` (a reference, a parcel number) is offered: as typed, or compacted."""
    return offered({"type": "string", "pattern": pattern}, phrase, language)


def counts(phrase: str, language: str | None) -> list[int] | None:
    """The numbers a party's size (1 to 8) is offered."""
    return offered(COUNT, phrase, language)


def choices(phrase: str, language: str | None, choices: list[Any]) -> list[Any] | None:
    """The values of a closed set ``choices`` the phrase leaves on offer: those it names, all where it names none
    ("the big one": the model normalizes it), [] where it only asks."""
    return offered({"type": "string", "enum": choices}, phrase, language)


def owned(phrase: str, language: str | None, keys: list[str]) -> dict[str, list[int | float]]:
    """The numbers said beside one of ``keys``' names, per key."""
    return owned_numbers(phrase, keys, language)


def named(phrase: str, language: str | None, key: str) -> bool:
    """Whether the phrase's words name ``key``."""
    return names(key, said(phrase, language).words)


# kind -> extractor: swap one to score another on the same corpus
EXTRACTORS = {
    "numbers": numbers,
    "yes": yes,
    "counted": counted,
    "asks": asks,
    "texts": texts,
    "dates": dated,
    "days": days,
    "times": times,
    "emails": emails,
    "phones": phones,
    "codes": codes,
    "counts": counts,
    "choices": choices,
    "owned": owned,
    "names": named,
}

CASES = [
    pytest.param(path, case, id=f"{path.name}:{case['phrase'][:80]}")
    for path in sorted(PHRASES.glob("*.json"))
    for case in json.loads(path.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize(("path", "case"), CASES)
def test_a_phrase_gives_its_value(path: Path, case: dict[str, Any]) -> None:
    kind, code = path.name.split(".")[:2]
    language = None if code == ANY else code  # a definition that declares none: every language's words are read
    assert EXTRACTORS[kind](case["phrase"], language, **case.get("given", {})) == case["expected"]


def test_every_file_is_of_a_kind_with_an_extractor():
    kinds = {path.name.split(".")[0] for path in PHRASES.glob("*.json")}
    assert kinds <= set(EXTRACTORS) and {"numbers", "yes", "dates", "times"} <= kinds
