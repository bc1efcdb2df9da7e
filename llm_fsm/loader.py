"""Read a definition file and report every problem in it at once.

``load`` is the one entry point. It accepts our format and files written in the published llm-fsm
format (versions 3.0 and 4.1), including files written by llm-fsm's ``model_dump_json()``, where every
optional field is present and ``null`` when unset (``null`` means the default). Fields we use are
mapped; fields we do not use become one ``ignored_field`` warning per field (with a count), unless
their value says nothing (``null``, empty, or llm-fsm's default); nothing is dropped silently.

Every problem is written for the person who wrote the file: a path
(``states.greet.transitions[0].target_state``), the file's line:column when the source is a file,
plain words (``expected a list of strings, got a string``, ``JSON does not allow a trailing comma``)
and a hint where one helps. Positions are looked up only when there is a problem to report.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llm_fsm import logic, subflows
from llm_fsm.definition import (
    RETURN,
    Check,
    Condition,
    Example,
    FSMDefinition,
    GlobalTransition,
    JSONLogic,
    State,
    Transition,
)
from llm_fsm.errors import DefinitionError, Problem
from llm_fsm.graph import reachable
from llm_fsm.jsonfiles import other_kind
from llm_fsm.memory_spec import MemorySpec, Slot, StateSummaries, SummarySpec
from llm_fsm.wording import Vocabulary, describe, did_you_mean, field_problems
from llm_fsm.wording import what as _what

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what providers accept as a function name


@dataclass(frozen=True)
class _LlmFsmField:
    """A field of the llm-fsm format that this runtime does not use."""

    version: str  # the llm-fsm version that has it
    default: object = None  # llm-fsm's default: a file that holds it says nothing


# Fields of the llm-fsm format that this runtime has no use for. They load, with a warning.
_IGNORED: dict[str, dict[str, _LlmFsmField]] = {
    "fsm": {
        "function_handlers": _LlmFsmField("3.0"),
        "transition_evaluation_mode": _LlmFsmField("4.1", "hybrid"),
    },
    "state": {
        "extraction_retries": _LlmFsmField("4.1", 1),
        "extraction_confidence_threshold": _LlmFsmField("4.1", 0.0),
        "transition_classification": _LlmFsmField("4.1"),
        "field_extractions": _LlmFsmField("4.1"),
        "classification_extractions": _LlmFsmField("4.1"),
        "context_scope": _LlmFsmField("4.1"),
        "auto_transition_threshold": _LlmFsmField("4.1"),
        "response_type": _LlmFsmField("4.1", "conversational"),
    },
    "transition": {"llm_description": _LlmFsmField("4.1"), "is_deterministic": _LlmFsmField("4.1", True)},
    "global_transition": {},  # not in the llm-fsm format
    "condition": {"evaluation_priority": _LlmFsmField("4.1", 100)},
}
_KNOWN: dict[str, frozenset[str]] = {
    "fsm": frozenset(f.alias or n for n, f in FSMDefinition.model_fields.items()),
    "state": frozenset(State.model_fields),
    "transition": frozenset(Transition.model_fields),
    "global_transition": frozenset(GlobalTransition.model_fields),
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
        raw = path.read_bytes()
    except OSError as exc:
        problem = Problem("", f"cannot read file: {exc.strerror or exc}", code="unreadable", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    try:
        text = raw.decode("utf-8-sig")  # editors may start a UTF-8 file with a byte order mark: not part of the JSON
    except UnicodeDecodeError as exc:
        problem = Problem("", _encoding_message(raw, exc.start), code="encoding", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    return load_text(text, source=str(path), strict=strict)


def load_text(text: str, *, source: str | None = None, strict: bool = False) -> LoadReport:
    """Parse definition JSON text; problems carry line:column positions in ``text``."""

    def failed(message: str, offset: int | None = None, *, code: str = "json", path: str = "") -> LoadReport:
        line, column = _line_column(text, offset) if offset is not None else (None, None)
        problem = Problem(_printable(path), _printable(message), line, column, code=code, source=source)
        return LoadReport(None, [problem], source=source)

    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        return failed(*_json_problem(text, exc))
    except _DuplicateKey:
        path, offset, first = _first_duplicate(text)
        line, column = _line_column(text, first)
        message = f"duplicate key '{path[-1]}' (first at {line}:{column}): a key may appear once in an object"
        return failed(message, offset, code="duplicate_key", path=_dotted(path))
    except RecursionError:
        return failed("cannot read the JSON: it nests too deeply")
    except ValueError as exc:  # a number too long to convert
        return failed(f"cannot read the JSON: {str(exc).split(';')[0]}")
    if not isinstance(data, dict):
        return failed(f"a definition must be a JSON object, got {_what(data)}", 0, code="type")
    other = other_kind(data, "definition")
    if other is not None:  # another kind of file: say that, rather than list its every field
        return failed(f"this file is {other}, not a definition", code="type")
    return _Reader(text, source, strict).read(data)


class _DuplicateKey(ValueError):
    """Raised while parsing: an object repeats a key (where is found afterwards, by :func:`_first_duplicate`)."""


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) < len(pairs):
        raise _DuplicateKey()
    return result


class _Reader:
    """One pass over a raw definition: normalise, collect problems, then validate."""

    def __init__(self, text: str | None, source: str | None, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        self._text = text
        self._state_pointer: dict[str, str] = {}
        self._states_without_id = False
        self._other_fields: list[tuple[tuple[Any, ...], str, Any]] = []  # (where, kind of object, value)

    @cached_property
    def _positions(self) -> dict[str, tuple[int, int]]:
        """Where each value is in the text: computed on the first problem, as clean files need none."""
        return _positions(self._text) if self._text is not None else {}

    def read(self, data: dict[str, Any]) -> LoadReport:
        data = self._normalise(data)
        data = self._check_fields(data)
        definition = self._validate(data)
        self._check_graph(data)
        self._check_tools(data)
        if definition is not None and not self.errors and subflows.has_subflows(definition):
            self._check_subflows(definition)
        if self.errors:
            definition = None
        return LoadReport(definition, self.errors, self.warnings, self.source)

    def _check_subflows(self, definition: FSMDefinition) -> None:
        """Load the sub-definitions the states run, and check their mappings (see :mod:`llm_fsm.subflows`)."""
        reports, inner = subflows.resolve(definition, self.source, inspect, strict=self.strict)
        for loc, message, code, hint in reports:
            (self.warn if code == "subflow_input" else self.error)(loc, message, code=code, hint=hint)
        self.errors += inner

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
        parts = list(loc)
        if len(parts) >= 2 and parts[0] == "states" and parts[1] in self._state_pointer:
            parts[1] = self._state_pointer[parts[1]]
        return _json_pointer(parts)

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
                self._states_without_id = True
                if not isinstance(state, dict):
                    self.error(("states", index), f"expected an object (a state), got {_what(state)}", code="type")
                else:
                    found = "" if sid is None else f", got {_what(sid)}"
                    message = f"each state in a list needs a string 'id'{found}"
                    self.error(("states", index, "id"), message, code="missing_id")
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
                inner = key if state.get("id") is None else state["id"]
                if not isinstance(inner, str):
                    self.error(("states", key, "id"), f"expected a string, got {_what(inner)}", code="type")
                elif inner != key:
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
        moves = data.get("global_transitions")
        if isinstance(moves, list):
            data["global_transitions"] = [
                self._transition(t, ("global_transitions", i), "global_transition") for i, t in enumerate(moves)
            ]
        self._report_fields()
        return data

    def _transition(self, transition: Any, loc: tuple[Any, ...], kind: str = "transition") -> Any:
        transition = self._known_fields(transition, loc, kind)
        conditions = _get(transition, "conditions")
        if isinstance(conditions, list):
            transition["conditions"] = [
                self._known_fields(c, (*loc, "conditions", j), "condition") for j, c in enumerate(conditions)
            ]
        return transition

    def _known_fields(self, obj: Any, loc: tuple[Any, ...], kind: str) -> Any:
        if not isinstance(obj, dict):
            return obj
        self._other_fields += [((*loc, key), kind, obj[key]) for key in obj if key not in _KNOWN[kind]]
        return {k: v for k, v in obj.items() if k in _KNOWN[kind]}

    def _report_fields(self) -> None:
        """In file order: each unknown field, and each llm-fsm field we do not use once, where it first
        says something, with how often it does."""
        ignored: dict[tuple[str, str], list[tuple[Any, ...]]] = {}  # where each one says something
        for loc, kind, value in self._other_fields:
            llm_fsm_field = _IGNORED[kind].get(loc[-1])
            if llm_fsm_field is not None and not _says_nothing(value, llm_fsm_field.default):
                ignored.setdefault((kind, loc[-1]), []).append(loc)
        for loc, kind, _ in self._other_fields:
            key = loc[-1]
            if key not in _IGNORED[kind]:
                self._report_unknown(loc, kind)
            elif (places := ignored.get((kind, key))) and places[0] == loc:
                count = "" if kind == "fsm" else f" in {len(places)} {kind}{'s' if len(places) > 1 else ''}"
                version = _IGNORED[kind][key].version
                self.warn(loc, f"'{key}'{count} (llm-fsm {version}; not used by this runtime)", code="ignored_field")

    def _report_unknown(self, loc: tuple[Any, ...], kind: str) -> None:
        hint = did_you_mean(loc[-1], _KNOWN[kind])
        if self.strict:
            self.error(loc, f"unknown field '{loc[-1]}'", code="unknown_field", hint=hint)
        else:
            self.warn(loc, f"unknown field '{loc[-1]}' is ignored", code="unknown_field", hint=hint)

    # -- types ----------------------------------------------------------------------------------

    def _validate(self, data: dict[str, Any]) -> FSMDefinition | None:
        try:
            return FSMDefinition.model_validate(data)
        except ValidationError as exc:
            for loc, message, code, hint in field_problems(exc, _WORDS):
                self.error(loc, message, code=code, hint=hint)
            return None

    # -- whole-file checks ----------------------------------------------------------------------

    def _check_graph(self, data: dict[str, Any]) -> None:
        states = data.get("states")
        if not isinstance(states, dict):
            return
        # When states of a list lack their id, which states there are is not known: names are not judged.
        known = None if self._states_without_id else states
        if known is not None and not states:
            self.error(("states",), "a definition needs at least one state", code="no_states")
            return
        for sid in states:
            if not _IDENTIFIER.match(sid):
                self.error(
                    ("states", sid), f"state id '{sid}' is not a valid identifier (letters, digits, _)", code="bad_id"
                )
        initial = data.get("initial_state")
        if known is not None and isinstance(initial, str) and initial not in states:
            self.error(
                ("initial_state",),
                f"unknown initial state '{initial}'",
                code="unknown_state",
                hint=did_you_mean(initial, states),
            )
        for sid, state in _dict_items(states):
            self._check_transitions(("states", sid, "transitions"), _get(state, "transitions"), known)
            self._check_refinement(sid, state, known)
        self._check_global_transitions(data.get("global_transitions"), known)
        if known is not None and isinstance(initial, str) and initial in states:
            self._check_terminal_reachable(initial, states, data.get("global_transitions"))
        self._check_schemas(("context_schema",), data.get("context_schema"), per_key=True)

    def _check_global_transitions(self, moves: Any, states: dict[str, Any] | None) -> None:
        """Global transitions: targets and conditions as a state's; each state they except exists."""
        self._check_transitions(("global_transitions",), moves, states)
        for i, move in _list_items(moves):
            for j, sid in _list_items(_get(move, "except_states")):
                if states is not None and isinstance(sid, str) and sid not in states:
                    loc = ("global_transitions", i, "except_states", j)
                    self.error(loc, f"unknown state '{sid}'", code="unknown_state", hint=did_you_mean(sid, states))

    def _check_refinement(self, sid: str, state: Any, states: dict[str, Any] | None) -> None:
        """A fallback state must exist; patterns must compile; schemas must be valid JSON Schemas.
        ``states`` is None when which states there are is not known."""
        fallback = _get(state, "fallback_state")
        if states is not None and isinstance(fallback, str) and fallback not in states:
            self.error(
                ("states", sid, "fallback_state"),
                f"unknown state '{fallback}'",
                code="unknown_state",
                hint=f'a fallback is a state; "{RETURN}" is a transition target only'
                if fallback == RETURN
                else did_you_mean(fallback, states),
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

    def _check_transitions(self, where: tuple[Any, ...], transitions: Any, states: dict[str, Any] | None) -> None:
        """The transitions listed at ``where`` (a state's, or the global ones) lead to states or to
        ``"$return"``, and their conditions are valid JsonLogic."""
        for i, transition in _list_items(transitions):
            target = _get(transition, "target_state")
            loc = (*where, i)
            if states is not None and isinstance(target, str) and target not in states and target != RETURN:
                hint = did_you_mean(target, [*states, RETURN])
                if hint is None and target.lower().lstrip("$") in ("return", "back", "previous"):
                    hint = f'write "{RETURN}" to go back to the state the conversation came from'
                self.error((*loc, "target_state"), f"unknown state '{target}'", code="unknown_state", hint=hint)
            for j, condition in _list_items(_get(transition, "conditions")):
                rule = _get(condition, "logic")
                for spot, message in logic.check_rule(rule) if rule is not None else ():
                    path = (*loc, "conditions", j, "logic")
                    self.error(path, f"{spot + ': ' if spot else ''}{message}", code="logic")

    def _check_tools(self, data: dict[str, Any]) -> None:
        """Tool names, schemas, approval rules, servers; the tools each state lists must be declared
        (or may come from an MCP server, which is asked when a conversation starts)."""
        tools, servers = data.get("tools"), data.get("mcp_servers")
        declared = tools if isinstance(tools, dict) else {}
        known_servers = servers if isinstance(servers, dict) else {}
        for name, tool in _dict_items(declared):
            loc = ("tools", name)
            if not _TOOL_NAME.match(name):
                self.error(loc, f"tool name '{name}' is not valid (1 to 64 letters, digits, _ or -)", code="bad_id")
            parameters = _get(tool, "parameters")
            if isinstance(parameters, dict):
                self._check_schemas((*loc, "parameters"), parameters)
                if parameters.get("type", "object") != "object":
                    self.error(
                        (*loc, "parameters"), "a tool's parameters are a JSON Schema of type object", code="bad_schema"
                    )
            rule = _get(_get(tool, "approval"), "when")
            for where, message in logic.check_rule(rule) if rule is not None else ():
                self.error((*loc, "approval", "when"), f"{where + ': ' if where else ''}{message}", code="logic")
            if rule is not None:
                self._check_approval_reads((*loc, "approval", "when"), rule, parameters)
            server = _get(tool, "mcp_server")
            if isinstance(server, str) and server not in known_servers:
                hint = did_you_mean(server, known_servers)
                self.error((*loc, "mcp_server"), f"unknown MCP server '{server}'", code="unknown_server", hint=hint)
        for name, server in _dict_items(known_servers):
            if isinstance(server, dict) and (server.get("command") is None) == (server.get("url") is None):
                self.error(
                    ("mcp_servers", name), "an MCP server has a command or a url (one of the two)", code="bad_server"
                )
        states = data.get("states")
        for sid, state in _dict_items(states if isinstance(states, dict) else {}):
            for i, name in _list_items(_get(state, "tools")):
                if isinstance(name, str) and name not in declared and not known_servers:
                    hint = did_you_mean(name, declared) or 'declare it in the top-level "tools"'
                    self.error(("states", sid, "tools", i), f"unknown tool '{name}'", code="unknown_tool", hint=hint)

    def _check_approval_reads(self, loc: tuple[Any, ...], rule: Any, parameters: Any) -> None:
        """An approval rule reads ``args.<parameter>`` or ``context.<key>``: anything else is always
        missing, and a rule that reads a missing value would let every call through unasked."""
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        for path in sorted(logic.keys_read(rule)):
            root, _, rest = path.partition(".")
            argument = rest.split(".")[0]
            if root not in ("args", "context"):
                hint = f"did you mean 'args.{path}'?" if properties is None or path in properties else None
                message = f"an approval rule reads args.<argument> or context.<key>, not '{path}'"
                self.error(loc, message, code="approval_var", hint=hint)
            elif root == "args" and argument and isinstance(properties, dict) and argument not in properties:
                message = f"'{path}': the tool has no argument '{argument}'"
                self.error(loc, message, code="approval_var", hint=did_you_mean(argument, properties))

    def _check_terminal_reachable(self, initial: str, states: dict[str, Any], moves: Any) -> None:
        if not _graph_is_known(states, moves):  # a malformed transition is reported: what it would change is unknown
            return
        edges = {sid: _known_targets(sid, state, states, moves) for sid, state in states.items()}
        if not any(not _get(states[s], "transitions") for s in reachable([initial], edges)):
            hint = "add a final state with no transitions and a transition leading to it"
            if moves:
                hint += " (a global transition does not apply in the states its except_states lists)"
            self.error(
                ("initial_state",),
                "no terminal state (a state without transitions) is reachable from the initial state",
                code="no_terminal",
                hint=hint,
            )


def _printable(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes can make) written as escapes: terminals can print it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _graph_is_known(states: dict[str, Any], moves: Any) -> bool:
    """Every state's transitions, and the global ones, are a list (or unset) of objects that name a target
    (a global one's except_states a list of text)."""
    for transitions in [*(_get(state, "transitions") for state in states.values()), moves]:
        if transitions is not None and not isinstance(transitions, list):
            return False
        if not all(isinstance(_get(t, "target_state"), str) for t in transitions or ()):
            return False
    excepted = [_get(move, "except_states") for move in moves or ()]
    return all(e is None or (isinstance(e, list) and all(isinstance(s, str) for s in e)) for e in excepted)


def _known_targets(sid: str, state: Any, states: dict[str, Any], moves: Any) -> list[str]:
    """The states a raw state's transitions lead to, and the global ones that apply there (not in a
    terminal state, nor its except_states, nor to itself), leaving out targets that name no state.
    ``"$return"`` leads back to a state visited before: it reaches nothing new."""
    own = [_get(t, "target_state") for _, t in _list_items(_get(state, "transitions"))]
    anywhere = [
        _get(move, "target_state") for _, move in _list_items(moves) if sid not in (_get(move, "except_states") or ())
    ]
    targets = [*own, *anywhere] if own else []
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


def _says_nothing(value: Any, default: object) -> bool:
    """``null``, an empty list or object, or llm-fsm's default: an ignored field set so is not worth a warning."""
    if value is None or value == [] or value == {}:
        return True
    return isinstance(value, bool) == isinstance(default, bool) and value == default


# ---------------------------------------------------------------- field problems, in plain words

_NOUNS: dict[Any, str] = {
    State: "state", Transition: "transition", GlobalTransition: "global transition", Condition: "condition",
    Example: "example line", MemorySpec: "memory", Slot: "memory slot", SummarySpec: "summaries setting",
    StateSummaries: "summaries setting",
}  # fmt: skip
_WORDS = Vocabulary(
    FSMDefinition,
    nouns=(*_NOUNS.items(), (Check, "check")),
    phrases=((JSONLogic, ("a JsonLogic rule (an object) or true or false", "JsonLogic rules")),),
)


def _describe(tp: Any, *, plural: bool = False) -> str:
    """What a value of type ``tp`` is, in the words of the definition format."""
    return describe(tp, _WORDS, plural=plural)


# ---------------------------------------------------------------- JSON text: what is wrong, where

_BOM = "\ufeff"
_WIDE_BOMS = {  # the byte order marks of UTF-32 and UTF-16; UTF-32's first, as its marks start like UTF-16's
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}
_YAML = re.compile(r"---|%YAML|-\s|[\w\"'-][\w \"'.-]*:(\s|$)")
_WORD = re.compile(r"[A-Za-z_][\w.-]*")
_PYTHON_CONSTANTS = frozenset({"True", "False", "None", "TRUE", "FALSE", "NULL", "Null"})
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_BRACKET = re.compile(rf"{_STRING}|[\[\]{{}}]")
_TOKEN = re.compile(rf"{_STRING}|[\[\]{{}}:,]|[^\s\[\]{{}}:,\"]+")
# What json's messages mean, for the cases that need no more than the message and the place.
_JSON_MESSAGES = {
    "Expecting ',' delimiter": "a ',' is missing between two items",
    "Expecting ':' delimiter": "a ':' is missing after the key",
    "Expecting value": "a value is missing",
    "Expecting property name enclosed in double quotes": "a key in double quotes is missing",
    "Invalid control character at": "a string cannot hold a line break or a tab: write \\n or \\t",
    "Invalid \\uXXXX escape": "'\\u' must be followed by four hexadecimal digits",
}


def _encoding_message(raw: bytes, start: int) -> str:
    for bom, name in _WIDE_BOMS.items():
        if raw.startswith(bom):
            return f"the file is {name} text: save it as UTF-8"
    line, column = raw.count(b"\n", 0, start) + 1, start - (raw.rfind(b"\n", 0, start) + 1) + 1
    return f"the file is not UTF-8 text: byte 0x{raw[start]:02X} at {line}:{column} (save the file as UTF-8)"


def _line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _json_problem(text: str, exc: json.JSONDecodeError) -> tuple[str, int]:
    """Why ``text`` is not JSON, in plain words ending with where, and the offset to point at."""
    offset, rest = exc.pos, text[exc.pos :]

    def at(where: int) -> str:
        return "{}:{}".format(*_line_column(text, where))

    if not text.strip():
        return "the file is empty: a definition is a JSON object, starting with '{'", 0
    first = len(text) - len(text.lstrip())
    if offset == first and _YAML.match(text, first):
        return f"this looks like YAML, but a definition file must be JSON (starting with '{{') at {at(first)}", first
    if rest.startswith(("//", "/*")):
        kind = "//" if rest.startswith("//") else "/* */"
        return f"JSON does not allow comments: remove the '{kind}' comment at {at(offset)}", offset
    if rest.startswith("'"):
        return f"JSON needs double quotes around keys and strings: replace the ' at {at(offset)}", offset
    if rest.startswith(_BOM):
        return f"a byte order mark (BOM) cannot be here: remove it at {at(offset)}", offset
    before = text[:offset].rstrip()
    if rest[:1] in ("}", "]") and before.endswith(","):
        comma = len(before) - 1
        return f"JSON does not allow a trailing comma: remove the ',' at {at(comma)}", comma
    if exc.msg.startswith("Unterminated string"):
        message = f"the file ends before the JSON does (is it cut off?): the string at {at(offset)} is never closed"
        return message, len(text)
    if not rest.strip():
        opened = _unclosed(text)
        what = f"the '{text[opened]}' at {at(opened)} is never closed" if opened is not None else "it is incomplete"
        return f"the file ends before the JSON does (is it cut off?): {what}", offset
    word = _WORD.match(text, offset)
    if word and word.group() in _PYTHON_CONSTANTS:
        return f"JSON writes true, false and null in lowercase: '{word.group()}' at {at(offset)}", offset
    if word and exc.msg.startswith("Expecting property name"):
        return f'keys need double quotes: write "{word.group()}" at {at(offset)}', offset
    if word and exc.msg == "Expecting value":
        return f'text needs double quotes: write "{word.group()}" at {at(offset)}', offset
    if exc.msg.startswith("Invalid \\escape"):
        escape = text[offset : offset + 2]
        return f"'{escape}' is not a JSON escape: write '\\\\' for a backslash, at {at(offset)}", offset
    if exc.msg == "Extra data":
        return f"there is more after the end of the JSON object: the '{text[offset]}' at {at(offset)}", offset
    return f"{_JSON_MESSAGES.get(exc.msg, 'this is not valid JSON')} at {at(offset)}", offset


def _unclosed(text: str) -> int | None:
    """The offset of the innermost '{' or '[' that ``text`` leaves open (strings skipped), or None."""
    opened: list[int] = []
    for match in _BRACKET.finditer(text):
        token = match.group()
        if token in "{[":
            opened.append(match.start())
        elif token in "}]" and opened:
            opened.pop()
    return opened[-1] if opened else None


@dataclass(slots=True)
class _Open:
    """A container :func:`_values` is inside: where it is, and which of its members it is at."""

    path: tuple[str | int, ...]
    is_object: bool
    member: str | int = 0  # the key (in an object) or the index (in a list) of the current value
    key_offset: int | None = None


def _values(text: str) -> Iterator[tuple[tuple[str | int, ...], int, int | None]]:
    """Each value of the JSON ``text`` in order: its path, its offset, and the offset of its key (in an
    object) or None. ``text`` is JSON that parsed (a repeated key aside)."""
    inside: list[_Open] = []
    expecting_key = False
    container: _Open | None
    for match in _TOKEN.finditer(text):
        token, offset = match.group(), match.start()
        if token == ":":
            continue
        if token == ",":
            container = inside[-1]
            if container.is_object:
                expecting_key = True
            else:
                container.member = int(container.member) + 1
            continue
        if token in ("}", "]"):
            inside.pop()
            expecting_key = False
            continue
        if expecting_key:
            inside[-1].member, inside[-1].key_offset = _key(token), offset
            expecting_key = False
            continue
        container = inside[-1] if inside else None
        path = (*container.path, container.member) if container else ()
        yield path, offset, container.key_offset if container and container.is_object else None
        if token in ("{", "["):
            inside.append(_Open(path, token == "{"))
            expecting_key = token == "{"


def _key(token: str) -> str:
    return token[1:-1] if "\\" not in token else json.loads(token)


def _first_duplicate(text: str) -> tuple[tuple[str | int, ...], int, int]:
    """The path of the first key that repeats in its object, where it repeats, and where it was first."""
    seen: dict[tuple[str | int, ...], int] = {}
    for path, _, key_offset in _values(text):
        if key_offset is None:
            continue
        if path in seen:
            return path, key_offset, seen[path]
        seen[path] = key_offset
    raise AssertionError("the text has no repeated key")  # only called after the parser found one


def _positions(text: str) -> dict[str, tuple[int, int]]:
    """JSON pointer → 1-based (line, column) of each value (of its key, for object members)."""
    line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
    result = {}
    for path, offset, key_offset in _values(text):
        where = key_offset if key_offset is not None else offset
        line = bisect.bisect_right(line_starts, where)
        pointer = _json_pointer(path)
        result[pointer] = (line, where - line_starts[line - 1] + 1)
    return result


def _json_pointer(path: Sequence[str | int]) -> str:
    """``("states", "a b/c", 0)`` → ``/states/a b~1c/0`` (RFC 6901)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)
