"""Read a definition file and report every problem in it at once.

``load`` is the one entry point. It accepts our format and files written in the published llm-fsm
format (versions 3.0 and 4.1): fields we use are mapped, fields we do not use become
``ignored_field`` warnings (errors with ``strict=True``); nothing is dropped silently.
Every problem carries a path (``states.greet.transitions[0].target_state``), the file's
line:column when the source is a file, and a hint where one helps.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llm_fsm import logic
from llm_fsm.definition import Condition, FSMDefinition, State, Transition
from llm_fsm.errors import DefinitionError, Problem
from llm_fsm.graph import reachable
from llm_fsm.jsonfiles import other_kind

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Fields of the llm-fsm format that this runtime has no use for. They load, with a warning.
_IGNORED: dict[str, frozenset[str]] = {
    "fsm": frozenset({"function_handlers", "transition_evaluation_mode"}),
    "state": frozenset(
        {
            "extraction_retries",
            "extraction_confidence_threshold",
            "transition_classification",
            "field_extractions",
            "classification_extractions",
            "context_scope",
            "auto_transition_threshold",
            "response_type",
        }
    ),
    "transition": frozenset({"llm_description", "is_deterministic"}),
    "condition": frozenset({"evaluation_priority"}),
}
_KNOWN: dict[str, frozenset[str]] = {
    "fsm": frozenset(f.alias or n for n, f in FSMDefinition.model_fields.items()),
    "state": frozenset(State.model_fields),
    "transition": frozenset(Transition.model_fields),
    "condition": frozenset(Condition.model_fields),
}


class DefinitionWarning(UserWarning):
    """A definition loaded, but part of it is ignored or suspicious."""


@dataclass
class LoadReport:
    """The outcome of reading a definition: the definition when it is valid, and every problem."""

    definition: FSMDefinition | None
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    source: str | None = None


def load(source: str | os.PathLike[str] | Mapping[str, Any], *, strict: bool = False) -> FSMDefinition:
    """Load and validate a definition from a file path or a dict.

    Raises :class:`DefinitionError` listing every problem; warnings (ignored fields) are issued as
    :class:`DefinitionWarning`.
    """
    report = inspect(source, strict=strict)
    if report.definition is None:
        raise DefinitionError(report.errors, source=report.source)
    for problem in report.warnings:
        warnings.warn(str(problem), DefinitionWarning, stacklevel=2)
    return report.definition


def inspect(source: str | os.PathLike[str] | Mapping[str, Any], *, strict: bool = False) -> LoadReport:
    """Like :func:`load`, but return the problems instead of raising."""
    if isinstance(source, Mapping):
        return _Reader(None, None, strict).read(dict(source))
    path = Path(source)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        problem = Problem("", f"cannot read file: {exc.strerror or exc}", code="unreadable", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    except UnicodeDecodeError as exc:
        problem = Problem("", f"file is not UTF-8 text (byte {exc.start})", code="encoding", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    return load_text(text, source=str(path), strict=strict)


def load_text(text: str, *, source: str | None = None, strict: bool = False) -> LoadReport:
    """Parse definition JSON text; problems carry line:column positions in ``text``."""
    if not text.strip():
        return LoadReport(None, [Problem("", "the file is empty", code="json", source=source)], source=source)
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        problem = Problem("", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno, code="json", source=source)
        return LoadReport(None, [problem], source=source)
    except _DuplicateKey as exc:
        problem = Problem("", f"duplicate key '{exc.key}' in one object", code="duplicate_key", source=source)
        return LoadReport(None, [problem], source=source)
    except (RecursionError, ValueError) as exc:  # nesting too deep, or a number too long to convert
        reason = "nesting is too deep" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        problem = Problem("", f"cannot read the JSON: {reason}", code="json", source=source)
        return LoadReport(None, [problem], source=source)
    if not isinstance(data, dict):
        problem = Problem("", "a definition must be a JSON object", 1, 1, code="type", source=source)
        return LoadReport(None, [problem], source=source)
    other = other_kind(data, "definition")
    if other is not None:  # another kind of file: say that, rather than list its every field
        problem = Problem("", f"this file is {other}, not a definition", code="type", source=source)
        return LoadReport(None, [problem], source=source)
    return _Reader(text, source, strict).read(data)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def did_you_mean(name: str, choices: object) -> str | None:
    """A hint naming the closest choice, or None."""
    options = [str(c) for c in choices] if isinstance(choices, (list, tuple, set, frozenset, dict)) else []
    close = difflib.get_close_matches(str(name), options, n=1)
    return f"did you mean '{close[0]}'?" if close else None


class _Reader:
    """One pass over a raw definition: normalise, collect problems, then validate."""

    def __init__(self, text: str | None, source: str | None, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        self._positions = _positions(text) if text is not None else {}
        self._state_pointer: dict[str, str] = {}

    def read(self, data: dict[str, Any]) -> LoadReport:
        data = self._normalise(data)
        data = self._check_fields(data)
        definition = self._validate(data)
        self._check_graph(data)
        if self.errors:
            definition = None
        return LoadReport(definition, self.errors, self.warnings, self.source)

    # -- reporting ------------------------------------------------------------------------------

    def _problem(self, loc: tuple[Any, ...], message: str, *, code: str, hint: str | None = None) -> Problem:
        loc = tuple(_printable(p) if isinstance(p, str) else p for p in loc)
        message, hint = _printable(message), _printable(hint) if hint else hint
        pointer = self._pointer(loc)
        while pointer and pointer not in self._positions:  # a missing field: point at its parent
            pointer = pointer.rsplit("/", 1)[0]
        line, column = self._positions.get(pointer, (None, None))
        return Problem(_dotted(loc), message, line, column, hint, code, self.source)

    def error(self, loc: tuple[Any, ...], message: str, *, code: str, hint: str | None = None) -> None:
        self.errors.append(self._problem(loc, message, code=code, hint=hint))

    def warn(self, loc: tuple[Any, ...], message: str, *, code: str, hint: str | None = None) -> None:
        self.warnings.append(self._problem(loc, message, code=code, hint=hint))

    def _pointer(self, loc: tuple[Any, ...]) -> str:
        parts = [str(p) for p in loc]
        if len(parts) >= 2 and parts[0] == "states" and parts[1] in self._state_pointer:
            parts[1] = self._state_pointer[parts[1]]
        return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)

    # -- normalising ----------------------------------------------------------------------------

    def _normalise(self, data: dict[str, Any]) -> dict[str, Any]:
        states = data.get("states")
        if isinstance(states, list):
            data = {**data, "states": self._states_from_list(states)}
        elif isinstance(states, dict):
            data = {**data, "states": self._states_from_map(states)}
        return data

    def _states_from_list(self, states: list[Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for index, state in enumerate(states):
            sid = state.get("id") if isinstance(state, dict) else None
            if not isinstance(sid, str):
                self.error(("states", index, "id"), "each state in a list needs a string 'id'", code="missing_id")
                continue
            if sid in result:
                self.error(("states", index, "id"), f"duplicate state id '{sid}'", code="duplicate_state")
                continue
            self._state_pointer[sid] = str(index)
            result[sid] = state
        return result

    def _states_from_map(self, states: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, state in states.items():
            if isinstance(state, dict):
                inner = state.get("id", key)
                if inner != key:
                    self.error(("states", key, "id"), f"id '{inner}' differs from its key '{key}'", code="id_mismatch")
                state = {**state, "id": key}
            result[key] = state
        return result

    # -- unknown and ignored fields -------------------------------------------------------------

    def _check_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``data`` without the fields the models do not know, each one reported."""
        data = self._known_fields(data, (), "fsm")
        states = {}
        for sid, state in _dict_items(data.get("states")):
            states[sid] = state = self._known_fields(state, ("states", sid), "state")
            transitions = _get(state, "transitions")
            if isinstance(transitions, list):
                state["transitions"] = [
                    self._transition(t, ("states", sid, "transitions", i)) for i, t in enumerate(transitions)
                ]
        if isinstance(data.get("states"), dict):
            data["states"] = states
        return data

    def _transition(self, transition: Any, loc: tuple[Any, ...]) -> Any:
        transition = self._known_fields(transition, loc, "transition")
        conditions = _get(transition, "conditions")
        if isinstance(conditions, list):
            transition["conditions"] = [
                self._known_fields(c, (*loc, "conditions", j), "condition") for j, c in enumerate(conditions)
            ]
        return transition

    def _known_fields(self, obj: Any, loc: tuple[Any, ...], kind: str) -> Any:
        if not isinstance(obj, dict):
            return obj
        for key in [k for k in obj if k not in _KNOWN[kind]]:
            self._report_field(key, (*loc, key), kind)
        return {k: v for k, v in obj.items() if k in _KNOWN[kind]}

    def _report_field(self, key: str, loc: tuple[Any, ...], kind: str) -> None:
        if key in _IGNORED[kind]:
            self.warn(loc, f"llm-fsm field '{key}' is not used by this runtime", code="ignored_field")
            return
        hint = did_you_mean(key, _KNOWN[kind])
        if self.strict:
            self.error(loc, f"unknown field '{key}'", code="unknown_field", hint=hint)
        else:
            self.warn(loc, f"unknown field '{key}' is ignored", code="unknown_field", hint=hint)

    # -- types ----------------------------------------------------------------------------------

    def _validate(self, data: dict[str, Any]) -> FSMDefinition | None:
        try:
            return FSMDefinition.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("dict[str,any]", "bool")))
                self.error(loc, err["msg"], code=err["type"])
            return None

    # -- whole-file checks ----------------------------------------------------------------------

    def _check_graph(self, data: dict[str, Any]) -> None:
        states = data.get("states")
        if not isinstance(states, dict):
            return
        if not states:
            self.error(("states",), "a definition needs at least one state", code="no_states")
            return
        for sid in states:
            if not _IDENTIFIER.match(sid):
                self.error(
                    ("states", sid), f"state id '{sid}' is not a valid identifier (letters, digits, _)", code="bad_id"
                )
        initial = data.get("initial_state")
        if isinstance(initial, str) and initial not in states:
            self.error(
                ("initial_state",),
                f"unknown initial state '{initial}'",
                code="unknown_state",
                hint=did_you_mean(initial, states),
            )
        for sid, state in _dict_items(states):
            self._check_transitions(sid, state, states)
            self._check_refinement(sid, state, states)
        if isinstance(initial, str) and initial in states:
            self._check_terminal_reachable(initial, states)
        self._check_schemas(("context_schema",), data.get("context_schema"), per_key=True)

    def _check_refinement(self, sid: str, state: Any, states: dict[str, Any]) -> None:
        """A fallback state must exist; patterns must compile; schemas must be valid JSON Schemas."""
        fallback = _get(state, "fallback_state")
        if isinstance(fallback, str) and fallback not in states:
            self.error(
                ("states", sid, "fallback_state"),
                f"unknown state '{fallback}'",
                code="unknown_state",
                hint=did_you_mean(fallback, states),
            )
        if _get(state, "on_exhausted") == "fallback_state" and not fallback:
            self.error(
                ("states", sid, "on_exhausted"),
                'on_exhausted is "fallback_state" but no fallback_state is set',
                code="missing_fallback",
            )
        for i, check in _list_items(_get(state, "checks")):
            loc = ("states", sid, "checks", i)
            if _get(check, "kind") == "regex" and isinstance(_get(check, "pattern"), str):
                try:
                    re.compile(check["pattern"])
                except (re.error, OverflowError, RecursionError, ValueError) as exc:
                    reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
                    self.error((*loc, "pattern"), f"invalid regular expression: {reason}", code="bad_regex")
            if _get(check, "kind") == "schema":
                self._check_schemas((*loc, "schema"), _get(check, "schema"))

    def _check_schemas(self, loc: tuple[Any, ...], value: Any, *, per_key: bool = False) -> None:
        if not isinstance(value, dict) or not value:
            return
        from llm_fsm.schemas import schema_problem  # jsonschema is imported only for files that use schemas

        items = list(value.items()) if per_key else [(None, value)]
        for key, schema in items:
            where = (*loc, key) if key is not None else loc
            problem = schema_problem(schema) if isinstance(schema, dict) else None
            if problem:
                self.error(where, f"invalid JSON Schema: {problem}", code="bad_schema")

    def _check_transitions(self, sid: str, state: Any, states: dict[str, Any]) -> None:
        for i, transition in _list_items(_get(state, "transitions")):
            target = _get(transition, "target_state")
            loc = ("states", sid, "transitions", i)
            if isinstance(target, str) and target not in states:
                self.error(
                    (*loc, "target_state"),
                    f"unknown state '{target}'",
                    code="unknown_state",
                    hint=did_you_mean(target, states),
                )
            for j, condition in _list_items(_get(transition, "conditions")):
                rule = _get(condition, "logic")
                for where, message in logic.check_rule(rule) if rule is not None else ():
                    path = (*loc, "conditions", j, "logic")
                    self.error(path, f"{where + ': ' if where else ''}{message}", code="logic")

    def _check_terminal_reachable(self, initial: str, states: dict[str, Any]) -> None:
        edges = {sid: _known_targets(state, states) for sid, state in states.items()}
        if not any(not _get(states[s], "transitions") for s in reachable([initial], edges)):
            self.error(
                ("initial_state",),
                "no terminal state (a state without transitions) is reachable from the initial state",
                code="no_terminal",
                hint="add a final state with no transitions and a transition leading to it",
            )


def _printable(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes can make) written as escapes: terminals can print it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _known_targets(state: Any, states: dict[str, Any]) -> list[str]:
    """The states a raw state's transitions lead to, leaving out targets that name no state."""
    targets = [_get(t, "target_state") for _, t in _list_items(_get(state, "transitions"))]
    return [target for target in targets if isinstance(target, str) and target in states]


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _dict_items(obj: Any) -> list[tuple[str, Any]]:
    return list(obj.items()) if isinstance(obj, dict) else []


def _list_items(obj: Any) -> list[tuple[int, Any]]:
    return list(enumerate(obj)) if isinstance(obj, list) else []


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _positions(text: str) -> dict[str, tuple[int, int]]:
    """JSON pointer → 1-based (line, column) of each value (of its key, for object members)."""
    from json_source_map import calculate  # type: ignore[import-untyped]

    try:
        entries = calculate(text)
    except Exception:  # the text parsed as JSON already; a mapper failure only loses positions
        return {}
    result = {}
    for pointer, entry in entries.items():
        where = entry.key_start or entry.value_start
        result[pointer] = (where.line + 1, where.column + 1)
    return result
