"""SGD's scoring of a dialogue-state tracker, per user turn (google-research ``schema_guided_dst/metrics.py``).

Every slot of the service counts. A slot on one side only scores 0, absent on both 1; on both, a categorical slot
scores 1 when the value equals the annotation's first spelling, a free one the best fuzzy token-sort ratio
(fuzzywuzzy's ``token_sort_ratio`` / 100, written here on difflib as fuzzywuzzy's pure-Python path computes it)
against the acceptable spellings. Joint goal accuracy is the product of the slot scores; average goal accuracy the
mean over the slots the annotation has (undefined when it has none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

_NOT_WORD = re.compile(r"(?ui)\W")


def token_sort_ratio(a: str, b: str) -> float:
    """fuzzywuzzy's ``token_sort_ratio(a, b) / 100``: lower case, punctuation to spaces, tokens sorted, then
    characters outside ASCII dropped, then difflib's ratio rounded to a whole percent."""
    left, right = _sorted_tokens(a), _sorted_tokens(b)
    if not left or not right:
        return 0.0
    return round(100 * SequenceMatcher(None, left, right).ratio()) / 100


def _sorted_tokens(text: str) -> str:
    ascii_only = text.encode("ascii", "ignore").decode()  # fuzzywuzzy's force_ascii, its default
    return " ".join(sorted(_NOT_WORD.sub(" ", ascii_only).lower().split()))


@dataclass(frozen=True)
class TurnScore:
    joint: float  # joint goal accuracy of the turn (a product of slot scores: fuzzy values make it fractional)
    average: float | None  # average goal accuracy over the annotated slots (None: the annotation has none)
    intent: bool  # the active intent is right
    invented: tuple[str, ...]  # slots written that the annotation does not have: the user never gave them
    missed: tuple[str, ...]  # annotated slots not written
    wrong: tuple[str, ...]  # slots on both sides whose value scored below 1


def score_turn(
    service: dict[str, Any], gold: dict[str, list[str]], predicted: dict[str, Any], gold_intent: str, intent: str
) -> TurnScore:
    """One user turn's scores: ``predicted`` is the tracker's state (slot -> value), ``gold`` the annotation."""
    scores, active = [], []
    invented, missed, wrong = [], [], []
    for slot in service["slots"]:
        name = slot["name"]
        if name in gold and name in predicted:
            value = str(predicted[name])
            if slot["is_categorical"]:
                score = float(value == gold[name][0])
            else:
                score = max(token_sort_ratio(ref, value) for ref in gold[name])
            if score < 1:
                wrong.append(name)
        elif name in gold:
            score = 0.0
            missed.append(name)
        elif name in predicted:
            score = 0.0
            invented.append(name)
        else:
            score = 1.0
        scores.append(score)
        if name in gold:
            active.append(score)
    joint = 1.0
    for score in scores:
        joint *= score
    average = sum(active) / len(active) if active else None
    return TurnScore(joint, average, gold_intent == intent, tuple(invented), tuple(missed), tuple(wrong))
