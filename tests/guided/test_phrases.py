"""Phrase -> value cases read from tests/data/phrases/<kind>.<language>.json, each run through its kind's extractor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.guided.words import pool

PHRASES = Path(__file__).resolve().parents[1] / "data" / "phrases"


def numbers(phrase: str, language: str) -> list[int | float]:
    """The numbers the guided reader takes from the phrase."""
    said = pool(phrase, language=language)
    return [] if said is None else said.numbers


def yes(phrase: str, language: str) -> bool | None:
    """True for a yes, False for a no, None for neither."""
    said = pool(phrase, language=language)
    return None if said is None else said.yes


EXTRACTORS = {"numbers": numbers, "yes": yes}  # kind -> extractor: swap one to score another on the same corpus

CASES = [
    pytest.param(path, case, id=f"{path.name}:{case['phrase']}")
    for path in sorted(PHRASES.glob("*.json"))
    for case in json.loads(path.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize(("path", "case"), CASES)
def test_a_phrase_gives_its_value(path: Path, case: dict[str, Any]) -> None:
    kind, language = path.name.split(".")[:2]
    assert EXTRACTORS[kind](case["phrase"], language) == case["expected"]
