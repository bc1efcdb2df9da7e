"""Read a definition file and report every problem in it at once.

``load`` is the one entry point. It accepts our format and files written in the published llm-fsm
format (versions 3.0 and 4.1), including files written by llm-fsm's ``model_dump_json()``, where every
optional field is present and ``null`` when unset (``null`` means the default). Fields we use are
mapped; fields we do not use become one ``ignored_field`` warning per field (with a count), unless
their value says nothing (``null``, empty, or llm-fsm's default); nothing is dropped silently. A state's
``auto_transition_threshold`` (llm-fsm 4.x: its moves decided by their conditions, with no model call) makes
its transitions with conditions that can fail automatic, unless ``is_deterministic`` is false: one
``mapped_field`` warning per state says which (the threshold's number is not used).

Every problem is written for the person who wrote the file: a path
(``states.greet.transitions[0].target_state``), the file's line:column when the source is a file,
plain words (``expected a list of strings, got a string``, ``JSON does not allow a trailing comma``)
and a hint where one helps. Positions are looked up only when there is a problem to report.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llm_fsm.definition import clearing, corrections, subflows, workflow_checks
from llm_fsm.definition.file_checks import FileChecks, dict_items, get
from llm_fsm.definition.json_problems import (
    DuplicateKey,
    encoding_message,
    first_duplicate,
    json_problem,
    line_column,
    reject_duplicate_keys,
)
from llm_fsm.definition.json_problems import (
    json_pointer as _json_pointer,  # importers of these three, and a test, find them here
)
from llm_fsm.definition.json_problems import positions as _positions
from llm_fsm.definition.memory import MemorySpec, Slot, StateSummaries, SummarySpec
from llm_fsm.definition.models import (
    Check,
    Condition,
    Example,
    FSMDefinition,
    GlobalTransition,
    JSONLogic,
    RuntimeTexts,
    State,
    Transition,
)
from llm_fsm.definition.texts import missing_texts
from llm_fsm.definition.wording import Vocabulary, describe, did_you_mean, field_problems
from llm_fsm.definition.wording import what as _what
from llm_fsm.errors import DefinitionError, Problem
from llm_fsm.jsonfiles import other_kind
from llm_fsm.named_files import read_bytes


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
# llm-fsm 4.x: a state whose moves the runtime may take itself when their conditions decide (see _deterministic_moves)
THRESHOLD = "auto_transition_threshold"
_KNOWN: dict[str, frozenset[str]] = {
    "fsm": frozenset(f.alias or n for n, f in FSMDefinition.model_fields.items()),
    "state": frozenset(State.model_fields),
    "transition": frozenset(Transition.model_fields),
    "global_transition": frozenset(GlobalTransition.model_fields),
    "condition": frozenset(Condition.model_fields),
}


class DefinitionWarning(UserWarning):
    """A definition loaded, but part of it is ignored or suspicious. ``problem``: where and what (its code
    and hint too, which the message, ``str(problem)``, leaves out), when :func:`load` issued it."""

    def __init__(self, problem: Problem | str) -> None:
        super().__init__(str(problem))
        self.problem = problem if isinstance(problem, Problem) else None


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
        warnings.warn(DefinitionWarning(problem), stacklevel=2)
    return report.definition


def inspect(source: str | os.PathLike[str] | Mapping[str, Any], *, strict: bool = False) -> LoadReport:
    """Like :func:`load`, but return the problems instead of raising."""
    if isinstance(source, Mapping):
        return _Reader(None, None, strict).read(dict(source))
    path = Path(source)
    try:
        raw = read_bytes(path, "definition")
    except OSError as exc:
        problem = Problem("", f"cannot read file: {exc.strerror or exc}", code="unreadable", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    try:
        text = raw.decode("utf-8-sig")  # editors may start a UTF-8 file with a byte order mark: not part of the JSON
    except UnicodeDecodeError as exc:
        problem = Problem("", encoding_message(raw, exc.start), code="encoding", source=str(path))
        return LoadReport(None, [problem], source=str(path))
    return load_text(text, source=str(path), strict=strict)


def load_text(text: str, *, source: str | None = None, strict: bool = False) -> LoadReport:
    """Parse definition JSON text; problems carry line:column positions in ``text``."""

    def failed(message: str, offset: int | None = None, *, code: str = "json", path: str = "") -> LoadReport:
        line, column = line_column(text, offset) if offset is not None else (None, None)
        problem = Problem(_printable(path), _printable(message), line, column, code=code, source=source)
        return LoadReport(None, [problem], source=source)

    try:
        data = json.loads(text, object_pairs_hook=reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        return failed(*json_problem(text, exc))
    except DuplicateKey:
        path, offset, first = first_duplicate(text)
        line, column = line_column(text, first)
        message = f"duplicate key '{path[-1]}' (first at {line}:{column}): a key may appear once in an object"
        return failed(message, offset, code="duplicate_key", path=dotted(path))
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
        checks = FileChecks(self.error)
        checks.graph(data, ids_known=not self._states_without_id)
        checks.tools(data)
        # on a definition whose rules are known good: the keys a state collects are read from its conditions
        for loc, message, code, hint in corrections.problems(definition) if definition and not self.errors else ():
            self.error(loc, message, code=code, hint=hint)
        for loc, message, code, hint, error in clearing.problems(definition) if definition and not self.errors else ():
            (self.error if error else self.warn)(loc, message, code=code, hint=hint)
        for loc, message, code, hint in workflow_checks.problems(definition) if definition and not self.errors else ():
            self.error(loc, message, code=code, hint=hint)
        if definition is not None and not self.errors and subflows.has_subflows(definition):
            self._check_subflows(definition)
        if definition is not None and (untranslated := missing_texts(definition)):
            names = ", ".join(untranslated)
            self.warn(
                ("language",),
                f"no built-in texts in {definition.language!r}: the runtime's {names} message(s) stay in English",
                code="untranslated_texts",
                hint=f'set them under "texts": {{{", ".join(f"{n!r}: ..." for n in untranslated)}}}'.replace("'", '"'),
            )
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
        return Problem(dotted(loc), message, line, column, hint, code, self.source)

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
        for sid, raw in dict_items(data.get("states")):
            states[sid] = state = self._known_fields(raw, ("states", sid), "state")
            transitions = get(state, "transitions")
            if isinstance(transitions, list):
                state["transitions"] = [
                    self._transition(t, ("states", sid, "transitions", i)) for i, t in enumerate(transitions)
                ]
                if get(raw, THRESHOLD) is not None:
                    self._deterministic_moves(sid, raw, state["transitions"])
        if isinstance(data.get("states"), dict):
            data["states"] = states
        moves = data.get("global_transitions")
        if isinstance(moves, list):
            data["global_transitions"] = [
                self._transition(t, ("global_transitions", i), "global_transition") for i, t in enumerate(moves)
            ]
        self._report_fields()
        return data

    def _deterministic_moves(self, sid: str, raw: dict[str, Any], transitions: list[Any]) -> None:
        """An llm-fsm 4.x state's ``auto_transition_threshold``: its transitions with conditions (not
        ``is_deterministic: false``) become automatic, in place; the fields it reads are reported here, once."""
        mapped = [
            i
            for i, (written, move) in enumerate(zip(raw["transitions"], transitions, strict=True))
            if isinstance(move, dict)
            and _can_fail(get(move, "conditions"))
            and get(written, "is_deterministic") is not False
            and "automatic" not in move
        ]
        for i in mapped:
            transitions[i]["automatic"] = True
        used = {
            ("states", sid, THRESHOLD),
            *(("states", sid, "transitions", i, "is_deterministic") for i in range(len(transitions))),
        }
        self._other_fields = [entry for entry in self._other_fields if entry[0] not in used]
        head = f"'{THRESHOLD}' ({raw[THRESHOLD]!r}) in state '{sid}' (llm-fsm 4.1)"
        message, hint = _threshold_words(head, mapped)
        self.warn(("states", sid, THRESHOLD), message, code="mapped_field", hint=hint)

    def _transition(self, transition: Any, loc: tuple[Any, ...], kind: str = "transition") -> Any:
        transition = self._known_fields(transition, loc, kind)
        conditions = get(transition, "conditions")
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


def _printable(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes can make) written as escapes: terminals can print it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _threshold_words(head: str, mapped: list[int]) -> tuple[str, str | None]:
    """The warning about an ``auto_transition_threshold`` (``head`` names it and its state) and its hint."""
    if not mapped:
        return (
            f"{head} is not used: none of its transitions has conditions that can fail and is deterministic, "
            "so the model names each move",
            None,
        )
    names = ", ".join(f"transitions[{i}]" for i in mapped)
    return (
        f'{head}: {names} load as "automatic": true, taken with no model call once their conditions hold; '
        "the threshold's number is not used",
        'moves without conditions (or whose conditions always hold), and those with "is_deterministic": false, '
        "stay the model's to name",
    )


def _can_fail(conditions: Any) -> bool:
    """Whether raw ``conditions`` can fail: one of them requires keys or has a rule other than ``true``. A
    move whose conditions always hold is left to the model: made automatic, its state could never be talked in."""
    return any(get(c, "requires_context_keys") or get(c, "logic") not in (None, True) for c in conditions or ())


def _says_nothing(value: Any, default: object) -> bool:
    """``null``, an empty list or object, or llm-fsm's default: an ignored field set so is not worth a warning."""
    if value is None or value == [] or value == {}:
        return True
    return isinstance(value, bool) == isinstance(default, bool) and value == default


# ---------------------------------------------------------------- field problems, in plain words

_NOUNS: dict[Any, str] = {
    State: "state", Transition: "transition", GlobalTransition: "global transition", Condition: "condition",
    Example: "example line", MemorySpec: "memory", Slot: "memory slot", SummarySpec: "summaries setting",
    StateSummaries: "summaries setting", RuntimeTexts: "texts",
}  # fmt: skip
_WORDS = Vocabulary(
    FSMDefinition,
    nouns=(*_NOUNS.items(), (Check, "check")),
    phrases=((JSONLogic, ("a JsonLogic rule (an object) or true or false", "JsonLogic rules")),),
)


def _describe(tp: Any, *, plural: bool = False) -> str:
    """What a value of type ``tp`` is, in the words of the definition format."""
    return describe(tp, _WORDS, plural=plural)
