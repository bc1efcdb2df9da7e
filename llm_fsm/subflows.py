"""Sub-conversations: a state that runs another definition, then returns with its results.

This module loads and checks them and says where a conversation is in its stack; the turns that push,
run and pop them are in :mod:`llm_fsm.subflow_turns`.

A state declares ``"subflow": {"definition": "identity_check.json", "input": {...}, "output": {...}}``:

- ``definition``: a path relative to the declaring file, or a bare name (``identity_check`` means
  ``identity_check.json`` in the same folder). The loader loads it with the declaring definition and
  attaches it (:attr:`FSMDefinition.subflow_definitions`); a definition built in code attaches its own
  with :func:`attach`.
- ``input``: *its key → our key* (ours may be a dotted path): the sub-conversation's initial context,
  read from ours when it starts (keys we do not have are left out; provenance ``parent:<our name>``).
- ``output``: *our key → its key* (its may be dotted): written into our context when it ends
  (provenance ``subflow:<its name>``); a key it does not have is left alone.

How it runs (the runtime decides; no extra model call):

- **Push.** When a turn ends in a subflow state (a move into it, or the initial state at construction),
  the sub-conversation is pushed onto ``Snapshot.stack``. The message the user sees is the one of the
  turn that moved there; the sub-definition's turns start with the user's next message (its own
  prompts, history and bounds; no opening of its own, which would be a second model call in the turn).
  A conversation whose initial state runs a subflow opens with the sub-definition's opening.
- **Turns.** While the stack is not empty, every turn (send, stream, resume) runs in the innermost
  sub-conversation. Its exchange is also added to the history of each level below it, so a parent's
  prompt, once it talks again, knows what was said.
- **Pop.** When a sub-conversation's turn ends in one of its terminal states, its ``output`` is
  written into our context, it is popped, and our state moves along its first transition, by priority,
  whose conditions hold on the merged context (``validate`` requires a transition without conditions,
  so one always does): the handlers of that move run as for any move (a ``Break`` pauses as usual). The
  user sees the sub-definition's terminal message. A move back to the state itself runs the
  sub-definition again; a move into another subflow state pushes that one; a move into our own terminal
  state ends us, which may pop the level below in turn.
- **Moves from anywhere.** A sub-conversation's turn also offers the global transitions of the levels
  below it that apply where they are (judged there); its own states shadow theirs by name. Taking one
  drops the sub-conversations above that level (no ``output``) and moves it, handlers and all.
- **Pauses.** A ``Break`` or a tool approval inside a sub-conversation pauses the whole conversation:
  the root snapshot is ``paused`` with the same pending event, and ``resume`` with its token continues
  the sub-conversation, exactly once (the token is also spent in the root).
- **Bounds.** At most :data:`MAX_DEPTH` sub-conversations deep; a definition that runs itself, directly
  or through others, does not load.

``Conversation.state`` and ``TurnResult.state`` stay the root definition's; ``TurnResult.frames`` and
``Conversation.frames`` say where in the stack the conversation is, and ``TurnResult.ran_in`` which
definition and state the turn ran in.

Left out on purpose: a ``Break`` on entering a subflow state (``state_enter``) pauses before the push;
its resume is an ordinary turn of that state, whose model may move on without the sub-conversation.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_fsm import logic
from llm_fsm.definition import FSMDefinition, Subflow
from llm_fsm.engine import Snapshot
from llm_fsm.errors import ConversationError, Problem
from llm_fsm.wording import did_you_mean

if TYPE_CHECKING:
    pass

MAX_DEPTH = 4
_MISSING = object()
_loading: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("llm_fsm_subflows_loading", default=())

# -- loading and checking ---------------------------------------------------------------------

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
    """Every top-level context key ``definition`` names: collected, writable, read by conditions,
    handler-only, in its context schema, tool results, and (``mappings``) its subflows' outputs."""
    keys = set(definition.handler_only_keys) | set(definition.context_schema) | set(definition.code_only_keys)
    for state in definition.states.values():
        keys |= set(state.required_context_keys) | set(state.writable_keys or ())
        for transition in state.transitions:
            for condition in transition.conditions:
                keys |= set(condition.requires_context_keys)
                if condition.logic is not None:
                    keys |= set(logic.keys_read(condition.logic))
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


# -- the stack ----------------------------------------------------------------------------------


def levels(definition: FSMDefinition, snapshot: Snapshot) -> list[FSMDefinition]:
    """The definitions of the root and of each frame of ``snapshot``'s stack (ConversationError if one
    does not match the definition that would run there)."""
    found = [definition]
    for depth, frame in enumerate(snapshot.stack, 1):
        parent = found[-1]
        state = parent.states.get(frame.state)
        spec = state.subflow if state is not None else None
        sub = parent.subflow_definitions.get(spec.definition) if spec is not None else None
        where = f"the snapshot's sub-conversation #{depth} ('{frame.definition}' in state '{frame.state}')"
        if state is None:
            why = f"state '{frame.state}' is no longer in the definition '{parent.name}'"
        elif sub is None:
            why = f"state '{frame.state}' of '{parent.name}' no longer runs a subflow"
        elif sub.name != frame.definition:
            why = f"state '{frame.state}' of '{parent.name}' now runs '{sub.name}', not '{frame.definition}'"
        elif frame.snapshot.state not in sub.states:
            why = f"its state '{frame.snapshot.state}' is no longer in the subflow definition '{sub.name}'"
        else:
            found.append(sub)
            continue
        raise ConversationError(f"{where} cannot continue: {why}", state=snapshot.state)
    return found


def frames(definition: FSMDefinition, snapshot: Snapshot) -> list[dict[str, Any]]:
    """Where the conversation is: ``{"definition", "state"}`` for the root and each sub-conversation."""
    names = [definition.name, *(frame.definition for frame in snapshot.stack)]
    states = [snapshot.state, *(frame.snapshot.state for frame in snapshot.stack)]
    return [{"definition": name, "state": state} for name, state in zip(names, states, strict=True)]


def innermost(definition: FSMDefinition, snapshot: Snapshot) -> tuple[FSMDefinition, Snapshot]:
    """The definition and snapshot of the level that talks: the last sub-conversation, or the root."""
    if not snapshot.stack:
        return definition, snapshot
    return levels(definition, snapshot)[-1], snapshot.stack[-1].snapshot


def breadcrumb(definition: FSMDefinition, snapshot: Snapshot) -> str:
    """``claim › identity_check: ask_dob`` (the root's state left out when a sub-conversation talks)."""
    where = frames(definition, snapshot)
    return " › ".join(f["definition"] for f in where) + f": {where[-1]['state']}"
