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
    a state it is entered from cannot end either (see :func:`llm_fsm.graph.stuck`).
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
``ignored_field``, ``unknown_field``
    the loader's warnings, passed through.

Each check grows about linearly with the size of the definition (``benchmarks/bench_validate.py``).
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple

from llm_fsm.authoring.condition_solver import condition_keys, find_witness
from llm_fsm.authoring.requirements import Requirements, requirements
from llm_fsm.definition import RETURN, FSMDefinition, State, Subflow, Transition
from llm_fsm.engine import EXTRA_KEY, model_writable_keys
from llm_fsm.errors import Problem
from llm_fsm.graph import GLOBAL, carry, predecessors, reachable, stuck, successors
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
    review = _Review(definition)
    return [
        *_conditions_never_holding(review),
        *_type_mismatches(review),
        *_unreachable_states(review),
        *_self_loops_without_exit(review),
        *_states_never_left(review),
        *_states_without_path_to_terminal(review),
        *_states_ending_only_by_global_moves(review),
        *_returns_at_start(review),
        *_keys_never_set(review),
        *_keys_unused(definition),
        *_keys_not_writable(definition),
        *_writable_keys_refused(definition),
        *_ambiguous_priorities(review),
        *_tools_unused(definition),
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


def tool_keys(definition: FSMDefinition, state: State) -> set[str]:
    """The context keys the tools ``state`` lists store their results under."""
    tools = definition.tools
    return {key for name in state.tools if name in tools and (key := tools[name].result_key)}


Place = tuple[str, int]  # a transition: (state id, index in the state's transitions)


class _Review:
    """What the checks share: each transition's requirements, the transitions that can never be taken
    (``dead``), and the states as a graph whose edges are the transitions that can (and fallbacks)."""

    def __init__(self, definition: FSMDefinition) -> None:
        self.definition = definition
        schema = definition.context_schema
        self.requirements = {
            (sid, i): requirements(transition, schema)
            for sid, state in definition.states.items()
            for i, transition in enumerate(state.transitions)
        }
        self.requirements.update(
            {(GLOBAL, j): requirements(move, schema) for j, move in enumerate(definition.global_transitions)}
        )
        self.dead = {place for place, found in self.requirements.items() if found.never}
        # A fallback state (where failed checks lead) is reached from its state like a transition target;
        # a global transition from each state it applies in.
        self.edges = successors(definition, fallbacks=True, skip=self.dead)
        self.reachable = reachable([definition.initial_state], self.edges)

    @cached_property
    def stuck(self) -> dict[str, list[tuple[str, str | None]]]:
        """Reachable states where some conversation can no longer end, with the ways in that doom it."""
        returning = {sid for sid in self.definition.states if self.live_return(sid)}
        return stuck(self.edges, self.terminals, returning, self.definition.initial_state, self.reachable)

    def live_return(self, sid: str) -> bool:
        """Whether ``sid`` has a ``"$return"`` move that can be taken (its own or a global one)."""
        return any(
            transition.target_state == RETURN and place not in self.dead for place, transition in self.moves(sid)
        )

    def moves(self, sid: str) -> Iterator[tuple[Place, Transition]]:
        """The transitions of ``sid`` and the global ones that apply there, each with its place."""
        for i, transition in enumerate(self.definition.states[sid].transitions):
            yield (sid, i), transition
        for j in self.definition.global_indices(sid):
            yield (GLOBAL, j), self.definition.global_transitions[j]

    @cached_property
    def applying_somewhere(self) -> set[int]:
        """The positions of the global transitions that apply in a reachable state."""
        return {j for sid in self.reachable for j in self.definition.global_indices(sid)}

    def transition_at(self, place: Place) -> Transition:
        sid, i = place
        return self.definition.global_transitions[i] if sid == GLOBAL else self.definition.states[sid].transitions[i]

    def global_exits(self, sid: str) -> list[str]:
        """The targets of the global moves that can take the conversation out of ``sid``."""
        return list(
            dict.fromkeys(
                t.target_state for place, t in self.moves(sid) if place[0] == GLOBAL and place not in self.dead
            )
        )

    @cached_property
    def global_endings(self) -> str:
        """The global transitions that can be taken to a state that ends by its own transitions, in words:
        ``to 'cancelled', 'human'``."""
        moves = self.definition.global_transitions
        live = [m.target_state for j, m in enumerate(moves) if (GLOBAL, j) not in self.dead]
        targets = dict.fromkeys(t for t in live if t in self.own_finishing) or dict.fromkeys(live)
        return "to " + ", ".join(f"'{t}'" if t != RETURN else f'"{t}"' for t in targets)

    @cached_property
    def own_finishing(self) -> set[str]:
        """The states a path of their own transitions (and fallbacks) leads from to a terminal state."""
        edges = successors(self.definition, fallbacks=True, skip=self.dead, global_moves=False)
        return reachable(self.terminals, predecessors(edges))

    @cached_property
    def terminals(self) -> list[str]:
        return [sid for sid, state in self.definition.states.items() if state.terminal]

    @cached_property
    def declared(self) -> dict[str, list[str]]:
        """The edges when every transition counts, dead ones included."""
        return successors(self.definition, fallbacks=True)

    @cached_property
    def declared_reachable(self) -> set[str]:
        return reachable([self.definition.initial_state], self.declared)

    @cached_property
    def declared_finishing(self) -> set[str]:
        return reachable(self.terminals, predecessors(self.declared))

    @cached_property
    def never_left(self) -> dict[str, list[tuple[str, str]]]:
        """Reachable states none of whose transitions to another state can be taken, with the reasons."""
        return _exits_closed(self)

    def self_loop_only(self, sid: str) -> bool:
        """Whether every transition of the state's own (and its fallback) leads back to it."""
        state = self.definition.states[sid]
        return (
            bool(state.transitions)
            and all(t.target_state == sid for t in state.transitions)
            and (state.fallback_state in (None, sid))
        )

    def transitions(self, sid: str) -> Iterator[tuple[int, Transition, Requirements]]:
        for i, transition in enumerate(self.definition.states[sid].transitions):
            yield i, transition, self.requirements[(sid, i)]

    def missing_on_the_way(
        self, needs: Mapping[str, Collection[str]], provides: Mapping[str, Collection[str]]
    ) -> dict[str, set[str]]:
        """For each state of ``needs``, the keys it needs that no state on a path to it from a reachable
        state (itself included) provides: one pass over the graph for all keys, the keys as bits."""
        names = list(dict.fromkeys(key for keys in needs.values() for key in keys))
        position = {key: n for n, key in enumerate(names)}

        def bits(keys: Iterable[str]) -> int:
            mask = 0
            for key in keys:
                if (n := position.get(key)) is not None:
                    mask |= 1 << n
            return mask

        marks = {sid: bits(keys) for sid, keys in provides.items() if sid in self.reachable}
        missing = {}
        for component, union in carry(marks, self.edges):
            for sid in component:
                if lacking := bits(needs.get(sid, ())) & ~union:
                    missing[sid] = {names[n] for n in _ones(lacking)}
        return missing


def _ones(bits: int) -> Iterator[int]:
    """The positions of the bits set in ``bits``."""
    while bits:
        lowest = bits & -bits
        yield lowest.bit_length() - 1
        bits ^= lowest


# ---------------------------------------------------------------- conditions


def _transition_loc(sid: str, i: int, loc: tuple[str | int, ...] = ()) -> tuple[str | int, ...]:
    if sid == GLOBAL:
        return ("global_transitions", i, *loc)
    return ("states", sid, "transitions", i, *loc)


def _conditions_never_holding(review: _Review) -> Iterator[Finding]:
    for (sid, i), found in review.requirements.items():
        target = review.transition_at((sid, i)).target_state
        which = (
            f"the global transition to '{target}'" if sid == GLOBAL else f"the transition from '{sid}' to '{target}'"
        )
        for reason in found.never:
            yield Finding(
                _transition_loc(sid, i, reason.loc),
                "condition_never_holds",
                f"{reason.message}: {which} can never be taken",
                reason.hint or "fix the condition, or remove the transition",
            )


def _type_mismatches(review: _Review) -> Iterator[Finding]:
    for (sid, i), found in review.requirements.items():
        for reason in found.mismatches:
            yield Finding(_transition_loc(sid, i, reason.loc), "type_mismatch", reason.message, reason.hint)


# ---------------------------------------------------------------- the graph


def _unreachable_states(review: _Review) -> Iterator[Finding]:
    initial = review.definition.initial_state
    dead_into: dict[str, list[Place]] = {}  # state -> the dead transitions to it from reachable states
    for place in review.requirements:  # in the file's order: the states' transitions, then the global ones
        if place in review.dead and (
            place[0] in review.reachable or (place[0] == GLOBAL and place[1] in review.applying_somewhere)
        ):
            dead_into.setdefault(review.transition_at(place).target_state, []).append(place)
    for sid in review.definition.states:
        if sid in review.reachable:
            continue
        message = f"state '{sid}' cannot be reached from the initial state '{initial}'"
        hint = "add a transition to it from a reachable state, or remove it"
        if sid in review.declared_reachable:
            message += ": every path to it takes a transition that can never be taken"
            if sid in dead_into:
                message += " (" + ", ".join(_dotted(_transition_loc(*place)) for place in dead_into[sid][:3]) + ")"
            hint = "fix the conditions that can never hold (see condition_never_holds)"
        yield Finding(("states", sid), "unreachable_state", message, hint)


def _self_loops_without_exit(review: _Review) -> Iterator[Finding]:
    for sid in review.definition.states:
        if review.self_loop_only(sid):
            left = _only_by(review.global_exits(sid)) or "it can never be left"
            yield Finding(
                ("states", sid, "transitions"),
                "self_loop_no_exit",
                f"state '{sid}' only has transitions back to itself: once entered, {left}",
                "add a transition to another state, or remove the transitions to make it terminal",
            )


def _only_by(targets: Sequence[str]) -> str:
    """How a state whose own transitions never lead out is still left: by its global moves (or "")."""
    if not targets:
        return ""
    listed = ", ".join(f"'{t}'" if t != RETURN else f'"{RETURN}"' for t in targets)
    return f"it can be left only by the global transitions (to {listed})"


def _states_never_left(review: _Review) -> Iterator[Finding]:
    for sid, reasons in review.never_left.items():
        texts = [text for _, text in reasons]
        listed = "; ".join(texts[:3]) + (f"; and {len(texts) - 3} more" if len(texts) > 3 else "")
        causes = dict.fromkeys(cause for cause, _ in reasons)
        hint = "; ".join(_NEVER_LEFT_HINTS[cause] for cause in causes)
        if causes.keys() - {"never_holds"}:  # a key the model cannot set: code might
            hint += "; code that sets the key with update_context can ignore this"
        left = "can never be left"
        if by := _only_by(review.global_exits(sid)):
            left = f"can never be left by its own transitions ({by.removeprefix('it ')})"
        yield Finding(("states", sid, "transitions"), "state_never_left", f"state '{sid}' {left}: {listed}", hint)


# What to do about each cause of a state that is never left.
_NEVER_LEFT_HINTS = {
    "never_holds": "fix the conditions that never hold (see condition_never_holds), or add a transition that can "
    "be taken",
    "not_writable": "let the model write the key here or on the way (writable_keys)",
    "handler_only": "name the handler that sets the key in this state's handlers (or a state's on the way)",
}


def _exits_closed(review: _Review) -> dict[str, list[tuple[str, str]]]:
    """Reachable states none of whose transitions to another state can be taken, each with the reasons,
    as (cause, words): each never holds, or needs a key that cannot be written there or on the way to it."""
    definition = review.definition
    by_code = frozenset(definition.code_only_keys)
    needs = {
        sid: {key for _, _, found in review.transitions(sid) for key, _ in found.needed if not key.startswith("_")}
        for sid in review.reachable
    }

    def writable(sid: str) -> set[str]:
        state = definition.states[sid]
        keys = (set(model_writable_keys(definition, sid)) - by_code) | tool_keys(definition, state)
        return keys | by_code if state.handlers else keys

    missing = review.missing_on_the_way(needs, {sid: writable(sid) for sid in review.reachable})
    closed = {}
    for sid, state in definition.states.items():
        if sid not in review.reachable or state.fallback_state not in (None, sid):
            continue
        reasons = []
        for i, transition, found in review.transitions(sid):
            if transition.target_state == sid:
                continue
            unset = [key for key, _ in found.needed if key in missing.get(sid, ())]
            name = f"transitions[{i}] (to '{transition.target_state}')"
            if (sid, i) in review.dead:
                reasons.append(("never_holds", f"the conditions of {name} never hold"))
            elif unset:
                reasons.append(_unwritable(name, unset[0], by_code, sid))
            else:
                break
        else:
            if reasons:
                closed[sid] = reasons
    return closed


def _unwritable(name: str, key: str, by_code: Collection[str], sid: str) -> tuple[str, str]:
    if key in by_code:
        why = f"a handler-only key, and no handler is named in '{sid}' or in a state on the way to it"
        return "handler_only", f"{name} needs '{key}', {why}"
    why = f"not writable by the model in '{sid}' (writable_keys) nor in a state on the way to it"
    return "not_writable", f"{name} needs '{key}', {why}"


def _states_without_path_to_terminal(review: _Review) -> Iterator[Finding]:
    for sid in review.definition.states:
        ways_in = review.stuck.get(sid)
        if ways_in is None or sid in review.never_left or review.self_loop_only(sid):
            continue
        back = sorted({came for entered, came in ways_in if came is not None and review.live_return(entered)})
        if back:  # it ends only by going back, and where it came from does not end either
            places = ", ".join(f"'{came}'" for came in back[:3]) + (" ..." if len(back) > 3 else "")
            message = (
                f"no path leads from state '{sid}' to a terminal state when the conversation comes from {places}: "
                f'going back ("{RETURN}") leads there, and no path leads from there to one either'
            )
        else:
            message = f"no path leads from state '{sid}' to a terminal state: a conversation that enters it never ends"
        if sid in review.declared_finishing:
            message += " (every path to one takes a transition that can never be taken)"
        yield Finding(
            ("states", sid),
            "no_path_to_terminal",
            message,
            "add a transition towards a terminal state (a state without transitions)",
        )


def _states_ending_only_by_global_moves(review: _Review) -> Iterator[Finding]:
    """States whose own transitions never lead to an end: only a global move (cancel...) ends the
    conversation there. A state that goes back ("$return") ends where it goes back to: not judged here."""
    for sid, state in review.definition.states.items():
        if (
            sid not in review.reachable
            or state.terminal
            or sid in review.own_finishing
            or sid in review.stuck
            or sid in review.never_left
            or review.self_loop_only(sid)
            or any(t.target_state == RETURN for t in state.transitions)
        ):
            continue
        yield Finding(
            ("states", sid),
            "ends_only_by_global_move",
            f"no path of the states' own transitions leads from state '{sid}' to a terminal state: only the global "
            f"transitions ({review.global_endings}) end a conversation that enters it",
            "add a transition towards a terminal state; fine if only a global move is meant to end the conversation "
            "from here",
        )


def _returns_at_start(review: _Review) -> Iterator[Finding]:
    initial = review.definition.initial_state
    for i, transition in enumerate(review.definition.states[initial].transitions):
        if transition.target_state == RETURN:
            yield Finding(
                ("states", initial, "transitions", i, "target_state"),
                "nowhere_to_return",
                f"the initial state '{initial}' goes back (\"{RETURN}\"), but a conversation starts there with "
                "nowhere to go back to: the move is not offered until it came back from another state",
                "lead to a state by its id, or start the conversation elsewhere",
            )


# ---------------------------------------------------------------- context keys


def _root(key: str) -> str:
    return key.split(".", 1)[0]


_WORD = re.compile(r"(?<![\w.])\w+")  # a whole word, not after a dot (not the tail of a dotted path)


class _Words:
    """What some texts mention: ``key in words`` when a text has the key as a whole word, not after a dot.

    Words are collected once; a key that is not a single word is looked for in the texts themselves.
    """

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = [text for text in texts if text]
        self.words = {match.group() for text in self.texts for match in _WORD.finditer(text)}

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if _word(key):
            return key in self.words
        pattern = re.compile(rf"(?<![\w.]){re.escape(key)}(?!\w)")
        return any(pattern.search(text) for text in self.texts)

    def among(self, words: set[str], others: Collection[str]) -> set[str]:
        """Which keys the texts mention, of ``words`` (single words) and ``others``."""
        return (self.words & words) | {key for key in others if key in self}


def _word(key: str) -> bool:
    return re.fullmatch(r"\w+", key) is not None


def _collected(state: State, words: set[str], others: Collection[str]) -> set[str]:
    """Which keys ``state`` asks the model for: those it requires or lists in ``writable_keys``, and of
    ``words`` (single words) and ``others``, those its instructions name."""
    texts = _Words([state.instructions, state.extraction_instructions])
    listed = {_root(k) for k in (*state.required_context_keys, *(state.writable_keys or ()))}
    return listed | texts.among(words, others)


def _keys_never_set(review: _Review) -> Iterator[Finding]:
    definition = review.definition
    by_code = {_root(k) for k in definition.code_only_keys}
    uses = {
        (sid, i): [
            (key, loc) for key, loc in _needed_keys(transition) if key not in by_code and not key.startswith("_")
        ]
        for sid, state in definition.states.items()
        if sid in review.reachable
        for i, transition in enumerate(state.transitions)
        if (sid, i) not in review.dead
    }
    needs: dict[str, set[str]] = {}
    for (sid, _), keys in uses.items():
        needs.setdefault(sid, set()).update(key for key, _ in keys)
    wanted = {key for keys in needs.values() for key in keys}
    words = {key for key in wanted if _word(key)}
    others = wanted - words
    collected = {
        sid: _collected(definition.states[sid], words, others)
        | tool_keys(definition, definition.states[sid])
        | set(_subflow(definition.states[sid]).output)  # a sub-conversation's results (llm_fsm.subflows)
        for sid in review.reachable
    }
    # A key is collected on a path to a state when a reachable state upstream (or the state) collects it.
    missing = review.missing_on_the_way(needs, collected)
    for (sid, i), keys in uses.items():
        target = definition.states[sid].transitions[i].target_state
        for key, loc in keys:
            if key in missing.get(sid, ()):
                yield Finding(
                    _transition_loc(sid, i, loc),
                    "key_never_set",
                    f"the transition to '{target}' needs '{key}', but no state on a path to "
                    f"'{sid}' collects it and it is not a handler-only key",
                    f"add '{key}' to required_context_keys (or extraction_instructions) of '{sid}' or an earlier "
                    "state, or to handler_only_keys if code sets it",
                )


def _keys_not_writable(definition: FSMDefinition) -> Iterator[Finding]:
    """Keys a state asks the model to collect that the model may not write there: never collected."""
    by_code = set(definition.handler_only_keys)
    for sid, state in definition.states.items():
        writable = model_writable_keys(definition, sid)
        for k, key in enumerate(state.required_context_keys):
            why, hint = _why_not_writable(key, by_code, writable if state.writable_keys is not None else None)
            if why:
                yield Finding(
                    ("states", sid, "required_context_keys", k),
                    "key_not_writable",
                    f"state '{sid}' asks the model to collect '{key}', but {why}: it is never collected here",
                    hint.format(key=key, sid=sid),
                )


def _why_not_writable(key: str, by_code: Collection[str], writable: Collection[str] | None) -> tuple[str, str]:
    """Why the model may not write ``key`` (and what to do), or ``("", "")`` when it may."""
    if key.startswith("_") and _root(key) != EXTRA_KEY:
        return (
            "keys starting with '_' are the runtime's",
            "rename it without the leading '_' (only '_extra' is the model's)",
        )
    if key in by_code or _root(key) in by_code:
        return (
            "it is a handler-only key (handler_only_keys)",
            "remove '{key}' from required_context_keys if code sets it, or from handler_only_keys if the model may",
        )
    if writable is not None and _root(key) not in writable:
        return (
            "the state's writable_keys leave it out",
            "add '{key}' to writable_keys of '{sid}', or remove it from required_context_keys",
        )
    return "", ""


def _writable_keys_refused(definition: FSMDefinition) -> Iterator[Finding]:
    """Keys listed in a state's ``writable_keys`` that the runtime refuses anyway: a contradiction."""
    by_code = set(definition.handler_only_keys)
    for sid, state in definition.states.items():
        for k, key in enumerate(state.writable_keys or ()):
            if key.startswith("_") and key != EXTRA_KEY:
                why = "keys starting with '_' are the runtime's"
                hint = (
                    "rename it without the leading '_' (only '_extra' is the model's), or remove it from writable_keys"
                )
            elif key in by_code:
                why = "it is also in handler_only_keys, which wins"
                hint = (
                    "remove it from handler_only_keys if the model may write it, or from writable_keys if only code may"
                )
            else:
                continue
            yield Finding(
                ("states", sid, "writable_keys", k),
                "writable_key_refused",
                f"writable_keys of '{sid}' lists '{key}', but {why}: the model's writes to it are refused",
                hint,
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


def _subflow(state: State) -> Subflow:
    """The state's subflow, or an empty one (no keys in or out)."""
    return state.subflow or Subflow(definition="")


def _keys_unused(definition: FSMDefinition) -> Iterator[Finding]:
    """Collected keys that no condition reads and no instruction refers to (collecting one is not using it)."""
    read = {
        _root(key)
        for transitions in (*(state.transitions for state in definition.states.values()), definition.global_transitions)
        for transition in transitions
        for condition in transition.conditions
        for key in condition_keys(condition)
    } | {_root(key) for state in definition.states.values() for key in _subflow(state).input.values()}
    mentioned = _Words(
        text
        for state in definition.states.values()
        for text in (state.purpose, state.instructions, state.response_instructions)
    )
    for sid, state in definition.states.items():
        for k, key in enumerate(state.required_context_keys):
            if _root(key) not in read and _root(key) not in mentioned:
                yield Finding(
                    ("states", sid, "required_context_keys", k),
                    "key_unused",
                    f"state '{sid}' collects '{key}', but no condition reads it and no instruction refers to it",
                    "fine if your code uses it; otherwise check it in a condition, refer to it, or stop collecting it",
                )


# ---------------------------------------------------------------- priorities


_PRIORITY_HINT = (
    "priority does not choose between them: the model names a target_state, and the move is accepted when "
    "any transition to that target has conditions that hold; priority only orders the transitions in the "
    "prompt (lowest first). Make the conditions exclusive if only one move may be valid, or give the "
    "preferred one a lower number so the prompt lists it first"
)


def _ambiguous_priorities(review: _Review) -> Iterator[Finding]:
    schema = review.definition.context_schema
    for sid in review.definition.states:
        levels: dict[int, list[_Option]] = {}
        for i, transition, found in review.transitions(sid):
            if (sid, i) not in review.dead:
                levels.setdefault(transition.priority, []).append(_Option(i, transition, found))
        pairs = [pair for options in levels.values() if len(options) > 1 for pair in _Overlaps(options, schema).pairs()]
        for a, b, witness in sorted(pairs, key=lambda pair: (pair[1].index, pair[0].index)):
            yield Finding(
                ("states", sid, "transitions", b.index, "priority"),
                "ambiguous_priority",
                f"transitions[{a.index}] (to '{a.target}') and transitions[{b.index}] (to '{b.target}') share "
                f"priority {a.transition.priority} and can both hold, so the model may take either, e.g. with "
                f"context {_compact(witness)}",
                _PRIORITY_HINT,
            )


@dataclass(frozen=True)
class _Option:
    """A transition of one state and priority level, with what its conditions require."""

    index: int
    transition: Transition
    requirements: Requirements

    @property
    def target(self) -> str:
        return self.transition.target_state


class _Overlaps:
    """Pairs of options (to different targets) that can hold together, enough pairs to name every option
    that has such a partner, without trying every pair.

    The options that constrain the key most of them constrain are swept along it, sorted by where their
    domain starts: each meets only the options whose domain is still open there. Options pinned to the
    same value of that key are searched again, as a group, on their other keys (a router on two keys is
    two sweeps, not one sweep over crowded values); the options that leave the key free are searched on
    their own keys, then tried against the swept ones. An option stops looking for partners once it has
    one, and only a pair whose domains meet goes to the solver. Options that share no key are tried pair
    by pair, so the cost grows with the pairs whose domains meet: about linearly for routers
    (``choice == 1``, ``choice == 2`` ...), ranges and description-only transitions.
    """

    def __init__(self, options: list[_Option], schema: Mapping[str, Mapping[str, Any]]) -> None:
        self.options = options
        self.schema = schema  # the context_schema: a pair holds together only on values it allows
        self.covered: set[int] = set()
        self.tried: set[tuple[int, int]] = set()
        self.found: list[tuple[_Option, _Option, dict[str, Any]]] = []

    def pairs(self) -> list[tuple[_Option, _Option, dict[str, Any]]]:
        self._search(self.options, frozenset())
        return self.found

    def _search(self, options: list[_Option], swept: frozenset[str]) -> None:
        axis = _axis(options, swept)
        if axis is None:
            self._across(options, options)
            return
        on_axis = [o for o in options if axis in o.requirements.domains]
        off_axis = [o for o in options if axis not in o.requirements.domains]
        self._sweep(on_axis, axis, swept | {axis})
        self._search(off_axis, swept)
        self._across(off_axis, on_axis)
        self._across(on_axis, off_axis)

    def _sweep(self, options: list[_Option], axis: str, swept: frozenset[str]) -> None:
        spans = [option.requirements.domains[axis].span() for option in options]
        pinned: dict[Any, list[_Option]] = {}  # value -> the options whose domain is that one value
        for option, span in zip(options, spans, strict=True):
            if len(span) == 1 and span[0][0] == span[0][1]:
                pinned.setdefault(span[0][0], []).append(option)
        for group in pinned.values():
            if len(group) > 1:
                self._search(group, swept)
        points = {id(option) for group in pinned.values() for option in group}
        segments = sorted((start, end, n) for n, span in enumerate(spans) for start, end in span)
        ends: list[tuple[Any, int]] = []  # (end, segment) of the segments still open
        wide, narrow = _Open(), _Open()  # open segments of the other options, and of pinned ones
        for segment, (start, end, n) in enumerate(segments):
            while ends and ends[0][0] < start:
                closed = heapq.heappop(ends)[1]
                wide.close(closed)
                narrow.close(closed)
            option = options[n]
            pin = id(option) in points
            meeting = [wide] if pin else [wide, narrow]  # two pinned options meet in their group's search
            if option.index not in self.covered:  # its first partner, among the open segments it meets
                any(self._try(option, other) for open_ in meeting for other in open_.options())
            if option.index in self.covered:  # then a partner for each of those still waiting

                def partnered(other: _Option, option: _Option = option) -> bool:
                    return other.index in self.covered or self._try(option, other)

                for open_ in meeting:
                    open_.settle(partnered)
            (narrow if pin else wide).add(segment, option, option.index in self.covered)
            heapq.heappush(ends, (end, segment))

    def _across(self, options: list[_Option], others: list[_Option]) -> None:
        """Each option without a partner tries ``others`` until one holds with it. Options without
        conditions are left out of each other's tries: the model chooses among them by description."""
        conditioned = [o for o in others if o.requirements.conditioned]
        for option in options:
            if option.index not in self.covered:
                any(self._try(option, other) for other in (others if option.requirements.conditioned else conditioned))

    def _try(self, a: _Option, b: _Option) -> bool:
        """Whether ``a`` and ``b`` make a new pair that can hold together (each pair is tried once)."""
        first, second = (a, b) if a.index < b.index else (b, a)
        pair = (first.index, second.index)
        if first.index == second.index or pair in self.tried:
            return False
        self.tried.add(pair)
        if first.target == second.target or not (first.requirements.conditioned or second.requirements.conditioned):
            return False  # the same move, or a choice the model makes from the descriptions alone
        if not first.requirements.compatible(second.requirements):
            return False
        witness = find_witness([first.transition, second.transition], schema=self.schema)
        if witness is None:
            return False
        self.found.append((first, second, witness))
        self.covered.update(pair)
        return True


class _Open:
    """Segments still open in a sweep: those of options waiting for a partner, and the others'."""

    def __init__(self) -> None:
        self.waiting: dict[int, _Option] = {}
        self.partnered: dict[int, _Option] = {}

    def options(self) -> list[_Option]:
        return [*self.waiting.values(), *self.partnered.values()]

    def add(self, segment: int, option: _Option, partnered: bool) -> None:
        (self.partnered if partnered else self.waiting)[segment] = option

    def close(self, segment: int) -> None:
        self.waiting.pop(segment, None)
        self.partnered.pop(segment, None)

    def settle(self, partnered: Callable[[_Option], bool]) -> None:
        """The waiting options that ``partnered`` says have a partner stop waiting."""
        for segment, other in list(self.waiting.items()):
            if partnered(other):
                self.partnered[segment] = self.waiting.pop(segment)


def _axis(options: list[_Option], swept: Collection[str]) -> str | None:
    """The key most options constrain (on a tie, the one whose domains differ most), leaving out the
    keys already ``swept``; None when no key is left."""
    counts = Counter(key for option in options for key in option.requirements.domains if key not in swept)
    if not counts:
        return None
    spread = {
        key: len({str(o.requirements.domains[key]) for o in options if key in o.requirements.domains}) for key in counts
    }
    return max(sorted(counts), key=lambda key: (counts[key], spread[key]))


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
