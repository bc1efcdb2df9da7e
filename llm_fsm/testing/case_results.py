"""What running conversation tests gives (see :mod:`llm_fsm.testing.conversation_tests`): each step's and
case's outcome, and the reports made of them: state and transition coverage, JUnit XML, a failure in one line."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from llm_fsm.definition.loader import DefinitionWarning, load
from llm_fsm.definition.models import RETURN, FSMDefinition
from llm_fsm.errors import FSMError
from llm_fsm.turn.runner import TurnResult


@dataclass
class StepOutcome:
    index: int
    user: str | None
    failures: list[str]
    result: TurnResult | None = None
    resume: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    def said(self, limit: int | None = None) -> str:
        """What the step did, for a report line: ``(resume)``, ``(opening)``, or the user's message (quoted)."""
        if self.resume:
            return "(resume)"
        return "(opening)" if self.user is None else repr(self.user[:limit])


@dataclass
class CaseOutcome:
    file: Path
    name: str
    definition: Path
    steps: list[StepOutcome] = field(default_factory=list)
    error: str | None = None
    states: set[str] = field(default_factory=set)
    transitions: set[tuple[str, str]] = field(default_factory=set)
    runs: int = 1
    passes: int = 0

    @property
    def passed(self) -> bool:
        return self.error is None and all(s.passed for s in self.steps)


@dataclass(frozen=True)
class Coverage:
    definition: Path
    states: frozenset[str]
    covered_states: frozenset[str]
    transitions: frozenset[tuple[str, str]]
    covered_transitions: frozenset[tuple[str, str]]


ANYWHERE = "*"  # the source of a global transition, in coverage: it is covered once taken from any state


def _edge(definition: FSMDefinition, move: tuple[str, str]) -> tuple[str, str]:
    """The transition a move between two states took: the state's own to that state, else a global one
    to it, else one going back (``"$return"``)."""
    source, target = move
    if source not in definition.states:
        return move
    own = {t.target_state for t in definition.states[source].transitions}
    anywhere = {g.target_state for g in definition.global_moves(source)}
    if target in own:
        return move
    if target in anywhere:
        return (ANYWHERE, target)
    if RETURN in own:
        return (source, RETURN)
    return (ANYWHERE, RETURN) if RETURN in anywhere else move


def coverage(outcomes: Iterable[CaseOutcome]) -> list[Coverage]:
    """State and transition coverage of each definition by the cases that ran it."""
    by_definition: dict[Path, list[CaseOutcome]] = {}
    for outcome in outcomes:
        if outcome.definition.suffix == ".json" and outcome.name != "(file)":
            by_definition.setdefault(outcome.definition, []).append(outcome)
    report = []
    for path, cases in sorted(by_definition.items()):
        try:
            with warnings.catch_warnings():  # its warnings were issued when its cases loaded it
                warnings.simplefilter("ignore", DefinitionWarning)
                definition = load(path)
        except FSMError:
            continue
        edges = {(sid, t.target_state) for sid, s in definition.states.items() for t in s.transitions}
        edges |= {(ANYWHERE, g.target_state) for g in definition.global_transitions}  # each counted once
        states = frozenset().union(*(c.states for c in cases)) & set(definition.states)
        taken = frozenset(_edge(definition, move) for move in frozenset().union(*(c.transitions for c in cases)))
        taken &= edges
        report.append(
            Coverage(path, frozenset(definition.states), frozenset(states), frozenset(edges), frozenset(taken))
        )
    return report


def junit_xml(outcomes: list[CaseOutcome]) -> str:
    """The outcomes as JUnit XML, one test case per case, one suite per file."""
    from xml.sax.saxutils import escape, quoteattr

    lines = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>"]
    files: dict[Path, list[CaseOutcome]] = {}
    for outcome in outcomes:
        files.setdefault(outcome.file, []).append(outcome)
    for path, cases in files.items():
        failed = sum(not c.passed for c in cases)
        lines.append(f'  <testsuite name={quoteattr(str(path))} tests="{len(cases)}" failures="{failed}">')
        for case in cases:
            lines.append(f"    <testcase classname={quoteattr(path.stem)} name={quoteattr(case.name)}>")
            if not case.passed:
                message = failure_text(case)
                lines.append(f"      <failure message={quoteattr(message.splitlines()[0])}>{escape(message)}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def failure_text(case: CaseOutcome) -> str:
    if case.error:
        return case.error
    step = next(s for s in case.steps if not s.passed)
    return f"step {step.index + 1} {step.said()}: " + "; ".join(step.failures)
