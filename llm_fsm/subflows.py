"""Sub-conversations: a state that runs another definition, then returns with its results.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_fsm import logic
from llm_fsm.definition import FSMDefinition, Subflow
from llm_fsm.engine import Decision, Exchange, Frame, Snapshot, initial_snapshot, record, unmet_condition, write
from llm_fsm.errors import ConversationError, Problem, ResumeError
from llm_fsm.wording import did_you_mean

if TYPE_CHECKING:
    from llm_fsm.hooks import Hooks
    from llm_fsm.turn import Steps, TurnResult, TurnSettings

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
    definition: FSMDefinition, source: str | None, *, strict: bool = False
) -> tuple[list[Report], list[Problem]]:
    """Load the sub-definitions ``definition`` names (relative to ``source``'s folder) and attach them.

    Returns the problems at our paths (errors first marked by code; warnings have code ``subflow_input``)
    and the sub-definitions' own problems (with their file as source)."""
    from llm_fsm.loader import inspect  # the loader calls us: imported here, not at the top

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
        if sub is None or sub.name != frame.definition or frame.snapshot.state not in sub.states:
            raise ConversationError(
                f"the snapshot's sub-conversation #{depth} ('{frame.definition}' in state '{frame.state}') does not "
                f"match the definition '{parent.name}'",
                state=snapshot.state,
            )
        found.append(sub)
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


def check_restore(definition: FSMDefinition, snapshot: Snapshot, *, allow_changed: bool, strict: bool) -> Snapshot:
    """``snapshot``'s stack checked against ``definition``'s subflows; the frames' hashes brought up to date."""
    if not snapshot.stack:
        return snapshot
    found = levels(definition, snapshot)
    updated = []
    for frame, sub in zip(snapshot.stack, found[1:], strict=True):
        snap = frame.snapshot
        changes = sub.blocking_changes(
            snap.definition_hash, snap.definition_outline, strict=strict, name=snap.definition_name
        )
        if changes and not allow_changed:
            raise ConversationError(
                f"the subflow definition '{sub.name}' changed since this snapshot was taken: {'; '.join(changes)} "
                "(pass allow_changed_definition=True to restore anyway)",
                state=snapshot.state,
            )
        snap = snap.model_copy(update={"definition_hash": sub.content_hash, "definition_outline": sub.outline})
        updated.append(frame.model_copy(update={"snapshot": snap}))
    return snapshot.model_copy(update={"stack": tuple(updated)})


def entered(definition: FSMDefinition, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with the sub-conversations its current state (and theirs) run pushed, if any."""
    defs = levels(definition, snapshot)
    snaps = [snapshot, *(frame.snapshot for frame in snapshot.stack)]
    _push(defs, snaps)
    return _rooted(defs, snaps)


def _push(defs: list[FSMDefinition], snaps: list[Snapshot]) -> list[FSMDefinition]:
    """Push the sub-conversations the innermost level's state runs (changes the lists); the definitions."""
    while (spec := defs[-1].states[snaps[-1].state].subflow) is not None and snaps[-1].status in ("new", "active"):
        if len(defs) > MAX_DEPTH:
            raise ConversationError(f"subflows nest more than {MAX_DEPTH} deep", state=snaps[0].state)
        parent, sub = defs[-1], defs[-1].subflow_definitions[spec.definition]
        values = {their: v for their, our in spec.input.items() if (v := _read(snaps[-1].context, our)) is not _MISSING}
        child = initial_snapshot(sub, None, values)
        child = child.model_copy(update={"provenance": record({}, values, f"parent:{parent.name}", 0)})
        defs.append(sub)
        snaps.append(child)
    return defs


def _rooted(defs: list[FSMDefinition], snaps: list[Snapshot]) -> Snapshot:
    """The root snapshot holding ``snaps[1:]`` as its stack, paused when the innermost level is."""
    root, top = snaps[0], snaps[-1]
    stack = tuple(
        Frame(
            definition=defs[i].name,
            reference=defs[i - 1].states[snaps[i - 1].state].subflow.definition,  # type: ignore[union-attr]
            state=snaps[i - 1].state,
            snapshot=snaps[i],
        )
        for i in range(1, len(snaps))
    )
    update: dict[str, Any] = {"stack": stack}
    if stack:
        status = {"paused": "paused", "new": root.status}.get(top.status, "active")
        update |= {"status": status, "pending": top.pending}
    return root.model_copy(update=update)


def _read(context: Mapping[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


# -- turns --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    """What a stacked turn needs besides its snapshot: the hooks and each definition's settings."""

    hooks: Hooks
    settings: Callable[[FSMDefinition], TurnSettings]
    handle: Any = None


class StackTurn:
    """A turn of a conversation with sub-conversations under way (or that may start one): it runs as
    the innermost level's :class:`~llm_fsm.turn.TurnRunner`, then pops and pushes (see the module)."""

    def __init__(
        self,
        definition: FSMDefinition,
        snapshot: Snapshot,
        runtime: Runtime,
        *,
        user: str | None,
        resume: tuple[str, Mapping[str, Any]] | None = None,
    ) -> None:
        from llm_fsm.turn import TurnRunner, resume_turn

        self.defs = levels(definition, snapshot)
        self.snaps = [snapshot, *(frame.snapshot for frame in snapshot.stack)]
        self.root, self.runtime, self.user = snapshot, runtime, user
        top, top_snapshot = self.defs[-1], self.snaps[-1]
        settings = runtime.settings(top)
        if resume is None:
            self.inner = TurnRunner(top, top_snapshot, runtime.hooks, settings, user=user, handle=runtime.handle)
        else:
            token, result = resume
            if token in snapshot.used_tokens:
                raise ResumeError(
                    "this resume token was already used: a pause is resumed exactly once", state=snapshot.state
                )
            self.inner = resume_turn(
                top, top_snapshot, runtime.hooks, settings, token, dict(result), handle=runtime.handle
            )
        self.token = resume[0] if resume is not None else None
        self.turn_index = snapshot.turns + (1 if user is not None or snapshot.history else 0)
        self.base = snapshot

    def __getattr__(self, name: str) -> Any:  # resuming, decision, work, tool_runs: the inner turn's
        return getattr(self.__dict__["inner"], name)

    @property
    def trace(self) -> Any:
        return self.inner.trace

    @trace.setter
    def trace(self, value: Any) -> None:
        self.inner.trace = value

    @property
    def frame_attributes(self) -> dict[str, Any]:
        """Span attributes: which definition and state the turn runs in, how deep."""
        return {
            "llm_fsm.frame.definition": self.defs[-1].name,
            "llm_fsm.frame.state": self.snaps[-1].state,
            "llm_fsm.frame.depth": len(self.defs) - 1,
        }

    def run(self) -> Steps:
        from llm_fsm.turn import Checkpoint

        steps = self.inner.run()
        sent: Any = None
        try:
            while True:
                step = steps.send(sent)
                if isinstance(step, Checkpoint):  # a frame's snapshot: held as the root's
                    step = Checkpoint(_rooted(self.defs, [*self.snaps[:-1], step.snapshot]))
                sent = yield step
        except StopIteration as done:
            snapshot, result = done.value
        return (yield from self.settle(snapshot, result))

    def settle(self, snapshot: Snapshot, result: TurnResult) -> Steps:
        defs, snaps = list(self.defs), [*self.snaps[:-1], snapshot]
        while len(snaps) > 1 and snaps[-1].status == "ended":
            child = snaps.pop()
            sub = defs.pop()
            snaps[-1] = yield from self.pop_into(defs[-1], snaps[-1], sub, child, result.message)
        for i in range(len(snaps) - 1):  # the levels below the one that committed the turn hear it too
            snaps[i] = _heard(snaps[i], self.user, result.message)
        _push(defs, snaps)
        root = _rooted(defs, snaps)
        if self.token is not None:
            root = root.model_copy(update={"used_tokens": (*root.used_tokens, self.token)})
        opening = self.user is None and not self.root.history
        return root, replace(
            result,
            state=root.state,
            previous_state=None if opening else self.root.state,
            turn=root.turns,
            ended=root.status == "ended",
            status=root.status,
            pending=root.pending,
            context=dict(root.context),
            frames=tuple((f["definition"], f["state"]) for f in frames(defs[0], root)),
            ran_in=(self.defs[-1].name, self.snaps[-1].state) if len(self.defs) > 1 else None,
        )

    def pop_into(
        self, parent: FSMDefinition, snapshot: Snapshot, sub: FSMDefinition, child: Snapshot, message: str
    ) -> Steps:
        """``snapshot`` after its sub-conversation ended: the results written, the move made (with its handlers)."""
        from llm_fsm.turn import TurnRunner

        spec = parent.states[snapshot.state].subflow
        assert spec is not None
        values = {our: v for our, their in spec.output.items() if (v := _read(child.context, their)) is not _MISSING}
        context, provenance = write(snapshot.context, snapshot.provenance, values, by=f"subflow:{sub.name}",
                                    turn=snapshot.turns + 1)  # fmt: skip
        base = snapshot.model_copy(update={"context": context, "provenance": provenance})
        target = next(
            t.target_state
            for t in parent.states[base.state].transitions_by_priority()
            if unmet_condition(t, context) is None
        )  # validate requires a transition without conditions: one always holds
        runner = TurnRunner(parent, base, self.runtime.hooks, self.runtime.settings(parent), user=self.user,
                            handle=self.runtime.handle)  # fmt: skip
        runner.trace = self.inner.trace
        popped, _ = yield from runner.accept(Decision(True, target, context, {}, ()), message)
        return popped


def _heard(snapshot: Snapshot, user: str | None, message: str) -> Snapshot:
    """A level below the one that talked: the exchange in its history, counted as one of its turns."""
    exchange = Exchange(user=user, assistant=message, state=snapshot.state)
    turns = snapshot.turns + (0 if user is None and not snapshot.history else 1)
    return snapshot.model_copy(update={"history": (*snapshot.history, exchange), "turns": turns})
