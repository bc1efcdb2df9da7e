"""What a turn found in the replies it read, owned in one place (:class:`Judged`, ``Working.judged``).

Every problem is recorded here as it is found, by whoever finds it (the reply's parse, the move's decision, a
refused ``memory_update``, a check, a tool that failed, the call that writes an entered state's message), in the
order found: the turn's result reports them all. Of the last reply read it keeps the decision and the
``memory_update``: the fallback keeps that reply's valid updates, and the reply the turn settles on applies its
memory update at the commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llm_fsm.snapshot import Rejection
from llm_fsm.turn.engine import Decision

REFINED = frozenset({"check", "context_value"})  # what a state's max_retries refines (the rest is corrected)


class Judged:
    """The problems a turn found, and the last reply it read."""

    def __init__(self) -> None:
        self.problems: list[Rejection] = []
        self.decision: Decision | None = None  # the last reply's
        self.memory_update: dict[str, Any] = {}  # the last reply's

    def found(self, problems: Iterable[Rejection]) -> None:
        """Record ``problems``, in the order found."""
        self.problems.extend(problems)

    def read(self, decision: Decision, memory_update: dict[str, Any]) -> None:
        """The last reply read: its ``decision`` and its ``memory_update``."""
        self.decision, self.memory_update = decision, memory_update

    def refused_targets(self) -> set[str]:
        """The states this turn refused a move to (its conditions failed, or it was no move of the state)."""
        return {r.target_state for r in self.problems if r.kind in ("condition", "target") and r.target_state}

    def refinements(self) -> tuple[Rejection, ...]:
        """The problems a state's retries refine: failed checks, and values a schema refuses."""
        return tuple(r for r in self.problems if r.kind in REFINED)

    def kept_updates(self) -> dict[str, Any]:
        """The last reply's updates that stand where no reply was accepted: those no check refused, and not the
        ``clear_keys`` of a move that was not made."""
        last = self.decision
        refused = {r.key for r in self.problems if r.kind == "check" and r.key} | set(last.cleared if last else ())
        return {k: v for k, v in (last.applied if last else {}).items() if k not in refused}
