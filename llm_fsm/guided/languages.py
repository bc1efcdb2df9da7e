"""The words of each built-in language, read once from ``languages/<code>.json``: per language, its word classes
(function words, question words, yes and no words, yes-phrases, "but" words, change words, clause joiners,
cardinals, fractions, day words, the twelve months' names)."""

from __future__ import annotations

import functools
import json
from importlib import resources

CODES = ("en", "es", "de", "fr", "it", "pt", "nl")  # the built-in languages, in the order their words are read


@functools.cache
def language(code: str) -> dict[str, object]:
    """The word classes of the language ``code`` (its JSON file as read)."""
    text = resources.files("llm_fsm.guided").joinpath("languages", f"{code}.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def words(code: str, kind: str) -> frozenset[str]:
    """The words of class ``kind`` of the language ``code``."""
    return frozenset(str(language(code)[kind]).split())


def union(kind: str) -> frozenset[str]:
    """The words of class ``kind`` of every built-in language."""
    return frozenset(word for code in CODES for word in words(code, kind))


def phrases(kind: str) -> tuple[str, ...]:
    """The phrases of class ``kind`` (a list in each file) of every built-in language, in order."""
    return tuple(phrase for code in CODES for phrase in language(code)[kind])  # type: ignore[attr-defined]  # a list in each file
