"""Sub-conversations, the running side: where a conversation is in its stack (the definition and
snapshot of each level), pushing and popping levels, the moves of outer levels offered while an inner one
talks, and :class:`StackTurn`, the turn of a conversation with sub-conversations (see :mod:`llm_fsm.subflows`)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.models import RETURN, FSMDefinition, GlobalTransition, State
from llm_fsm.definition.opening import keys_read, missing_keys
from llm_fsm.definition.subflows import MAX_DEPTH
from llm_fsm.errors import ConversationError, OpeningError, ResumeError
from llm_fsm.snapshot import Exchange, Frame, PendingEvent, Snapshot
from llm_fsm.tools.calling import ToolRun
from llm_fsm.turn.engine import Decision, initial_snapshot, record, write
from llm_fsm.turn.outcomes import accept
from llm_fsm.turn.runner import TurnRunner, plain_turn
from llm_fsm.turn.steps import Checkpoint, Runtime, Step, Steps, TurnResult
from llm_fsm.turn.working import Working
from llm_fsm.values import derived_uid

if TYPE_CHECKING:
    from llm_fsm.telemetry import NoTrace
    from llm_fsm.telemetry.spans import TurnTrace

_MISSING = object()

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


def check_restore(definition: FSMDefinition, snapshot: Snapshot, *, allow_changed: bool, strict: bool) -> Snapshot:
    """``snapshot``'s stack checked against ``definition``'s subflows; the frames' hashes brought up to date."""
    if not snapshot.stack:
        return snapshot
    changed = changed_subflows(definition, snapshot, strict=strict)
    if changed and not allow_changed:
        name, changes = changed[0]
        raise ConversationError(
            f"the subflow definition '{name}' changed since this snapshot was taken: {'; '.join(changes)} "
            "(pass allow_changed_definition=True to restore anyway)",
            state=snapshot.state,
        )
    updated = []
    for frame, sub in zip(snapshot.stack, levels(definition, snapshot)[1:], strict=True):
        snap = frame.snapshot.model_copy(
            update={"definition_hash": sub.content_hash, "definition_outline": sub.outline}
        )
        updated.append(frame.model_copy(update={"snapshot": snap}))
    return snapshot.model_copy(update={"stack": tuple(updated)})


def changed_subflows(definition: FSMDefinition, snapshot: Snapshot, *, strict: bool) -> list[tuple[str, list[str]]]:
    """``(name, changes)`` for each sub-definition of ``snapshot``'s stack whose structure changed since it
    was saved (any change, with ``strict``); ConversationError if the stack no longer fits at all."""
    found = []
    for frame, sub in zip(snapshot.stack, levels(definition, snapshot)[1:], strict=True):
        saved = frame.snapshot
        changes = sub.blocking_changes(
            saved.definition_hash, saved.definition_outline, strict=strict, name=saved.definition_name
        )
        if changes:
            found.append((sub.name, changes))
    return found


def entered(definition: FSMDefinition, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with the sub-conversations its current state (and theirs) run pushed, if any."""
    if not snapshot.stack and definition.states[snapshot.state].subflow is None:
        return snapshot  # nothing to push (most conversations)
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
        # only the keys the parent has: one it lacks is left out of the child's context, not passed as null
        values = {their: v for their, our in spec.input.items() if (v := _read(snaps[-1].context, our)) is not _MISSING}
        # its uid is derived, not random: a retry of this turn pushes the same frame, with the same tool keys
        uid = derived_uid(snaps[-1].uid, snaps[-1].turns, snaps[-1].state, len(snaps), sub.name)
        child = initial_snapshot(sub, None, values, uid=uid)
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
            reference=defs[i - 1].states[snaps[i - 1].state].subflow.definition,  # type: ignore[union-attr]  # entered by a subflow
            state=snaps[i - 1].state,
            snapshot=snaps[i],
        )
        for i in range(1, len(snaps))
    )
    update: dict[str, Any] = {"stack": stack}
    if stack:
        # the root is paused when the level that talks is; a level not started yet leaves the root's status
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


# -- moves from anywhere, while a sub-conversation talks -----------------------------------------


def outer_moves(defs: list[FSMDefinition], snaps: list[Snapshot]) -> dict[str, tuple[int, GlobalTransition]]:
    """The global transitions of the levels below the one that talks that apply where they are, by the
    state each leads to: ``{target: (level, move)}`` (``"$return"`` resolved). Each is judged at its own
    level: its ``except_states`` against that level's state, its conditions on that level's context. An
    inner level's move shadows an outer one's to a state of the same name, and the talking level's own
    states shadow them all (its own ``help`` state is used, not its parent's)."""
    found: dict[str, tuple[int, GlobalTransition]] = {}
    for level in range(len(defs) - 2, -1, -1):
        definition, snapshot = defs[level], snaps[level]
        back_to = definition.return_target(snapshot.state, snapshot.came_from)
        for move in definition.global_moves(snapshot.state):
            target = back_to if move.target_state == RETURN else move.target_state
            if target is None or target in defs[-1].states or target in found:
                continue
            if unmet_condition(move, snapshot.context) is None:
                found[target] = (level, move)
    return found


def offering(defs: list[FSMDefinition], moves: Mapping[str, tuple[int, GlobalTransition]]) -> FSMDefinition:
    """The talking level's definition with ``moves`` as global transitions of its own, each to a
    terminal stand-in state of that name (the turn that reaches one leaves the level; see ``StackTurn``).
    Made once per definition and set of moves."""
    sub = defs[-1]
    if not moves:
        return sub
    key = "outer_moves:" + "|".join(f"{t}@{level}#{id(m)}" for t, (level, m) in sorted(moves.items()))

    def compute(_: State) -> FSMDefinition:
        states, added = dict(sub.states), list(sub.global_transitions)
        for target, (level, move) in moves.items():
            owner = defs[level]
            purpose = f"{owner.states[target].purpose} (this ends '{sub.name}' and goes on in '{owner.name}')"
            states[target] = State(id=target, purpose=purpose.strip())
            added.append(GlobalTransition(target_state=target, description=move.description, priority=move.priority))
        return _changed(sub, states=states, global_transitions=tuple(added))

    return sub.derived(key, sub.initial_state, compute)


def speaking(defs: list[FSMDefinition], top: FSMDefinition) -> FSMDefinition:
    """``top`` (the talking level's definition) in the language of the nearest level below it that names
    one, when it names none itself: a shared sub-definition speaks the language of the conversation that runs
    it, its prompt and the runtime's own words alike (its own ``texts`` first, then that level's)."""
    if top.language or len(defs) < 2:
        return top
    outer = next((d for d in reversed(defs[:-1]) if d.language), None)
    if outer is None:
        return top

    def compute(_: State) -> FSMDefinition:
        return _changed(top, language=outer.language, texts=top.texts or outer.texts)

    return top.derived(f"language:{outer.content_hash}", top.initial_state, compute)


def _changed(definition: FSMDefinition, **update: Any) -> FSMDefinition:
    copy = definition.model_copy(update=update)
    for name in ("_derived", "content_hash", "outline", "_outline_before_prose", "code_only_keys"):
        copy.__dict__.pop(name, None)  # computed again for the copy (the prompt cache keys on the hash)
    return copy


# -- turns --------------------------------------------------------------------------------------


class StackTurn:
    """A turn of a conversation with sub-conversations under way (or that may start one): it runs as
    the innermost level's :class:`~llm_fsm.turn.runner.TurnRunner`, then pops and pushes (see :mod:`llm_fsm.subflows`).
    It implements :class:`~llm_fsm.turn.steps.Turn`: ``base`` is the root's snapshot, the rest the inner turn's."""

    def __init__(
        self,
        definition: FSMDefinition,
        snapshot: Snapshot,
        runtime: Runtime,
        *,
        user: str | None,
        resume: tuple[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.defs = levels(definition, snapshot)
        self.snaps = [snapshot, *(frame.snapshot for frame in snapshot.stack)]
        self.root, self.runtime, self.user = snapshot, runtime, user
        top, top_snapshot = self.defs[-1], self.snaps[-1]
        settings = runtime.settings(top)
        self.outer = outer_moves(self.defs, self.snaps) if len(self.defs) > 1 else {}
        top = speaking(self.defs, offering(self.defs, self.outer))
        if resume is not None and resume[0] in snapshot.used_tokens:
            # every token spent at any level is kept in the root (see settle)
            raise ResumeError(
                "this resume token was already used: a pause is resumed exactly once", state=snapshot.state
            )
        resume = None if resume is None else (resume[0], dict(resume[1]))
        self.inner = plain_turn(top, top_snapshot, runtime, settings, user=user, resume=resume)
        # the outer moves' stand-in states end the inner level at once (see Working.exits)
        self.inner.work.exits = frozenset(self.outer)
        self.token = resume[0] if resume is not None else None
        self.turn_index = snapshot.turns + (1 if user is not None or snapshot.history else 0)
        self.base = snapshot

    # the Turn interface: the inner turn's working state
    @property
    def trace(self) -> TurnTrace | NoTrace:
        return self.inner.trace

    @trace.setter
    def trace(self, value: TurnTrace | NoTrace) -> None:
        self.inner.trace = value

    @property
    def resuming(self) -> PendingEvent | None:
        return self.inner.resuming

    @property
    def decision(self) -> Mapping[str, Any] | None:
        return self.inner.decision

    @property
    def context(self) -> dict[str, Any]:
        return self.inner.context

    @property
    def tool_runs(self) -> list[ToolRun]:
        return self.inner.tool_runs

    @property
    def frame_attributes(self) -> dict[str, Any]:
        """Span attributes: which definition and state the turn runs in, how deep."""
        return {
            "llm_fsm.frame.definition": self.defs[-1].name,
            "llm_fsm.frame.state": self.snaps[-1].state,
            "llm_fsm.frame.depth": len(self.defs) - 1,
        }

    def run(self) -> Steps:
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
        except OpeningError as exc:  # a conversation that opens in a sub-conversation: said in its parent's terms
            if len(self.defs) == 1:
                raise
            raise _opening_error(self.defs, self.snaps, len(self.defs) - 1, self.inner.context, exc) from None
        return (yield from self.settle(snapshot, result))

    def settle(self, snapshot: Snapshot, result: TurnResult) -> Steps:
        """The root after the inner turn: levels dropped, popped (with their results) and pushed."""
        defs, snaps = list(self.defs), [*self.snaps[:-1], snapshot]
        if snapshot.state in self.outer:  # a move of a level below: the levels above it are dropped
            level, _ = self.outer[snapshot.state]
            del defs[level + 1 :], snaps[level + 1 :]
            snaps[-1] = yield from self.move(defs[-1], snaps[-1], snapshot.state, result.message)
        while len(snaps) > 1 and snaps[-1].status == "ended":
            child = snaps.pop()
            sub = defs.pop()
            snaps[-1] = yield from self.pop_into(defs[-1], snaps[-1], sub, child, result.message)
        for i in range(len(snaps) - 1):  # the levels below the one that committed the turn hear it too
            snaps[i] = _heard(snaps[i], self.user, result.message)
        talked = len(snaps)
        _push(defs, snaps)
        if len(snaps) > talked and defs[-1].states[snaps[-1].state].opening is not None:
            result = yield from self.open_pushed(defs, snaps, talked, result)
        root = _rooted(defs, snaps)
        if self.token is not None:
            # kept in the root, whichever level paused: a second resume with it is refused up front (__init__)
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

    def open_pushed(
        self, defs: list[FSMDefinition], snaps: list[Snapshot], talked: int, result: TurnResult
    ) -> Generator[Step, Any, TurnResult]:
        """The opening turn of the sub-conversation just pushed (changes ``snaps``): its initial state writes
        its own opening, so it is said at once, after the move's message, with no model call; as when a
        conversation opens there, its ``start`` handlers run first (a ``Break`` pauses it). The user sees
        both messages as the turn's one; the levels that heard the move hear both too."""
        sub, child = defs[-1], snaps[-1]
        work = Working(sub, child, self.runtime.hooks, self.runtime.settings(sub), user=None,
                       handle=self.runtime.handle)  # fmt: skip
        work.trace = self.inner.trace
        try:
            snaps[-1], opened = yield from TurnRunner(work).turn()
        except OpeningError as exc:
            raise _opening_error(defs, snaps, len(defs) - 1, work.context, exc) from None
        message = f"{result.message}\n\n{opened.message}" if result.message else opened.message
        for i in range(talked):  # each holds this turn's exchange last: it said the move's message only
            last = snaps[i].history[-1]
            history = (*snaps[i].history[:-1], last.model_copy(update={"assistant": message}))
            snaps[i] = snaps[i].model_copy(update={"history": history})
        for i in range(talked, len(snaps) - 1):  # levels pushed on the way to it hear its opening, as at a start
            snaps[i] = _heard(snaps[i], None, opened.message)
        return replace(result, message=message)

    def pop_into(
        self, parent: FSMDefinition, snapshot: Snapshot, sub: FSMDefinition, child: Snapshot, message: str
    ) -> Generator[Step, Any, Snapshot]:
        """``snapshot`` after its sub-conversation ended: the results written, the move made (with its handlers)."""
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
        return (yield from self.move(parent, base, target, message))

    def move(
        self, definition: FSMDefinition, snapshot: Snapshot, target: str, message: str
    ) -> Generator[Step, Any, Snapshot]:
        """``snapshot`` moved to ``target`` with ``message``, the handlers of the move run as for any move."""
        work = Working(definition, snapshot, self.runtime.hooks, self.runtime.settings(definition), user=self.user,
                       handle=self.runtime.handle)  # fmt: skip
        # the inner turn's trace: the spans of the move's handlers belong to this turn
        work.trace = self.inner.trace
        moved, _ = yield from accept(work, Decision(True, target, snapshot.context, {}, ()), message)
        return moved


def _opening_error(
    defs: list[FSMDefinition], snaps: list[Snapshot], level: int, context: Mapping[str, Any], error: OpeningError
) -> OpeningError:
    """``error``, of the opening of the sub-conversation at ``level`` (over ``context``), naming its state
    and sub-definition, and, for a key it lacks, the key of ours its ``input`` reads it from (the context a
    conversation is started with is the root's: the sub-conversation has only what its input passes)."""
    parent, sub, state = defs[level - 1], defs[level], snaps[level].state
    runner = snaps[level - 1].state
    where = f"state '{state}' of the subflow '{sub.name}' (run by state '{runner}' of '{parent.name}')"
    text = sub.states[state].opening or ""
    missing = missing_keys(text, context)
    if missing is None:  # not a missing key: the sandbox refused it, or a value of the wrong kind
        return OpeningError(f"{where}: {str(error).removeprefix(f'state {state!r}: ')}")
    spec = parent.states[runner].subflow
    passed = dict(spec.input) if spec is not None else {}
    advice = []
    for key in sorted(k for k in keys_read(text) if k not in context and f"'{k}'" in missing):
        if key in passed:
            advice.append(f"its input reads '{key}' from '{passed[key]}', which the context of '{parent.name}' lacks")
        else:
            advice.append(f"its input does not pass '{key}': add it to the subflow input of state '{runner}'")
    hint = "; ".join([*advice, "or give it a default: {{ key | default('...') }}"])
    return OpeningError(f"{where}: its opening needs a value its context does not have: {missing} ({hint})")


def _heard(snapshot: Snapshot, user: str | None, message: str) -> Snapshot:
    """A level below the one that talked: the exchange in its history, counted as one of its turns."""
    exchange = Exchange(user=user, assistant=message, state=snapshot.state)
    turns = snapshot.turns + (0 if user is None and not snapshot.history else 1)
    return snapshot.model_copy(update={"history": (*snapshot.history, exchange), "turns": turns})
