"""What a turn and its driver exchange: the steps a turn asks for, the settings it runs with, what it
returns, and :class:`Turn`, the interface every kind of turn implements.

A turn (:mod:`llm_fsm.turn.runner`) is a generator: it yields :data:`Step` objects (a model call, an awaitable
of an async handler, tools to run, a checkpoint to hold), receives what each produced, and returns the
new snapshot with its :class:`TurnResult`. The drivers (:mod:`llm_fsm.driving`) run it sync or async.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.texts import BUILT_IN
from llm_fsm.hooks import Await, Hooks
from llm_fsm.llm import LLMRequest, Usage
from llm_fsm.memory import summaries
from llm_fsm.records import quick_init
from llm_fsm.snapshot import PendingEvent, Rejection, Snapshot
from llm_fsm.tools.calling import BoundTool, Prepared, ToolMode, ToolRun
from llm_fsm.turn.prompt import PromptBuilder, PromptOrder

if TYPE_CHECKING:
    from llm_fsm.telemetry import NoTrace
    from llm_fsm.telemetry.spans import TurnTrace

DEFAULT_FALLBACK = BUILT_IN["en"]["fallback"]  # a definition in another language says it in its own

Preview = Callable[[Any], bool]
Purpose = Literal["reply", "correction", "refinement", "tool_results", "entered", "judge", "summary"]


@dataclass(frozen=True)
class TurnSettings:
    """How turns run: the prompt builder, the call budgets, and the message of a turn that found no valid reply."""

    prompt: PromptBuilder
    max_corrections: int = 1
    max_calls_per_turn: int = 8
    fallback_message: str | None = None  # None: the definition's (llm_fsm.definition.texts.runtime_text)
    tools: Mapping[str, BoundTool] = field(default_factory=dict)
    tool_mode: Callable[[], ToolMode] = field(default=lambda: "native")  # asked only in states with tools
    guided: bool = False  # a reply schema made per turn, for small models (see llm_fsm.guided.schema)
    # where the prompt puts the reply rules (llm_fsm.turn.prompt.PromptOrder): asked at each call, like tool_mode,
    # since a client may need litellm to know its provider
    prompt_order: Callable[[], PromptOrder] = field(default=lambda: "recency")
    summary_llm: Any = None  # the client of summary calls (None: the conversation's own)
    background_summaries: bool = False  # summaries run after the turn returns (see llm_fsm.memory.summaries)


@quick_init  # built on every turn (llm_fsm.records)
@dataclass(frozen=True)
class Call:
    """A model call the turn needs: the reply itself, a judge grading a proposed reply, or a summary
    (see :mod:`llm_fsm.memory.summaries`; made with ``llm`` when it is set, and whose failure the driver sends
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
    # the call that reads tool results, the message of a state a guided reply was moved to, a judge, or a
    # summary of the history
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


@quick_init  # built on every turn (llm_fsm.records)
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
    # True when no reply was accepted and the runtime said the fallback message: a model may copy that text
    # from the history, so the message alone does not tell
    fallback: bool = False
    # the model's writes that changed a value already collected, where the definition allows corrections
    # (llm_fsm.definition.corrections): key -> {"from": the old value, "to": the new one}
    corrections: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what the turn was: a person's turn or the opening ("turn"), a turn of a state that acts on its own ("act"),
    # or a move the runtime took because its conditions held ("automatic", no model call)
    step: Literal["turn", "act", "automatic"] = "turn"
    # a run's last result (``send`` in a workflow): the results of the run's steps before it, in order
    steps: tuple[TurnResult, ...] = ()

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
            "fallback": self.fallback,
            # frames and ran_in are written only with sub-conversations: from_dict reads them with .get
            **({"frames": [list(f) for f in self.frames], "ran_in": self.ran_in} if self.frames else {}),
            # written only when the turn corrected something: from_dict reads it with .get
            **({"corrections": self.corrections} if self.corrections else {}),
            # written only in workflows (llm_fsm.running): from_dict reads them with .get
            **({"step": self.step} if self.step != "turn" else {}),
            **({"steps": [r.to_dict() for r in self.steps]} if self.steps else {}),
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
            # latency comes back from rounded milliseconds: the round trip is exact for to_dict(), not for the float
            usage=Usage(**data["usage"]), latency=data["latency_ms"] / 1000, ended=data["ended"],
            context=data["context"], status=data["status"],
            pending=None if pending is None else PendingEvent.model_validate(pending),
            tool_calls=tuple(ToolRun.model_validate(run) for run in data["tool_calls"]),
            memory_updates=data["memory_updates"],
            summary=None if summary is None else summaries.SummaryRun.from_dict(summary),
            frames=tuple((f[0], f[1]) for f in data.get("frames", ())),
            ran_in=None if ran_in is None else (ran_in[0], ran_in[1]),
            fallback=data.get("fallback", False),  # answers stored before the field read as not a fallback
            corrections=data.get("corrections", {}),
            step=data.get("step", "turn"),
            steps=tuple(cls.from_dict(r) for r in data.get("steps", ())),
        )  # fmt: skip


@dataclass(frozen=True)
class Runtime:
    """What a turn is opened with besides its definition and snapshot: the hooks, the settings of each
    definition it may run in (a sub-definition has its own tools), and the object handlers get as
    ``conversation``."""

    hooks: Hooks
    settings: Callable[[FSMDefinition], TurnSettings]
    handle: Any = None
    stacked: bool = False  # the definition runs sub-conversations (llm_fsm.subflows)


class Turn(Protocol):
    """One turn, as the drivers and the telemetry see it: a plain turn (:class:`llm_fsm.turn.runner.TurnRunner`)
    or one of a conversation with sub-conversations (:class:`llm_fsm.subflows.stack.StackTurn`).
    Open one with :func:`llm_fsm.driving.open_turn`."""

    base: Snapshot  # the snapshot the turn starts from (the root's, with sub-conversations)
    user: str | None
    turn_index: int
    trace: TurnTrace | NoTrace  # set by the driver before the turn runs, when it is traced

    @property
    def resuming(self) -> PendingEvent | None:
        """The pause this turn continues (None: a new turn)."""

    @property
    def decision(self) -> Mapping[str, Any] | None:
        """A person's decision about the tool call the pause waits for."""

    @property
    def context(self) -> dict[str, Any]:
        """The context as the turn has changed it so far (committed only at its end)."""

    @property
    def tool_runs(self) -> Sequence[ToolRun]:
        """The tool calls made so far in the turn (the caller may have to undo them if it fails)."""

    @property
    def frame_attributes(self) -> dict[str, Any]:
        """Span attributes saying where the turn runs (empty without sub-conversations)."""

    def run(self) -> Steps:
        """The turn: steps for the driver, then ``(snapshot, result)``."""
