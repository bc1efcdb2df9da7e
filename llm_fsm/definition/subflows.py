"""Sub-conversations, the declaration side: loading the definitions a definition's subflow states run,
checking their mappings, and walking the tree of them (see :mod:`llm_fsm.subflows` for what they do)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from llm_fsm.definition.models import FSMDefinition, Subflow
from llm_fsm.definition.opening import keys_read
from llm_fsm.definition.wording import did_you_mean
from llm_fsm.errors import Problem
from llm_fsm.logic import rules as logic

MAX_DEPTH = 4
# the files being loaded, outermost first: a definition that runs itself (through others) is refused
_loading: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("llm_fsm_subflows_loading", default=())

Report = tuple[tuple[Any, ...], str, str, str | None]  # (where, message, code, hint)


def has_subflows(definition: FSMDefinition) -> bool:
    return any(state.subflow is not None for state in definition.states.values())


def attach(definition: FSMDefinition, subflows: Mapping[str, FSMDefinition]) -> FSMDefinition:
    """Attach the definitions ``definition``'s subflow states name (reference -> definition), for a
    definition built in code; returns ``definition``."""
    definition.subflow_definitions.update(subflows)
    return definition


def resolve(
    definition: FSMDefinition, source: str | None, inspect: Callable[..., Any], *, strict: bool = False
) -> tuple[list[Report], list[Problem]]:
    """Load the sub-definitions ``definition`` names (relative to ``source``'s folder, with the loader's
    ``inspect``) and attach them.

    Returns the problems at our paths (warnings have code ``subflow_input``, the rest are errors) and
    the sub-definitions' own problems (with their file as source)."""
    folder = Path(source).parent if source else Path.cwd()
    chain = _loading.get() or ((str(Path(source).resolve()),) if source else ())
    reports: list[Report] = []
    inner: list[Problem] = []
    for sid, state in definition.states.items():
        spec = state.subflow
        if spec is None:
            continue
        loc = ("states", sid, "subflow")
        reports += _state_shape(definition, sid)
        path = _path(folder, spec.definition)
        key = str(path.resolve())
        if key in chain:
            cycle = " → ".join(Path(p).name for p in (*chain[chain.index(key) :], key))
            reports.append(((*loc, "definition"), f"subflows run in a cycle: {cycle}", "subflow_cycle", None))
            continue
        if len(chain) > MAX_DEPTH:
            message = f"subflows nest more than {MAX_DEPTH} deep: {' → '.join(Path(p).name for p in (*chain, key))}"
            reports.append(((*loc, "definition"), message, "subflow_depth", None))
            continue
        token = _loading.set((*chain, key))
        try:
            report = inspect(path, strict=strict)
        finally:
            _loading.reset(token)
        if report.definition is None:
            inner += report.errors
            message = f"the subflow definition '{spec.definition}' does not load ({len(report.errors)} problem(s))"
            reports.append(((*loc, "definition"), message, "subflow_invalid", None))
            continue
        sub = report.definition
        if sub.states[sub.initial_state].terminal:
            message = f"the subflow definition '{sub.name}' starts in a terminal state: it would never talk"
            reports.append(((*loc, "definition"), message, "subflow_invalid", None))
        reports += _mappings(definition, sub, spec, loc)
        definition.subflow_definitions[spec.definition] = sub
    return reports, inner


def _path(folder: Path, reference: str) -> Path:
    path = folder / reference
    if not path.suffix and not path.exists():
        path = path.with_suffix(".json")
    return path


def _state_shape(definition: FSMDefinition, sid: str) -> list[Report]:
    state = definition.states[sid]
    if state.terminal:
        return [(("states", sid, "subflow"), "a subflow state needs transitions (where to go when it returns)",
                 "subflow_terminal", None)]  # fmt: skip
    if all(t.conditions for t in state.transitions):
        message = "a subflow state needs a transition without conditions: the runtime moves on when it returns"
        hint = "add a fallback transition (with the highest priority number) that has no conditions"
        return [(("states", sid, "transitions"), message, "subflow_fallback", hint)]
    return []


def known_keys(definition: FSMDefinition, *, mappings: bool = True) -> set[str]:
    """Every top-level context key ``definition`` names: collected, writable, read by conditions or
    openings, handler-only, in its context schema, tool results, and (``mappings``) its subflows' outputs."""
    keys = set(definition.handler_only_keys) | set(definition.context_schema) | set(definition.code_only_keys)
    for state in definition.states.values():
        keys |= set(state.required_context_keys) | set(state.writable_keys or ())
        for transition in state.transitions:
            for condition in transition.conditions:
                keys |= set(condition.requires_context_keys)
                if condition.logic is not None:
                    keys |= set(logic.keys_read(condition.logic))
        if state.opening is not None:  # an opening's template reads the initial context: what input passes
            keys |= keys_read(state.opening)
        if mappings and state.subflow is not None:
            keys |= set(state.subflow.output)
    return {key.split(".")[0] for key in keys if key}


def _mappings(ours: FSMDefinition, theirs: FSMDefinition, spec: Subflow, loc: tuple[Any, ...]) -> list[Report]:
    reports: list[Report] = []
    their_keys, our_keys = known_keys(theirs), known_keys(ours)
    for their, our in spec.input.items():
        reports += _written(their, (*loc, "input", their))
        if their.split(".")[0] not in their_keys:
            message = f"'{their}' is not a key the subflow definition '{theirs.name}' uses"
            reports.append(((*loc, "input", their), message, "subflow_key", did_you_mean(their, their_keys)))
        if our.split(".")[0] not in our_keys:
            message = f"'{our}' is not a key this definition uses: it must come from code (update_context)"
            reports.append(((*loc, "input", their), message, "subflow_input", did_you_mean(our, our_keys)))
    for our, their in spec.output.items():
        reports += _written(our, (*loc, "output", our))
        if their.split(".")[0] not in their_keys:
            message = f"'{their}' is not a key the subflow definition '{theirs.name}' uses"
            reports.append(((*loc, "output", our), message, "subflow_key", did_you_mean(their, their_keys)))
    return reports


def _written(key: str, loc: tuple[Any, ...]) -> list[Report]:
    if not key or "." in key or key.startswith("_"):
        return [(loc, f"'{key}' is written by the subflow: a plain key, without dots, not starting with '_'",
                 "subflow_key", None)]  # fmt: skip
    return []


def tree(definition: FSMDefinition) -> Iterator[FSMDefinition]:
    """The sub-definitions ``definition`` may run, at any depth, each once."""
    seen: set[int] = {id(definition)}
    todo = [definition]
    while todo:
        for sub in todo.pop().subflow_definitions.values():
            if id(sub) not in seen:
                seen.add(id(sub))
                todo.append(sub)
                yield sub


def unattached(definition: FSMDefinition) -> list[Problem]:
    """A problem per subflow state whose definition is not attached (a definition built in code)."""
    problems = []
    for parent in (definition, *tree(definition)):
        for sid, state in parent.states.items():
            if state.subflow is not None and state.subflow.definition not in parent.subflow_definitions:
                ref = state.subflow.definition
                message = f"state '{sid}' runs subflow '{ref}', which is not loaded"
                hint = (
                    "load the definition from its file (llm_fsm.load), or attach it: subflows.attach(definition, {...})"
                )
                problems.append(Problem(f"states.{sid}.subflow.definition", message, hint=hint,
                                        code="subflow_unloaded", source=parent.name))  # fmt: skip
    return problems
