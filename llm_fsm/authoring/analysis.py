"""Static analysis of a definition: every loading problem, plus warnings about its design.

:func:`analyze` never raises for a bad file: each finding is a :class:`Diagnostic` with the file's
line:column where there is one. Errors are what the loader reports (the definition does not load).
Warnings are about definitions that load but probably do not do what their author meant:

``condition_never_holds``
    a transition can never be taken: a part of its conditions reads no context and is false
    (``1 == 2``), its bounds on a key contradict each other (``guests > 6`` and ``guests < 1``, within
    one rule or across conditions), or no value the ``context_schema`` allows satisfies it (an
    ``enum`` value misspelt, a strict comparison with a constant of another ``type``).
    See :mod:`llm_fsm.authoring.requirements`.
``type_mismatch``
    a condition compares a key with a constant of a type the key's ``context_schema`` does not give it
    (a number with a string key: it holds only for strings that spell numbers).
``unreachable_state``
    no path leads from the initial state to the state, or every path takes a transition that can never
    be taken. Global transitions are edges from every state they apply in; ``"$return"`` reaches nothing
    new (it goes back to a state visited before).
``no_path_to_terminal``
    a reachable state from which no terminal state can be reached: once there, the conversation never
    ends. A state that goes back (``"$return"``) can end where it goes back to: it is reported only when
    a state it is entered from cannot end either (see :func:`llm_fsm.definition.graph.stuck`).
``self_loop_no_exit``
    a state whose own transitions only lead back to itself (the global moves that still lead out are named).
``ends_only_by_global_move``
    a reachable state from which no path of the states' own transitions reaches a terminal state: only a
    global move (cancel, a person) ends the conversation there, so a dead end cannot hide behind them.
``nowhere_to_return``
    the initial state has a ``"$return"`` transition: a conversation starts there with nowhere to go back to.
``state_never_left``
    a reachable state none of whose own transitions to other states can ever be taken: each never holds, or
    needs a key that the model may not write there (``writable_keys``, ``handler_only_keys``) and that
    no handler named there, nor any state on the way to it, can set. Each transition is named
    (``transitions[1]``) and the hint follows the causes found.
``key_never_set``
    a transition's conditions need a context key that no state on a path to it collects (lists in
    ``required_context_keys`` or ``writable_keys``, or names in its ``instructions``/``extraction_instructions``)
    and that code does not set (``handler_only_keys`` and ``_`` keys are code's).
``key_not_writable``
    a state asks the model to collect a key (``required_context_keys``) that the model may not write
    there: its explicit ``writable_keys`` leave it out, it is a handler-only key, or it starts with ``_``.
``writable_key_refused``
    a state's ``writable_keys`` lists a key the runtime refuses anyway (a handler-only key, or a ``_``
    key other than ``_extra``): a contradiction.
``key_unused``
    a state collects a key (``required_context_keys``) that no condition anywhere reads and no state's
    ``purpose``, ``instructions`` or ``response_instructions`` names.
``ambiguous_priority``
    two transitions of one state, to different targets and with the same priority, can hold together
    (found by searching for a context that satisfies both with values the ``context_schema`` allows;
    see :func:`find_witness`). Priority does not
    choose between them at run time: the model names a ``target_state``, and the move is accepted when
    any transition to that target has conditions that hold. Priority orders the transitions in the
    prompt (lowest number first, each shown with its number) and, among transitions to the chosen
    target, which one's unmet condition the rejection quotes.
``opening_not_initial``
    a state other than the initial one has an ``opening``: a conversation opens there only when it is
    started there (``Conversation(state=...)``, ``--state``); a move into the state never shows it.
``opening_needs_context``
    a state's ``opening`` reads a context key (``{{ name }}``) without a default: a conversation that opens
    there fails unless its initial context holds the key (only an initial context is set at the opening).
``opening_fails``
    a state's ``opening`` cannot be written even with the keys it reads: the sandbox refuses it (a loop over
    more than 1,000 items, a repetition or a text over 4,000 characters, an exponent over 64), it includes a
    template, or it writes nothing a user could read.
``state_passed_through``
    a state whose first automatic move (by priority) has no conditions: the runtime takes it as soon as a step
    ends there, so the state never acts nor is talked in (see :mod:`llm_fsm.authoring.workflow_warnings`).
``automatic_cycle_may_loop``
    a cycle of automatic moves with conditions, with nothing on the way round to change what they read (no
    move clears a key they read, no state has handlers or runs a subflow): entered with its conditions
    holding, a run loops until ``max_run_steps`` (see :mod:`llm_fsm.authoring.automatic_loops`).
``ignored_field``, ``unknown_field``, ``mapped_field``
    the loader's warnings, passed through.

Each check grows about linearly with the size of the definition (``benchmarks/bench_validate.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from llm_fsm.authoring.automatic_loops import cycles_that_may_loop
from llm_fsm.authoring.graph_checks import (
    conditions_never_holding,
    returns_at_start,
    self_loops_without_exit,
    states_ending_only_by_global_moves,
    states_never_left,
    states_without_path_to_terminal,
    type_mismatches,
    unreachable_states,
)
from llm_fsm.authoring.key_checks import Words as _Words  # noqa: F401 (the name the tests count its scans by)
from llm_fsm.authoring.key_checks import keys_never_set, keys_not_writable, keys_unused, writable_keys_refused
from llm_fsm.authoring.priority_checks import ambiguous_priorities
from llm_fsm.authoring.review import Finding, Review
from llm_fsm.authoring.workflow_warnings import states_passed_through
from llm_fsm.definition.json_problems import positions as _positions
from llm_fsm.definition.loader import LoadReport, dotted, inspect, load_text
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import Problem
from llm_fsm.named_files import read_bytes

__all__ = ["Diagnostic", "Finding", "Locator", "analyze", "analyze_text", "find_warnings"]

Severity = Literal["error", "warning"]
Source = str | os.PathLike[str] | Mapping[str, Any]


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a definition file: what, where (path and line:column) and how to fix it."""

    severity: Severity
    code: str
    path: str
    line: int | None
    column: int | None
    message: str
    hint: str | None = None
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        keys = ("severity", "code", "file", "path", "line", "column", "message", "hint")
        return {key: getattr(self, key) for key in keys}

    def __str__(self) -> str:
        where = self.file or ""
        if self.line is not None:
            where = f"{where}:{self.line}:{self.column}"
        head = f"{where}: " if where else ""
        path = f"{self.path}: " if self.path else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{head}{self.severity}[{self.code}] {path}{self.message}{hint}"


def analyze(source: Source, *, strict: bool = False) -> list[Diagnostic]:
    """Every problem of the definition at ``source`` (a path or a dict): errors first, then warnings.

    ``strict`` makes unknown fields errors, as in :func:`llm_fsm.load`; the design warnings are still
    computed when unknown fields are the only errors.
    """
    return _diagnostics(lambda strict: _read(source, strict), strict)


def analyze_text(text: str, *, source: str | None = None, strict: bool = False) -> list[Diagnostic]:
    """:func:`analyze` of a definition's ``text`` as if it were the file ``source`` (which need not exist):
    the same findings, with line:column in ``text`` and ``source`` as their file, and relative subflow
    paths resolved from its folder. ``llm-fsm edit`` checks the text a save would write before writing it.
    A leading byte order mark is skipped, as reading the file would skip it."""
    text = text.removeprefix("\ufeff")
    return _diagnostics(lambda strict: _read_text(text, source, strict), strict)


def _diagnostics(read: Callable[[bool], tuple[str | None, LoadReport]], strict: bool) -> list[Diagnostic]:
    """Errors first, then warnings, of what ``read(strict)`` gives (the text and the loader's report on it)."""
    text, report = read(strict)
    diagnostics = [_from_problem(p, "error") for p in report.errors]
    diagnostics += [_from_problem(p, "warning") for p in report.warnings]
    definition = report.definition
    if definition is None and strict and all(p.code == "unknown_field" for p in report.errors):
        definition = read(False)[1].definition  # loads once the unknown fields are let through
    if definition is not None:
        locator = Locator(text, definition)
        diagnostics += [locator.diagnostic(f, report.source) for f in find_warnings(definition)]
    return diagnostics


def _read(source: Source, strict: bool) -> tuple[str | None, LoadReport]:
    """The file's text (None for a dict or an unreadable file) and the loader's report on it."""
    if isinstance(source, Mapping):
        return None, inspect(source, strict=strict)
    path = Path(source)
    try:
        text = read_bytes(path, "definition").decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None, inspect(path, strict=strict)  # the loader words these problems
    return _read_text(text, str(path), strict)


def _read_text(text: str, source: str | None, strict: bool) -> tuple[str, LoadReport]:
    try:
        return text, load_text(text, source=source, strict=strict)
    except (RecursionError, ValueError) as exc:  # nesting too deep, integers too long for Python
        message = "nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        problem = Problem("", f"invalid JSON: {message}", code="json", source=source)
        return text, LoadReport(None, [problem], source=source)


def _from_problem(problem: Problem, severity: Severity) -> Diagnostic:
    p = problem
    return Diagnostic(severity, p.code, p.path, p.line, p.column, p.message, p.hint, p.source)


class Locator:
    """Maps a location in a definition, ``("states", "greet", "transitions", 0)``, to line:column in its text.

    A location that is not in the text (a defaulted field) maps to its closest enclosing value.
    """

    def __init__(self, text: str | None, definition: FSMDefinition) -> None:
        self._text = text
        self._definition = definition

    @cached_property
    def _positions(self) -> dict[str, tuple[int, int]]:
        return _positions(self._text) if self._text is not None else {}

    @cached_property
    def _state_index(self) -> dict[str, str]:
        """State id → list index when ``states`` is written as a list (ids are never digits)."""
        if "/states/0" not in self._positions:
            return {}
        return {sid: str(i) for i, sid in enumerate(self._definition.states)}

    def position(self, loc: Sequence[str | int]) -> tuple[int | None, int | None]:
        parts = [str(p) for p in loc]
        if len(parts) >= 2 and parts[0] == "states":
            parts[1] = self._state_index.get(parts[1], parts[1])
        pointer = "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)
        while pointer and pointer not in self._positions:
            pointer = pointer.rsplit("/", 1)[0]
        return self._positions.get(pointer, (None, None))

    def diagnostic(self, finding: Finding, file: str | None) -> Diagnostic:
        line, column = self.position(finding.loc)
        return Diagnostic(
            "warning", finding.code, dotted(finding.loc), line, column, finding.message, finding.hint, file
        )


# The checks live in modules by concern: graph_checks, key_checks, priority_checks (and review, what they share).


def find_warnings(definition: FSMDefinition) -> list[Finding]:
    """Every design warning about a loaded definition, in a stable order."""
    review = Review(definition)
    return [
        *conditions_never_holding(review),
        *type_mismatches(review),
        *unreachable_states(review),
        *self_loops_without_exit(review),
        *states_never_left(review),
        *states_without_path_to_terminal(review),
        *states_ending_only_by_global_moves(review),
        *returns_at_start(review),
        *keys_never_set(review),
        *keys_unused(definition),
        *keys_not_writable(definition),
        *writable_keys_refused(definition),
        *ambiguous_priorities(review),
        *_tools_unused(definition),
        *_openings(definition),
        *states_passed_through(definition),
        *cycles_that_may_loop(definition),
    ]


def _tools_unused(definition: FSMDefinition) -> Iterator[Finding]:
    listed = {name for state in definition.states.values() for name in state.tools}
    for name in definition.tools:
        if name not in listed:
            yield Finding(
                ("tools", name),
                "tool_unused",
                f"tool '{name}' is declared, but no state lists it in its tools: the model can never call it",
                f'add "{name}" to the tools of the states where the model may call it, or remove it',
            )


def _openings(definition: FSMDefinition) -> Iterator[Finding]:
    from llm_fsm.definition.opening import missing_keys, opening_failure

    for sid, state in definition.states.items():
        if state.opening is None:
            continue
        if sid != definition.initial_state:
            yield Finding(
                ("states", sid, "opening"),
                "opening_not_initial",
                f"state '{sid}' has an opening, but it is not the initial state: the opening is shown only by a "
                "conversation started there, never on a move into it",
                "move the opening to the initial state, or start conversations there (state=..., --state)",
            )
        # only the initial context is set when a conversation opens: written over none, what is missing?
        missing = missing_keys(state.opening, {})
        if missing is None and (failure := opening_failure(state.opening)) is not None:
            yield Finding(
                ("states", sid, "opening"),
                "opening_fails",
                f"the opening of state '{sid}' cannot be written: {failure}",
                "keep an opening to one short message: no includes, small loops, no huge values",
            )
        if missing is not None:
            yield Finding(
                ("states", sid, "opening"),
                "opening_needs_context",
                f"the opening of state '{sid}' fails unless the initial context holds what it reads ({missing})",
                "pass the key in the initial context (context=..., --context), or give it a default: "
                "{{ name | default('there') }}",
            )
