"""What a definition declares about working memory and running summaries, and the summary part of a
snapshot: pydantic models only, which ``definition.py`` and ``engine.py`` import. What they do is in
:mod:`llm_fsm.memory.working` and :mod:`llm_fsm.memory.summaries`, whose docstrings describe the format.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SLOTS = 32  # slots and background together: every one is in every prompt
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Slot(_Spec):
    """One named text the model (and code) keeps up to date; shown in every prompt."""

    description: str = Field("", description="What the slot holds, shown to the model.")
    max_chars: int = Field(
        500, ge=1, le=20000, strict=True, description="Longest text the slot holds; a longer model write is cut."
    )
    initial: str = Field("", description="The slot's text until something writes it.")
    model_writes: bool = Field(
        True, strict=True, description="false: only code (handlers, Conversation.update_memory) writes it."
    )

    @model_validator(mode="after")
    def _initial_fits(self) -> Slot:
        if len(self.initial) > self.max_chars:
            raise ValueError(f"initial is {len(self.initial)} characters long, more than max_chars ({self.max_chars})")
        return self


class MemorySpec(_Spec):
    """A definition's working memory: `background` and `slots`, each a map of slot names to slots."""

    background: dict[str, Slot] = Field(
        default_factory=dict, description="Slots shown first, as the background: vision, goals, a to-do list."
    )
    slots: dict[str, Slot] = Field(default_factory=dict, description="The working notes (named slots).")

    @field_validator("background", "slots")
    @classmethod
    def _names(cls, value: dict[str, Slot]) -> dict[str, Slot]:
        bad = [name for name in value if not _IDENTIFIER.match(name)]
        if bad:
            raise ValueError(f"slot name '{bad[0]}' is not an identifier (letters, digits and _, not first a digit)")
        return value

    @model_validator(mode="after")
    def _unique_and_bounded(self) -> MemorySpec:
        both = set(self.background) & set(self.slots)
        if both:
            raise ValueError(f"slot '{sorted(both)[0]}' is declared both in background and in slots")
        count = len(self.background) + len(self.slots)
        if count == 0:
            raise ValueError("a memory declares at least one slot (in background or slots)")
        if count > MAX_SLOTS:
            raise ValueError(f"a memory holds at most {MAX_SLOTS} slots (background and slots), not {count}")
        return self

    @property
    def all(self) -> dict[str, Slot]:
        return {**self.background, **self.slots}

    @property
    def model_slots(self) -> list[str]:
        return [name for name, slot in self.all.items() if slot.model_writes]


class SummarySpec(_Spec):
    """When the conversation is summarised, and the bounds of each summary call."""

    on_overflow: bool = Field(True, strict=True, description="Summarise the exchanges that leave the history window.")
    on_leave: bool = Field(
        False, strict=True, description="Summarise a state's exchanges when the conversation leaves it."
    )
    max_chars: int = Field(
        1500, ge=50, le=20000, strict=True, description="Longest running summary, in characters (longer is cut)."
    )
    max_tokens: int = Field(600, ge=16, le=16384, strict=True, description="Completion tokens a summary call may use.")
    batch: int = Field(
        4, ge=1, le=50, strict=True, description="Exchanges beyond the window before a summary call folds them."
    )
    max_exchanges: int = Field(
        24, ge=1, le=200, strict=True, description="Exchanges one summary call folds at most (its input bound)."
    )
    instructions: str = Field("", description="What the summary must keep, for the model that writes it.")

    @model_validator(mode="after")
    def _batch_fits(self) -> SummarySpec:
        if self.max_exchanges < self.batch:
            raise ValueError(f"max_exchanges ({self.max_exchanges}) is smaller than batch ({self.batch})")
        return self


class StateSummaries(_Spec):
    """A state's own choice of summary triggers (unset: the definition's)."""

    on_overflow: bool | None = Field(
        None, strict=True, description="Summarise what leaves the history window while in this state."
    )
    on_leave: bool | None = Field(
        None, strict=True, description="Summarise this state's exchanges when the conversation leaves it."
    )


class RunningSummary(BaseModel):
    """The summary part of a snapshot: the text, what it covers, what is due, the last failure."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    through: int = Field(0, description="history[:through] is folded into text.")
    due: int = Field(0, description="history[:due] should be folded; due > through: a summary is pending.")
    calls: int = Field(0, description="Summary calls made so far (failed ones included).")
    failures: int = Field(0, description="Summary calls failed in a row.")
    error: str | None = Field(None, description="Why the last summary call failed (None: it did not).")

    @property
    def pending(self) -> bool:
        return self.due > self.through
