"""One turn, written as a generator of model calls, so that sync, async and streaming runners share it.

``TurnRunner.run()`` yields :class:`Call` objects and receives each call's ``LLMResponse``; it
returns the new snapshot and the :class:`TurnResult`. Nothing outside the runner changes until the
caller assigns that snapshot, so a turn that raises (or is abandoned) changes nothing.

Order of a turn::

    start (opening only) → before_llm_call → [model call → after_reply → decide → checks]
        (invalid reply or failed checks: a corrective call with the reasons, within the budgets)
    → context_update → before_transition → state_exit → commit → after_transition → state_enter → end

A ``Break`` raised before the commit pauses the conversation in the state it was in (the move is
not made); raised after it, in the new state.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable, Generator, Mapping
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from llm_fsm import checks, summaries
from llm_fsm.contract import Reply, parse_reply, partial_reply, state_reply_schemas
from llm_fsm.definition import Check, FSMDefinition
from llm_fsm.engine import (
    Decision,
    Origin,
    PendingEvent,
    Rejection,
    RejectionKind,
    Snapshot,
    commit,
    decide,
    merge,
    record,
    resumed,
    write,
)
from llm_fsm.errors import RefinementError, ReplyFormatError, ReplyTruncated, ResumeError
from llm_fsm.guided import guided_schema, portable_patterns
from llm_fsm.hooks import Await, Break, Handler, Hooks, Invocation, Run, call, logger, may_run, new_token, now, selected
from llm_fsm.llm import LLMRequest, LLMResponse, ToolCallRequest, Usage
from llm_fsm.memory import MemoryAccess, apply_model_update, with_memory_update
from llm_fsm.prompt import PromptBuilder
from llm_fsm.telemetry import NO_TRACE, NoTrace
from llm_fsm.tools import calling
from llm_fsm.tools.calling import BoundTool, Prepared, ToolMode, ToolRun
from llm_fsm.values import as_json_data, clean_text

if TYPE_CHECKING:
    from llm_fsm.telemetry.spans import TurnTrace

DEFAULT_PAUSE_MESSAGE = "One moment, please: this needs to be checked before we continue."
DEFAULT_FALLBACK = "Sorry, I couldn't take that step yet. Could you tell me a bit more?"
DEFAULT_APPROVAL_MESSAGE = "One moment, please: a person has to approve this step before I can go on."
NO_MORE_TOOLS = "no more tool calls in this turn: give your final reply now, with what you have"
INTERRUPTED = (
    "the process running this approved call stopped before its result was saved: it may have run, so it is "
    "not run again (a tool that takes an idempotency_key would be, with the same key)"
)

Preview = Callable[[Any], bool]
Purpose = Literal["reply", "correction", "refinement", "tool_results", "judge", "summary"]
Problems = tuple[Rejection, ...]
_BEFORE_COMMIT = ("after_reply", "context_update", "before_transition", "state_exit")


@dataclass(frozen=True)
class TurnSettings:
    """How turns run: the prompt builder, the call budgets, and the message of a turn that found no valid reply."""

    prompt: PromptBuilder
    max_corrections: int = 1
    max_calls_per_turn: int = 8
    fallback_message: str = DEFAULT_FALLBACK
    tools: Mapping[str, BoundTool] = field(default_factory=dict)
    tool_mode: Callable[[], ToolMode] = field(default=lambda: "native")  # asked only in states with tools
    guided: bool = False  # a reply schema made per turn, for small models (see llm_fsm.guided)
    summary_llm: Any = None  # the client of summary calls (None: the conversation's own)
    background_summaries: bool = False  # summaries run after the turn returns (see llm_fsm.summaries)


@dataclass(frozen=True)
class Call:
    """A model call the turn needs: the reply itself, a judge grading a proposed reply, or a summary
    (see :mod:`llm_fsm.summaries`; made with ``llm`` when it is set, and whose failure the driver sends
    back as a ``summaries.CallFailed`` instead of raising it).

    ``preview(partial_object)`` says whether a reply with that transition would be accepted, decided on
    the very context the turn decides on; a driver may show the reply's message as it streams once
    this says yes. It is None when nothing may be shown before the turn ends (judge calls, states
    with checks, and states whose ``after_reply`` handlers may change the context).
    """

    kind: Literal["reply", "judge", "summary"]
    request: LLMRequest
    preview: Preview | None = field(default=None, repr=False)
    # why it is made: the turn's first call, a correction of an invalid reply, a retry after failed checks,
    # the call that reads tool results, a judge, or a summary of the history
    purpose: Purpose = "reply"
    llm: Any = field(default=None, repr=False)  # another client than the conversation's (a summary's)


@dataclass(frozen=True)
class RunTools:
    """Tool calls the turn needs run (all at once); the driver sends back their :class:`ToolRun` list."""

    calls: tuple[Prepared, ...]


@dataclass(frozen=True)
class Checkpoint:
    """A snapshot the conversation must hold from now on, whatever happens to the rest of the turn: a
    person approved a tool call, which is about to run or has run, so a retry must not run it again.
    A driver with a store saves it (version-checked) before it takes the turn on."""

    snapshot: Snapshot


# what a turn asks its driver for: a model call, an awaitable (async only), tools to run, a checkpoint
Step = Call | Await | RunTools | Checkpoint
Steps = Generator[Step, Any, "tuple[Snapshot, TurnResult]"]


@dataclass(frozen=True)
class TurnResult:
    """What one turn did. ``previous_state`` is None for the opening message."""

    message: str
    state: str
    previous_state: str | None
    user: str | None
    turn: int
    context_updates: dict[str, Any]
    rejected: tuple[Rejection, ...]
    llm_calls: int
    usage: Usage
    latency: float
    ended: bool
    context: dict[str, Any] = field(repr=False)
    status: str = "active"
    pending: PendingEvent | None = None
    tool_calls: tuple[ToolRun, ...] = ()
    memory_updates: dict[str, str] = field(default_factory=dict)  # slots written in the turn (model or handlers)
    summary: summaries.SummaryRun | None = None  # the summary call made in the turn (not in llm_calls)
    # with subflows (llm_fsm.subflows): (definition, state) of the root and each sub-conversation after the
    # turn, and the (definition, state) of the sub-conversation the turn ran in (None: the root's)
    frames: tuple[tuple[str, str], ...] = ()
    ran_in: tuple[str, str] | None = None

    @property
    def transitioned(self) -> bool:
        return self.previous_state is not None and self.previous_state != self.state

    @property
    def paused(self) -> bool:
        return self.pending is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the shape ``llm-fsm run`` prints)."""
        return {
            "turn": self.turn,
            "user": self.user,
            "message": self.message,
            "state": self.state,
            "previous_state": self.previous_state,
            "context": self.context,
            "context_updates": self.context_updates,
            "llm_calls": self.llm_calls,
            "rejected": [r.model_dump(exclude_none=True) for r in self.rejected],
            "usage": asdict(self.usage),
            "latency_ms": round(self.latency * 1000, 3),
            "ended": self.ended,
            "status": self.status,
            "pending": self.pending.model_dump() if self.pending else None,
            "tool_calls": [run.model_dump() for run in self.tool_calls],
            "memory_updates": self.memory_updates,
            "summary": self.summary.to_dict() if self.summary else None,
            **({"frames": [list(f) for f in self.frames], "ran_in": self.ran_in} if self.frames else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnResult:
        """The result :meth:`to_dict` gave: ``TurnResult.from_dict(r.to_dict()).to_dict() == r.to_dict()``
        (how a stored answer is given again, see :mod:`llm_fsm.store.idempotency`)."""
        pending, summary, ran_in = data["pending"], data["summary"], data.get("ran_in")
        return cls(
            message=data["message"], state=data["state"], previous_state=data["previous_state"], user=data["user"],
            turn=data["turn"], context_updates=data["context_updates"],
            rejected=tuple(Rejection.model_validate(r) for r in data["rejected"]), llm_calls=data["llm_calls"],
            usage=Usage(**data["usage"]), latency=data["latency_ms"] / 1000, ended=data["ended"],
            context=data["context"], status=data["status"],
            pending=None if pending is None else PendingEvent.model_validate(pending),
            tool_calls=tuple(ToolRun.model_validate(run) for run in data["tool_calls"]),
            memory_updates=data["memory_updates"],
            summary=None if summary is None else summaries.SummaryRun.from_dict(summary),
            frames=tuple((f[0], f[1]) for f in data.get("frames", ())),
            ran_in=None if ran_in is None else (ran_in[0], ran_in[1]),
        )  # fmt: skip


@dataclass
class _Working:
    """The context and provenance as the turn changes them (committed only at the end)."""

    context: dict[str, Any]
    provenance: dict[str, Origin]


class TurnRunner:
    """Runs one turn from ``base``: ``user`` text, or None for the opening or a resume.

    It reads nothing but its inputs; ``handle`` is passed to handlers as ``conversation``.
    """

    def __init__(
        self,
        definition: FSMDefinition,
        base: Snapshot,
        hooks: Hooks,
        settings: TurnSettings,
        *,
        user: str | None,
        note: str | None = None,
        handle: Any = None,
        resuming: PendingEvent | None = None,
        paused: Snapshot | None = None,
        decision: Mapping[str, Any] | None = None,
    ) -> None:
        self.definition = definition
        self.base = base
        self.hooks = hooks
        self.settings = settings
        self.user = user
        self.note = note  # the user-turn text of an opening or a resume
        self.handle = handle
        self.resuming = resuming  # the pause this turn continues: its handlers that ran are not run again
        self.paused = paused  # the snapshot that paused (a tool approval's checkpoint is made from it)
        self.decision = decision  # a person's decision about the tool call the pause waits for
        self.started = time.perf_counter()
        self.calls = 0
        self.usage = Usage()
        self.rejected: list[Rejection] = []
        self.work = _Working(dict(base.context), dict(base.provenance))
        self.memory = MemoryAccess(definition, base.memory)  # handlers' ``memory``: the turn's working memory
        self.memory_proposal: dict[str, Any] = {}  # the memory_update of the last reply read
        self.last_decision: Decision | None = None
        self.messages: list[dict[str, Any]] = []
        self.tool_runs: list[ToolRun] = []
        self.rounds = 0  # rounds of tool calls made in this turn
        self.keyed: Counter[str] = Counter()  # calls of each tool given an idempotency key in this turn
        self.corrected: list[dict[str, Any]] = []  # the last correction's exchange, kept if tools follow it
        self._working: Snapshot | None = None
        self.turn_index = base.turns + (1 if user is not None or base.history else 0)
        self.trace: TurnTrace | NoTrace = NO_TRACE  # the driver's, when the turn is traced
        # states that leave this level for a level below it (llm_fsm.subflow_turns): reached without
        # this level's handlers or summaries, since the level is dropped at once
        self.exits: frozenset[str] = frozenset()

    # -- the turn -------------------------------------------------------------------------------

    def run(self) -> Steps:
        """The turn, with the summary calls around it: a summary still due first (background mode),
        or, once the turn is decided, the one it made due."""
        caught_up = None
        if self.settings.background_summaries and self.base.summary.pending:
            self.base, caught_up = yield from summary_steps(self.definition, self.base, self.settings)
        snapshot, result = yield from self.turn()
        if snapshot.state in self.exits:
            return snapshot, result
        snapshot = summaries.mark_due(self.definition, snapshot, self.settings.prompt.settings.history_window)
        made = caught_up
        if not self.settings.background_summaries and snapshot.summary.pending:
            snapshot, made = yield from summary_steps(self.definition, snapshot, self.settings)
        return snapshot, replace(result, summary=made) if made is not None else result

    def turn(self) -> Steps:
        state = self.base.state
        if self.resuming is not None and self.resuming.kind == "tool_approval":
            return (yield from self.continue_after_approval())
        if self.resuming is not None and self.definition.states[state].terminal:
            return (yield from self.close_terminal())
        try:
            if not self.base.history and self.user is None:
                yield from self.fire("start", state)
            yield from self.fire("before_llm_call", state)
        except Break as pause:
            return self.pause(pause, state, pause.message or DEFAULT_PAUSE_MESSAGE)
        self.messages = self.prompt_messages()
        return (yield from self.replies(self.request(self.messages)))

    def replies(self, request: LLMRequest, purpose: Purpose = "reply") -> Steps:
        """Model calls until a reply is accepted (tool rounds and corrections in between), or the budgets end."""
        state = self.base.state
        corrections = refinements = 0
        while True:
            response = yield self.reply_call(request, purpose)
            self.count(response)
            if calls := self.requested_tools(response):
                paused = yield from self.use_tools(calls, response)
                if paused is not None:
                    return paused
                if not self.budget_left():
                    return (yield from self.exhausted(False))
                request, purpose = self.request(self.messages), "tool_results"
                continue
            try:
                decision, reply, problems = yield from self.verdict(response)
            except Break as pause:  # an after_reply handler: before the commit, so the move is not made
                return self.pause(pause, state, pause.message or DEFAULT_PAUSE_MESSAGE)
            if decision is not None and reply is not None and not problems:
                return (yield from self.accept(decision, reply.message))
            refining = bool(problems) and all(p.kind in ("check", "context_value") for p in problems)
            corrections += not refining
            refinements += refining
            if not self.may_retry(corrections, refinements, refining):
                return (yield from self.exhausted(refining))
            request, purpose = self.correction(response.text, problems), "refinement" if refining else "correction"

    def verdict(self, response: LLMResponse) -> Generator[Step, Any, tuple[Decision | None, Reply | None, Problems]]:
        """Parse and check one reply; the problems that call for another try (none: accepted)."""
        try:
            if response.finish_reason == "length":
                raise ReplyTruncated(
                    f"the reply was cut off at the token limit after {len(response.text)} characters: "
                    "answer again, with a shorter message"
                )
            reply = parse_reply(response.text)
        except ReplyFormatError as exc:
            kind: RejectionKind = "truncated" if isinstance(exc, ReplyTruncated) else "format"
            problem = Rejection(kind=kind, reason=str(exc), attempt=self.calls)
            self.rejected.append(problem)
            return None, None, (problem,)
        yield from self.fire("after_reply", self.base.state, reply=reply, message=reply.message)
        decision = decide(self.definition, self.working(), reply, attempt=self.calls)
        self.rejected.extend(decision.rejected)
        self.memory_proposal = reply.transition.memory_update
        if self.memory_proposal:  # reported now; applied with the reply the turn settles on
            self.rejected.extend(self.memory_written(attempt=self.calls)[2])
        self.last_decision = decision
        problems = tuple(r for r in decision.rejected if r.kind != "context_key")
        if problems:
            return decision, reply, problems
        failures = yield from self.run_checks(decision, reply.message)
        self.rejected.extend(failures)
        return decision, reply, tuple(failures)

    def run_checks(self, decision: Decision, message: str) -> Generator[Step, Any, list[Rejection]]:
        state = self.definition.states[self.base.state]
        proposal = checks.Proposal(message, state.id, decision.state, decision.context, decision.applied, self.user)
        failures: list[Rejection] = []
        for index, check in enumerate(state.checks):
            if check not in checks.applicable(state, proposal):
                continue
            if isinstance(check, checks.JudgeCheck) and failures:
                continue  # the turn is asked again anyway: do not pay for a judge
            name = checks.name_of(check, index)
            with self.trace.check(name, check.kind, state.id) as span:
                why = yield from self.check_failure(check, proposal, span.run)
                span.verdict(why)
            if why:
                key = check.key if isinstance(check, checks.SchemaCheck) else None
                reason = f"check '{name}' failed: {why}"
                failures.append(Rejection(kind="check", reason=reason, key=key, attempt=self.calls))
        return failures

    def check_failure(self, check: Check, proposal: checks.Proposal, run: Run) -> Generator[Step, Any, str | None]:
        """Why ``check`` fails on ``proposal`` (None: it passes); a judge is a model call of the turn."""
        if isinstance(check, checks.JudgeCheck):
            if not self.budget_left():
                return "no LLM calls left in this turn to run the judge"
            messages = self.settings.prompt.judge_messages(self.definition, check.rubric, proposal)
            response = yield Call("judge", LLMRequest(messages, kind="judge", state=proposal.state), purpose="judge")
            self.count(response)
            return checks.judge_failure(response.text)
        if isinstance(check, checks.PythonCheck):
            return (yield from checks.python_failure(check, proposal, self.hooks, run))
        return checks.failure(check, proposal)

    def accept(self, decision: Decision, message: str) -> Generator[Step, Any, tuple[Snapshot, TurnResult]]:
        """Commit an accepted reply, running the handlers around the commit."""
        current, target = self.base.state, decision.state
        self.set(decision.context, decision.applied, "llm")
        if target in self.exits:
            return self.finish(target, message, decision.applied)
        if self.memory_proposal:
            self.memory.written, applied, _ = self.memory_written()
            self.memory.changed.update(applied)
        try:
            if decision.applied:
                keys = frozenset(decision.applied)
                yield from self.fire("context_update", current, keys=keys, update=decision.applied)
            if target != current:
                yield from self.fire("before_transition", current, target=target, message=message)
                yield from self.fire("state_exit", current, target=target, message=message)
        except Break as pause:
            return self.pause(pause, current, pause.message or DEFAULT_PAUSE_MESSAGE)
        try:
            if target != current:
                yield from self.fire("after_transition", current, target=target, message=message)
                yield from self.fire("state_enter", target, target=target, message=message)
            if self.definition.states[target].terminal:
                yield from self.fire("end", target, message=message)
        except Break as pause:
            return self.pause(pause, target, message)
        return self.finish(target, message, decision.applied)

    def exhausted(self, refining: bool) -> Generator[Step, Any, tuple[Snapshot, TurnResult]]:
        """No valid reply within the budgets: stay with the valid updates, or the state's policy.

        The fallback message describes no move, so it is true whichever state the turn ends in.
        """
        state = self.definition.states[self.base.state]
        if refining and state.on_exhausted == "raise":
            failures = tuple(r for r in self.rejected if r.kind in ("check", "context_value"))
            message = f"state '{state.id}': checks still failing after {state.max_retries} retries"
            raise RefinementError(message, state=state.id, failures=failures)
        self.trace.note("llm_fsm.fallback", True)
        target = state.id
        if refining and state.on_exhausted == "fallback_state" and state.fallback_state:
            target = state.fallback_state
        failed_keys = {r.key for r in self.rejected if r.kind == "check" and r.key}
        kept: dict[str, Any] = self.last_decision.applied if self.last_decision else {}
        applied = {k: v for k, v in kept.items() if k not in failed_keys}
        decision = Decision(True, target, merge(self.work.context, applied), applied, ())
        return (yield from self.accept(decision, self.settings.fallback_message))

    # -- helpers --------------------------------------------------------------------------------

    def may_retry(self, corrections: int, refinements: int, refining: bool) -> bool:
        state = self.definition.states[self.base.state]
        within = refinements <= state.max_retries if refining else corrections <= self.settings.max_corrections
        return within and self.budget_left()

    def budget_left(self) -> bool:
        return self.calls < self.settings.max_calls_per_turn

    def request(self, messages: list[dict[str, Any]], *, longer: bool = False) -> LLMRequest:
        back_to = self.definition.return_target(self.base.state, self.base.came_from)  # where "$return" goes
        strict: dict[str, Any] | None  # None: no strict schema this turn
        schema, strict = self.reply_schemas(back_to)
        tools = self.state_tools()
        specs: tuple[dict[str, Any], ...] | None = None
        if tools and self.tool_mode() == "native":
            specs = tuple(tool.spec() for tool in tools)
        elif tools and self.rounds < self.tool_round_limit():  # the JSON form: a reply may be a tool request
            # instead, while rounds are left (after them the schema, and a grammar held to it, asks for the answer)
            schema = {"anyOf": [schema, calling.JSON_REQUEST_SCHEMA]}
            # a grammar-driven server takes the alternatives; a provider's strict mode wants one object.
            # Guided (a small model, which repeats a call it has the answer of): each tool once per turn
            ran = {run.name for run in self.tool_runs if run.error is None}
            fresh = [tool for tool in tools if tool.name not in ran]
            if not self.settings.guided:
                strict = None
            elif fresh:
                most = min(self.definition.max_tool_calls, len(fresh))
                strict = {"anyOf": [strict, calling.json_request_schema(fresh, most)]}
        if self.settings.guided and strict is not None:  # for a grammar: patterns in the classes servers read
            strict = portable_patterns(strict)
        return LLMRequest(
            messages, schema, strict, state=self.base.state, context=self.work.context, longer=longer, tools=specs,
            back_to=back_to, definition=self.definition.name,
        )  # fmt: skip

    def reply_schemas(self, back_to: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The loose and strict reply schemas of this turn (guided: made for it), with the memory's update;
        ``back_to``: where a ``"$return"`` move leads from here (None: nowhere)."""
        definition, state = self.definition, self.base.state
        if definition.memory is None:
            schema, strict = state_reply_schemas(definition, state, back_to)
        else:  # the state's schemas with the memory's update, made once per state and way back

            def compute(_: Any) -> tuple[dict[str, Any], dict[str, Any]]:
                loose, closed = state_reply_schemas(definition, state, back_to)
                loose = with_memory_update(loose, definition, strict=False)
                return loose, with_memory_update(closed, definition, strict=True)

            schema, strict = definition.derived(f"memory_reply_schemas:{back_to}", state, compute)
        if self.settings.guided:
            opening = not self.base.history and self.user is None
            guided = guided_schema(definition, state, self.work.context, opening=opening, back_to=back_to)
            strict = with_memory_update(guided, definition, strict=True, guided=True)
        return schema, strict

    def correction(self, text: str, problems: tuple[Rejection, ...]) -> LLMRequest:
        feedback = self.settings.prompt.correction(problems, self.base.state)
        self.corrected = [{"role": "assistant", "content": text}, {"role": "user", "content": feedback}]
        return self.request([*self.messages, *self.corrected], longer=any(p.kind == "truncated" for p in problems))

    def prompt_messages(self) -> list[dict[str, Any]]:
        tools = self.state_tools()
        mode = self.tool_mode() if tools else "native"
        return self.settings.prompt.messages(
            self.definition, self.working(), self.user or self.note, tools=tools, tool_mode=mode,
            guided=self.settings.guided,
        )  # fmt: skip

    # -- tools ----------------------------------------------------------------------------------

    def state_tools(self) -> list[BoundTool]:
        """The tools the model may call now (none once the state allows no rounds of calls)."""
        bound = self.settings.tools
        if self.tool_round_limit() == 0:
            return []
        return [bound[name] for name in self.definition.states[self.base.state].tools if name in bound]

    def tool_round_limit(self) -> int:
        state = self.definition.states[self.base.state]
        return self.definition.max_tool_rounds if state.max_tool_rounds is None else state.max_tool_rounds

    def tool_mode(self) -> ToolMode:
        return self.settings.tool_mode()

    def requested_tools(self, response: LLMResponse) -> list[ToolCallRequest]:
        """The tool calls a response asks for: native ones, or a reply in the JSON form (in states with tools)."""
        if response.tool_calls:
            return list(response.tool_calls)
        if not self.definition.states[self.base.state].tools or self.tool_mode() != "json":
            return []
        return calling.requested_in_text(response.text, self.rounds + 1)

    def use_tools(
        self, calls: list[ToolCallRequest], response: LLMResponse
    ) -> Generator[Step, Any, tuple[Snapshot, TurnResult] | None]:
        """One round of tool calls: checked, run (all at once), their results given to the model.

        A call that needs a person's approval pauses the turn (returned: the pause) after the others ran.
        """
        state = self.definition.states[self.base.state]
        self.rounds += 1
        limit = self.tool_round_limit()
        calls = calling.unique_ids(calls, self.rounds)
        prepared = [calling.prepare(c, state, self.settings.tools, self.work.context, self.rounds) for c in calls]
        if self.rounds > limit:
            prepared = [calling.Prepared(p.call, None, p.arguments, self.rounds, NO_MORE_TOOLS) for p in prepared]
        most = self.definition.max_tool_calls
        if len(prepared) > most:  # the first ones run; the rest are refused, and the model is told why
            extra = f"too many calls at once: at most {most} per round"
            prepared[most:] = [calling.Prepared(p.call, None, p.arguments, self.rounds, extra) for p in prepared[most:]]
        prepared = [self.keyed_call(p) for p in prepared]
        held = next((p for p in prepared if p.error is None and p.needs_approval), None)
        ready = tuple(p for p in prepared if p.error is None and not p.needs_approval)
        ran = iter((yield RunTools(ready)) if ready else ())
        runs = []
        for p in prepared:
            if p.error is not None:
                runs.append(p.refused(p.error))
            elif p is held:
                continue
            elif p.needs_approval:
                runs.append(p.refused("needs a person's approval: call it again once the pending call is decided"))
            else:
                runs.append(next(ran))
        self.apply_tools(runs)
        if held is not None:
            return self.pause_for_approval(held)
        # the correction this call answered stays in what the model reads next; earlier requests keep theirs
        self.messages = [*self.messages, *self.corrected, *self.tool_exchange(runs, response.text)]
        self.corrected = []
        return None

    def keyed_call(self, prepared: Prepared) -> Prepared:
        """``prepared`` with its idempotency key, if it may run: that of the n-th call of its tool in this turn."""
        if prepared.error is not None:
            return prepared
        name = prepared.call.name
        key = calling.call_key(self.base.uid, self.turn_index, name, self.keyed[name])
        self.keyed[name] += 1
        return replace(prepared, key=key)

    def apply_tools(self, runs: list[ToolRun]) -> None:
        """Record the runs: a rejection for each error, each result under its tool's ``result_key``."""
        for run in runs:
            self.tool_runs.append(run)
            tool = self.settings.tools.get(run.name)
            if run.error is not None:
                reason = f"tool '{run.name}': {run.error}"
                self.rejected.append(Rejection(kind="tool", reason=reason, attempt=self.calls))
            elif tool is not None and tool.result_key:  # replaced, not merged: a result is a whole
                key, by = tool.result_key, f"tool:{run.name}"
                self.work.context = {**self.work.context, key: copy.deepcopy(run.result)}
                self.work.provenance = record(self.work.provenance, [key], by, self.turn_index)

    def tool_exchange(self, runs: list[ToolRun], text: str | None) -> list[dict[str, Any]]:
        """The messages that ask for ``runs`` and give their results (secret-looking values masked, as
        in the context the model reads), in this model's form."""
        runs = [calling.masked(run, self.definition.masked) for run in runs]
        if self.tool_mode() == "native":
            return calling.native_exchange(runs, text)
        # the request as the runtime read it, not the model's raw text: its arguments masked like the results
        return [
            {"role": "assistant", "content": calling.json_request_text(runs)},
            {"role": "user", "content": self.settings.prompt.tool_results(runs)},
        ]

    def pause_for_approval(self, held: Prepared) -> tuple[Snapshot, TurnResult]:
        """Pause before ``held`` runs: the pending event carries the call and the turn's earlier calls."""
        state = self.base.state
        waiting = ToolRun(
            id=held.call.id, name=held.call.name, arguments=held.arguments, round=held.round, idempotency_key=held.key
        )
        event = PendingEvent(
            reason=f"tool '{held.call.name}' needs approval",
            payload={"tool": held.call.name, "arguments": held.arguments},
            created_at=now(),
            token=new_token(),
            state=state,
            kind="tool_approval",
            tool_call=waiting.model_dump(),
            tool_runs=tuple(run.model_dump() for run in self.tool_runs),
        )
        return self.finish(state, DEFAULT_APPROVAL_MESSAGE, {}, pending=event)

    def continue_after_approval(self) -> Steps:
        """The rest of a turn paused for a tool call's approval: the call as decided, then the model again."""
        pause, self.resuming = self.resuming, None
        assert pause is not None and pause.tool_call is not None
        earlier = [ToolRun.model_validate(run) for run in pause.tool_runs]
        held = ToolRun.model_validate(pause.tool_call)
        self.keyed.update(run.name for run in [*earlier, held] if run.idempotency_key)  # keys already given
        decided = held if held.approval not in (None, "running") else (yield from self.decide_call(held, pause))
        self.rounds = held.round
        self.apply_tools([decided])
        self.messages = self.prompt_messages()
        for number in sorted({run.round for run in [*earlier, decided]}):
            runs = [run for run in [*earlier, decided] if run.round == number]
            self.messages = [*self.messages, *self.tool_exchange(runs, None)]
        return (yield from self.replies(self.request(self.messages), "tool_results"))

    def decide_call(self, held: ToolRun, pause: PendingEvent) -> Generator[Step, Any, ToolRun]:
        """``held`` as the person decided: run (checkpointed before and after: never run twice), given a
        result, or refused. A call found ``running`` was approved and its process died while it ran."""
        decision = self.decision or {}
        if held.approval == "running":
            tool = self.settings.tools.get(held.name)
            if tool is None or not tool.takes_key:  # it may have run: at most once, so not again
                logger.warning("tool '%s' (key %s): %s", held.name, held.idempotency_key, INTERRUPTED)
                return held.model_copy(update={"error": INTERRUPTED, "approval": "approved"})
            return (yield from self.run_approved(held, pause, tool))  # the same key: the tool has its effect once
        if "result" in decision:
            result = as_json_data({"result": decision["result"]}, source="the supplied tool result")["result"]
            return held.model_copy(update={"result": result, "approval": "supplied"})
        if decision.get("approved") is not True:
            reason = decision.get("reason")
            error = f"a person rejected this call{': ' + str(reason) if reason else ''}"
            return held.model_copy(update={"error": error, "approval": "rejected"})
        tool = self.settings.tools.get(held.name)
        if tool is None:
            return held.model_copy(update={"error": "this tool is no longer available", "approval": "approved"})
        return (yield from self.run_approved(held, pause, tool))

    def run_approved(self, held: ToolRun, pause: PendingEvent, tool: BoundTool) -> Generator[Step, Any, ToolRun]:
        """Run an approved call between two checkpoints: ``running`` before (a retry after a crash then
        knows it may have run), its result after (a retry finds the result and does not run it)."""
        key = held.idempotency_key or calling.call_key(self.base.uid, pause.token, held.name, 0)  # older pauses
        held = held.model_copy(update={"idempotency_key": key})
        yield from self.checkpoint(pause, held.model_copy(update={"approval": "running"}))
        call = ToolCallRequest(held.id, held.name, calling.arguments_text(held.arguments))
        ran: ToolRun  # what the driver sends back for RunTools
        (ran,) = yield RunTools((calling.Prepared(call, tool, held.arguments, held.round, key=key),))
        ran = ran.model_copy(update={"approval": "approved"})
        yield from self.checkpoint(pause, ran)
        return ran

    def checkpoint(self, pause: PendingEvent, call: ToolRun) -> Generator[Step, Any, None]:
        """Hold the pause with ``call`` as its tool call, from now on (nothing to hold without a paused snapshot)."""
        if self.paused is not None:
            recorded = pause.model_copy(update={"tool_call": call.model_dump()})
            yield Checkpoint(self.paused.model_copy(update={"pending": recorded}))

    def working(self) -> Snapshot:
        """The snapshot every decision of this turn is made on: the base with the working context."""
        if (
            self._working is None or self._working.context is not self.work.context
        ):  # contexts are replaced, not changed
            self._working = self.base.model_copy(update={"context": self.work.context})
        return self._working

    def reply_call(self, request: LLMRequest, purpose: Purpose = "reply") -> Call:
        return Call("reply", request, self.preview(), purpose)

    def preview(self) -> Preview | None:
        """Whether a streamed reply's move will be accepted, judged on this turn's working context.

        None where the answer could still change after the reply is read: checks run on the whole
        reply, ``after_reply`` handlers may change the context the move is decided on, and handlers
        before the commit may pause the turn (the move is then not made).
        """
        state = self.definition.states[self.base.state]
        if state.checks or may_run(self.hooks, _BEFORE_COMMIT, state.id, frozenset(state.handlers)):
            return None
        definition, base, context = self.definition, self.base, self.work.context  # replaced, never mutated

        def accepts(data: dict[str, Any]) -> bool:
            reply = partial_reply(data)
            return (
                reply is not None and decide(definition, base.model_copy(update={"context": context}), reply).accepted
            )

        return accepts

    def memory_written(self, *, attempt: int = 1) -> tuple[dict[str, str], dict[str, str], list[Rejection]]:
        """The working memory with the last reply's ``memory_update``: the slots, those applied, those refused."""
        return apply_model_update(self.definition, self.memory.written, self.memory_proposal, attempt=attempt)

    def count(self, response: LLMResponse) -> None:
        self.calls += 1
        self.usage += response.usage

    def set(self, context: dict[str, Any], keys: Mapping[str, Any], by: str) -> None:
        self.work.context = context
        self.work.provenance = record(self.work.provenance, keys, by, self.turn_index)

    def fire(
        self, timing: str, state: str, *, target: str | None = None, keys: frozenset[str] = frozenset(), **extra: Any
    ) -> Generator[Step, Any, None] | tuple[()]:
        """Run the handlers for ``timing``; apply each delta as it comes (later handlers see it)."""
        if not self.hooks.handlers:
            return ()  # most turns have no handlers: no generator to make and step through
        return self._fire(timing, state, target=target, keys=keys, **extra)

    def _fire(
        self, timing: str, state: str, *, target: str | None = None, keys: frozenset[str] = frozenset(), **extra: Any
    ) -> Generator[Step, Any, None]:
        listed = frozenset(self.definition.states[state].handlers)
        for handler in self.not_yet_run(
            timing, state, selected(self.hooks, Invocation(timing, state, target, keys, listed))
        ):
            arguments = {
                "conversation": self.handle,
                "timing": timing,
                "state": state,
                "target": target,
                "context": MappingProxyType(copy.deepcopy(self.work.context)),
                "update": extra.get("update", {}),
                "user": self.user,
                "reply": extra.get("reply"),
                "message": extra.get("message"),
                "error": None,
                "memory": self.memory,
            }
            with self.trace.handler(handler.name, timing, state, target) as span:
                try:
                    delta = yield from call(handler, arguments, span.run)
                except Break as pause:
                    pause.handler, pause.timing = handler.name, timing
                    raise
                span.changed(delta)
            if delta:
                by = f"handler:{handler.name}"
                self.work.context, self.work.provenance = write(
                    self.work.context, self.work.provenance, delta, by=by, turn=self.turn_index
                )

    def not_yet_run(self, timing: str, state: str, handlers: list[Handler]) -> list[Handler]:
        """On a resume, the handlers of the paused timing point after the one that paused (the others ran)."""
        pause = self.resuming
        if pause is None or (pause.timing, pause.state) != (timing, state):
            return handlers
        self.resuming = None  # only that timing point's first firing was interrupted
        names = [h.name for h in handlers]
        return handlers[names.index(pause.handler) + 1 :] if pause.handler in names else handlers

    def close_terminal(self) -> Steps:
        """A resume in a terminal state (paused on entering it, or at its end): the rest of its handlers,
        and no model call, since the conversation has ended."""
        state, timing = self.base.state, self.resuming.timing if self.resuming else None
        try:
            if timing == "state_enter":
                yield from self.fire("state_enter", state, target=state)
            yield from self.fire("end", state)
        except Break as pause:
            return self.pause(pause, state, pause.message or DEFAULT_PAUSE_MESSAGE)
        return self.finish(state, "", {})

    def pause(self, pause: Break, state: str, message: str) -> tuple[Snapshot, TurnResult]:
        source = f"the Break payload of handler '{pause.handler}'"
        event = PendingEvent(
            reason=clean_text(str(pause.reason)),
            payload=as_json_data(pause.payload, source=source),  # saved with the snapshot: JSON data only
            created_at=now(),
            token=new_token(),
            state=state,
            handler=pause.handler,
            timing=pause.timing,
        )
        return self.finish(state, clean_text(message), {}, pending=event)

    def finish(
        self, state: str, message: str, applied: dict[str, Any], pending: PendingEvent | None = None
    ) -> tuple[Snapshot, TurnResult]:
        snapshot = commit(
            self.definition,
            self.base,
            state=state,
            context=self.work.context,
            provenance=self.work.provenance,
            user=self.user,
            message=message,
            pending=pending,
        )
        if self.memory.written != self.base.memory:
            snapshot = snapshot.model_copy(update={"memory": dict(self.memory.written)})
        result = TurnResult(
            message=message,
            state=state,
            previous_state=None if self.user is None and not self.base.history else self.base.state,
            user=self.user,
            turn=snapshot.turns,
            context_updates=dict(applied),
            rejected=tuple(self.rejected),
            llm_calls=self.calls,
            usage=self.usage,
            latency=time.perf_counter() - self.started,
            ended=snapshot.status == "ended",
            context=copy.deepcopy(snapshot.context),
            status=snapshot.status,
            pending=pending,
            tool_calls=tuple(self.tool_runs),
            memory_updates=dict(self.memory.changed),
        )
        return snapshot, result


def summary_steps(
    definition: FSMDefinition, snapshot: Snapshot, settings: TurnSettings
) -> Generator[Step, Any, tuple[Snapshot, summaries.SummaryRun | None]]:
    """One summary call for what is due in ``snapshot``: the snapshot after it, and its report (None:
    nothing was due). It never raises for the call: a failure is in the report and the snapshot."""
    work = summaries.job(definition, snapshot)
    if work is None:
        return snapshot, None
    try:
        request = summaries.request(definition, work, settings.prompt)
    except Exception as exc:  # noqa: BLE001 (a template that fails must not fail the turn either)
        return summaries.outcome(definition, snapshot, work, summaries.CallFailed(exc))
    answer = yield Call("summary", request, purpose="summary", llm=settings.summary_llm)
    return summaries.outcome(definition, snapshot, work, answer)


def resume_turn(
    definition: FSMDefinition,
    snapshot: Snapshot,
    hooks: Hooks,
    settings: TurnSettings,
    token: str,
    result: Mapping[str, Any],
    *,
    handle: Any = None,
) -> TurnRunner:
    """The turn that continues a paused conversation with ``result`` (:class:`ResumeError` for a bad token).

    A pause for a tool call's approval takes a decision instead of context: ``{"approved": true}``,
    ``{"approved": false, "reason": "..."}`` or ``{"result": ...}`` (the call's result, supplied)."""
    pause = snapshot.pending
    if pause is not None and pause.kind == "tool_approval" and token == pause.token:
        _check_decision(result, snapshot.state)
        approval = (pause.tool_call or {}).get("approval")
        if approval in _DECIDED and dict(result) != {"approved": True}:  # another decision now would be moot
            tool = pause.payload.get("tool", "?")
            raise ResumeError(
                f"the call to '{tool}' was approved and {_DECIDED[approval]}: resume with {{\"approved\": true}} "
                "to go on",
                state=snapshot.state,
            )
    base = resumed(definition, snapshot, token, result)
    if pause is not None and pause.kind == "tool_approval":
        ran = (pause.tool_call or {}).get("approval") in _DECIDED  # decided (and run, or running) before a failure
        note = settings.prompt.approval_note(pause.payload.get("tool", "?"), {"approved": True} if ran else result)
    else:
        note = settings.prompt.resume_note(pause.reason if pause else "paused", result)
    runner = TurnRunner(
        definition, base, hooks, settings, user=None, note=note, handle=handle, resuming=pause,
        paused=snapshot, decision=result,
    )  # fmt: skip
    return runner


# approvals saved on a held call: the decision was made, and a resume goes on with it (never another one)
_DECIDED = {"approved": "already ran", "running": "may have run (its process stopped while it ran)"}


def _check_decision(decision: Mapping[str, Any], state: str) -> None:
    """A decision about a tool call: {"approved": bool, "reason"?: str} or {"result": ...}."""
    if isinstance(decision, Mapping) and (
        set(decision) == {"result"}
        or (
            "approved" in decision
            and isinstance(decision["approved"], bool)
            and set(decision) <= {"approved", "reason"}
        )
    ):
        return
    raise ResumeError(
        'a tool approval is resumed with {"approved": true}, {"approved": false, "reason": "..."} '
        f'or {{"result": ...}}, not {decision!r:.80}',
        state=state,
    )


def fire_error(definition: FSMDefinition, hooks: Hooks, state: str, error: BaseException, *, handle: Any) -> None:
    """Run ``error`` handlers; their own failures are logged, never raised over the original."""
    if not isinstance(error, Exception) or not hooks.handlers:
        return
    listed = frozenset(definition.states[state].handlers)
    for handler in selected(hooks, Invocation("error", state, listed=listed)):
        arguments = {"conversation": handle, "timing": "error", "state": state, "error": error}
        try:
            for step in call(handler, arguments):  # error handlers are plain functions: nothing to await
                step.close()
                raise TypeError(f"{step.what} returned an awaitable; an error handler must not")
        except BaseException as failure:  # noqa: BLE001 (an error handler must not mask the error)
            logger.warning("error handler %r failed: %s", handler.name, failure)
