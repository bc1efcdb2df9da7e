"""Static analysis of a definition: every loading problem, plus warnings about its design.

:func:`analyze` never raises for a bad file: each finding is a :class:`Diagnostic` with the file's
line:column where there is one. Errors are what the loader reports (the definition does not load).
Warnings are about definitions that load but probably do not do what their author meant:

``unreachable_state``
    no path leads from the initial state to the state.
``no_path_to_terminal``
    a reachable state from which no terminal state can be reached: once there, the conversation never ends.
``self_loop_no_exit``
    a state whose only transitions lead back to itself.
``key_never_set``
    a transition's conditions need a context key that no state on a path to it collects (lists in
    ``required_context_keys`` or names in its ``instructions``/``extraction_instructions``) and that
    code does not set (``handler_only_keys`` and ``_`` keys are code's).
``key_unused``
    a state collects a key (``required_context_keys``) that no condition anywhere reads and no state's
    ``purpose``, ``instructions`` or ``response_instructions`` names.
``ambiguous_priority``
    two transitions of one state, to different targets and with the same priority, can hold together
    (found by searching for a context that satisfies both; see :func:`find_witness`).
``ignored_field``, ``unknown_field``
    the loader's warnings, passed through.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple

from llm_fsm.authoring.condition_solver import condition_keys, find_witness
from llm_fsm.definition import FSMDefinition, State, Transition
from llm_fsm.errors import Problem
from llm_fsm.graph import predecessors, reachable, successors
from llm_fsm.loader import LoadReport, _dotted, _positions, inspect, load_text

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


class Finding(NamedTuple):
    """A warning before it is placed in the file: ``loc`` is a path as a tuple of keys and indices."""

    loc: tuple[str | int, ...]
    code: str
    message: str
    hint: str | None = None


def analyze(source: Source, *, strict: bool = False) -> list[Diagnostic]:
    """Every problem of the definition at ``source`` (a path or a dict): errors first, then warnings.

    ``strict`` makes unknown fields errors, as in :func:`llm_fsm.load`; the design warnings are still
    computed when unknown fields are the only errors.
    """
    text, report = _read(source, strict)
    diagnostics = [_from_problem(p, "error") for p in report.errors]
    diagnostics += [_from_problem(p, "warning") for p in report.warnings]
    definition = report.definition
    if definition is None and strict and all(p.code == "unknown_field" for p in report.errors):
        definition = _read(source, False)[1].definition  # loads once the unknown fields are let through
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
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None, inspect(path, strict=strict)  # the loader words these problems
    try:
        return text, load_text(text, source=str(path), strict=strict)
    except (RecursionError, ValueError) as exc:  # nesting too deep, integers too long for Python
        message = "nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        problem = Problem("", f"invalid JSON: {message}", code="json", source=str(path))
        return text, LoadReport(None, [problem], source=str(path))


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
            "warning", finding.code, _dotted(finding.loc), line, column, finding.message, finding.hint, file
        )


# ---------------------------------------------------------------- the warnings


def find_warnings(definition: FSMDefinition) -> list[Finding]:
    """Every design warning about a loaded definition, in a stable order."""
    graph = _Graph(definition)
    return [
        *_unreachable_states(graph),
        *_self_loops_without_exit(graph),
        *_states_without_path_to_terminal(graph),
        *_keys_never_set(graph),
        *_keys_unused(definition),
        *_ambiguous_priorities(definition),
    ]


class _Graph:
    """The states as a directed graph, with the reachability questions the checks ask."""

    def __init__(self, definition: FSMDefinition) -> None:
        self.definition = definition
        # A fallback state (where failed checks lead) is reached from its state like a transition target.
        self.edges = successors(definition, fallbacks=True)
        self.reverse = predecessors(self.edges)
        self.reachable = reachable([definition.initial_state], self.edges)
        self.finishing = reachable([sid for sid, s in definition.states.items() if s.terminal], self.reverse)

    def self_loop_only(self, sid: str) -> bool:
        return self.edges[sid] == [sid]


def _unreachable_states(graph: _Graph) -> Iterator[Finding]:
    initial = graph.definition.initial_state
    for sid in graph.definition.states:
        if sid not in graph.reachable:
            yield Finding(
                ("states", sid),
                "unreachable_state",
                f"state '{sid}' cannot be reached from the initial state '{initial}'",
                "add a transition to it from a reachable state, or remove it",
            )


def _self_loops_without_exit(graph: _Graph) -> Iterator[Finding]:
    for sid in graph.definition.states:
        if graph.self_loop_only(sid):
            yield Finding(
                ("states", sid, "transitions"),
                "self_loop_no_exit",
                f"state '{sid}' only has transitions back to itself: once entered, it can never be left",
                "add a transition to another state, or remove the transitions to make it terminal",
            )


def _states_without_path_to_terminal(graph: _Graph) -> Iterator[Finding]:
    for sid in graph.definition.states:
        if sid in graph.reachable and sid not in graph.finishing and not graph.self_loop_only(sid):
            yield Finding(
                ("states", sid),
                "no_path_to_terminal",
                f"no path leads from state '{sid}' to a terminal state: a conversation that enters it never ends",
                "add a transition towards a terminal state (a state without transitions)",
            )


# ---------------------------------------------------------------- context keys


def _root(key: str) -> str:
    return key.split(".", 1)[0]


def _mentions(texts: Sequence[str], key: str) -> bool:
    pattern = re.compile(rf"(?<![\w.]){re.escape(key)}(?!\w)")
    return any(pattern.search(text) for text in texts)


def _collects(state: State, key: str) -> bool:
    """Whether ``state`` asks the model for ``key``: it is required there or its instructions name it."""
    texts = (state.instructions, state.extraction_instructions)
    return key in {_root(k) for k in state.required_context_keys} or _mentions(texts, key)


def _keys_never_set(graph: _Graph) -> Iterator[Finding]:
    definition = graph.definition
    by_code = {_root(k) for k in definition.handler_only_keys}
    needed = {key for s in definition.states.values() for t in s.transitions for key, _ in _needed_keys(t)}
    # A key is collected on a path to a state when the state is downstream of a reachable state that
    # collects it: one forward closure per key (linear), not one backward search per state.
    collected = {
        key: reachable([s for s in graph.reachable if _collects(definition.states[s], key)], graph.edges)
        for key in needed
    }
    for sid, state in definition.states.items():
        if sid not in graph.reachable:
            continue
        for i, transition in enumerate(state.transitions):
            for key, loc in _needed_keys(transition):
                if key in by_code or key.startswith("_") or sid in collected[key]:
                    continue
                yield Finding(
                    ("states", sid, "transitions", i, *loc),
                    "key_never_set",
                    f"the transition to '{transition.target_state}' needs '{key}', but no state on a path to "
                    f"'{sid}' collects it and it is not a handler-only key",
                    f"add '{key}' to required_context_keys (or extraction_instructions) of '{sid}' or an earlier "
                    "state, or to handler_only_keys if code sets it",
                )


def _needed_keys(transition: Transition) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """Each root key the transition's conditions need, once, with the location of its first use."""
    seen: set[str] = set()
    for j, condition in enumerate(transition.conditions):
        for k, key in enumerate(condition.requires_context_keys):
            if _root(key) not in seen:
                seen.add(_root(key))
                yield _root(key), ("conditions", j, "requires_context_keys", k)
        for key in condition_keys(condition):
            if _root(key) not in seen:
                seen.add(_root(key))
                yield _root(key), ("conditions", j, "logic")


def _keys_unused(definition: FSMDefinition) -> Iterator[Finding]:
    """Collected keys that no condition reads and no instruction refers to (collecting one is not using it)."""
    read = {
        _root(key)
        for state in definition.states.values()
        for transition in state.transitions
        for condition in transition.conditions
        for key in condition_keys(condition)
    }
    texts = [
        text
        for state in definition.states.values()
        for text in (state.purpose, state.instructions, state.response_instructions)
    ]
    for sid, state in definition.states.items():
        for k, key in enumerate(state.required_context_keys):
            if _root(key) not in read and not _mentions(texts, _root(key)):
                yield Finding(
                    ("states", sid, "required_context_keys", k),
                    "key_unused",
                    f"state '{sid}' collects '{key}', but no condition reads it and no instruction refers to it",
                    "fine if your code uses it; otherwise check it in a condition, refer to it, or stop collecting it",
                )


# ---------------------------------------------------------------- priorities


def _ambiguous_priorities(definition: FSMDefinition) -> Iterator[Finding]:
    for sid, state in definition.states.items():
        for (i, a), (j, b) in itertools.combinations(enumerate(state.transitions), 2):
            if a.priority != b.priority or a.target_state == b.target_state:
                continue
            if not a.conditions and not b.conditions:
                continue  # a choice the model makes from the descriptions alone: nothing to rank
            witness = find_witness([a, b])
            if witness is None:
                continue
            yield Finding(
                ("states", sid, "transitions", j, "priority"),
                "ambiguous_priority",
                f"transitions[{i}] (to '{a.target_state}') and transitions[{j}] (to '{b.target_state}') share "
                f"priority {a.priority} and can both hold, e.g. with context {_compact(witness)}",
                "give the preferred one a lower priority number, or make their conditions exclusive",
            )


def _compact(value: object) -> str:
    return json.dumps(_printable(value), separators=(", ", ": "), ensure_ascii=False, sort_keys=True)


def _printable(value: object) -> object:
    """``value`` with integers too long for Python to print described instead (~N digits)."""
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    return value
