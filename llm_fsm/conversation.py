"""The public shell: a conversation holds a snapshot and runs turns (see :mod:`llm_fsm.turn.runner`).

A turn makes one model call when the reply is valid. An invalid reply (unparseable, unknown or
disallowed target, unmet condition, a value its schema refuses) gets up to ``max_corrections``
corrective calls whose prompt says exactly what was wrong; failed acceptance checks get up to the
state's ``max_retries`` calls with feedback; no turn makes more than ``max_calls_per_turn`` calls.
If the reply is still invalid, the conversation stays where it is, keeps the context updates that
were valid, and answers with ``fallback_message`` (default: the definition's, see :mod:`llm_fsm.definition.texts`):
a message that describes a state the conversation did not enter is never returned. A turn that fails
raises and changes nothing.

Handlers (:mod:`llm_fsm.hooks`) may pause the conversation by raising ``Break``; ``resume`` with
the pending event's token continues it, exactly once.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from llm_fsm import memory, running
from llm_fsm.binding import check_bindings, runtime
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.driving import (
    CheckpointSink,
    Resume,
    StreamEvent,
    SummaryCalls,
    aevents,
    alast,
    complete,
    events,
)
from llm_fsm.errors import (
    ConversationError,
)
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LLMClient
from llm_fsm.memory import summaries
from llm_fsm.recorded import recorded
from llm_fsm.snapshot import Exchange, PendingEvent, Snapshot
from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult  # the events of a streamed turn
from llm_fsm.subflows.stack import check_restore, entered, frames
from llm_fsm.telemetry import NO_RUN, NoRun
from llm_fsm.tools.calling import ToolMode
from llm_fsm.turn.engine import initial_snapshot, write
from llm_fsm.turn.prompt import PROMPT_ORDERS, PromptBuilder, PromptOrder
from llm_fsm.turn.refusals import turn_refusal
from llm_fsm.turn.restoring import restored
from llm_fsm.turn.runner import DEFAULT_FALLBACK, TurnResult, TurnSettings
from llm_fsm.values import as_json_data

if TYPE_CHECKING:
    from llm_fsm.telemetry.runs import RunTrace

__all__ = [
    "DEFAULT_FALLBACK", "Conversation", "MessageDelta", "MessageReset", "StreamEvent", "ToolCall", "ToolResult",
    "TurnResult",
]  # fmt: skip

_default_builder: PromptBuilder | None = None


def _shared_builder() -> PromptBuilder:
    # One Jinja environment for every conversation that uses the packaged templates: it caches
    # compiled templates, so only the first conversation of a process pays for compiling them.
    global _default_builder
    if _default_builder is None:
        _default_builder = PromptBuilder()
    return _default_builder


class Conversation:
    """One conversation with a definition, driven by ``llm``. Not safe for two turns at once.

    ``hooks`` holds the handlers and named checks (share one :class:`Hooks` between the
    conversations of a runtime); every handler and Python check the definition names must be
    registered there, or construction fails with a :class:`DefinitionError` naming them.
    ``id`` names the conversation in traces (see :mod:`llm_fsm.telemetry`); a stored conversation
    gets its store id.

    Summaries (:mod:`llm_fsm.memory.summaries`, when the definition asks for them) are written by
    ``summary_llm`` (default: ``llm``), at the end of the turn that made them due, or with
    ``background_summaries=True`` after it returned (:meth:`summarize_pending`, or a task ``asend`` starts).
    ``guided`` and ``prompt_order`` (where the prompt puts the reply rules: :data:`~llm_fsm.turn.prompt.PromptOrder`)
    default to what ``llm`` says it wants.
    """

    def __init__(
        self,
        definition: FSMDefinition,
        llm: LLMClient,
        state: str | None = None,
        context: Mapping[str, Any] | None = None,
        *,
        hooks: Hooks | None = None,
        max_corrections: int = 1,
        max_calls_per_turn: int = 8,
        fallback_message: str | None = None,
        prompt: PromptBuilder | None = None,
        guided: bool | None = None,
        prompt_order: PromptOrder | None = None,
        id: str | None = None,  # the conversation's id, as a store or the caller knows it
        summary_llm: LLMClient | None = None,
        background_summaries: bool = False,
    ) -> None:
        if state is not None and state not in definition.states:
            raise ConversationError(f"unknown state '{state}'", state=state)
        if prompt_order is not None and prompt_order not in PROMPT_ORDERS:
            raise ValueError(f"prompt_order is 'recency' or 'cache' (or None: the model's), not {prompt_order!r}")
        if id is not None and not isinstance(id, str):
            raise TypeError(f"a conversation's id is a str, not {type(id).__name__} ({id!r:.40})")
        self.id = id  # in traces (gen_ai.conversation.id); a StoredConversation sets it to its id
        self.definition = definition
        self.llm = llm
        self.hooks = hooks if hooks is not None else Hooks()
        self.settings = TurnSettings(
            # clamped, not refused: at least one call per turn, since a turn with no call could never reply
            prompt or _shared_builder(), max(0, max_corrections), max(1, max_calls_per_turn), fallback_message,
            tools=check_bindings(definition, self.hooks), tool_mode=lambda: tool_mode(self.llm),
            guided=bool(getattr(llm, "guided", False)) if guided is None else guided,
            prompt_order=(lambda: wanted_order(self.llm)) if prompt_order is None else (lambda: prompt_order),
            summary_llm=summary_llm, background_summaries=background_summaries,
        )  # fmt: skip
        self._runtime = runtime(definition, self.hooks, self.settings, self)  # what each turn is opened with
        # entered(): an initial state that runs a sub-conversation pushes it now, so the first turn talks in it
        self._snapshot = entered(definition, initial_snapshot(definition, state, dict(context or {})))
        self._busy = False
        # where a checkpoint a turn makes is saved before the turn goes on (a StoredConversation sets it)
        self.checkpoints: CheckpointSink | None = None
        self._summaries = SummaryCalls(self)  # the summary calls made outside turns
        self.last_summary: summaries.SummaryRun | None = None  # the last summary call made, in a turn or not
        self.run_trace: RunTrace | NoRun = NO_RUN  # the trace of a run under way (llm_fsm.running)

    @property
    def prompt(self) -> PromptBuilder:
        return self.settings.prompt

    # -- hooks ----------------------------------------------------------------------------------

    def on(self, *timings: Any, **filters: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register a handler on this conversation (see :meth:`Hooks.on`)."""
        return self.hooks.on(*timings, **filters)

    # -- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._snapshot.state

    @property
    def context(self) -> dict[str, Any]:
        """A copy of the context: changing it does not change the conversation."""
        return copy.deepcopy(self._snapshot.context)

    @property
    def provenance(self) -> dict[str, Any]:
        """Who set each context key, and on which turn."""
        return {k: v.model_dump() for k, v in self._snapshot.provenance.items()}

    @property
    def history(self) -> tuple[Exchange, ...]:
        return self._snapshot.history

    @property
    def ended(self) -> bool:
        return self._snapshot.status == "ended"

    @property
    def paused(self) -> bool:
        return self._snapshot.status == "paused"

    @property
    def pending(self) -> PendingEvent | None:
        """The event the conversation waits for while paused (reason, payload, token), else None."""
        return self._snapshot.pending

    @property
    def status(self) -> str:
        return self._snapshot.status

    @property
    def frames(self) -> list[dict[str, Any]]:
        """Where the conversation is: ``{"definition", "state"}`` of the root, then of each
        sub-conversation under way (the last one talks; see :mod:`llm_fsm.subflows`)."""
        return frames(self.definition, self._snapshot)

    def snapshot(self) -> Snapshot:
        """The whole conversation as an immutable, JSON-serialisable model."""
        return self._snapshot

    @property
    def memory(self) -> dict[str, str]:
        """Every working-memory slot's text (a copy; see :mod:`llm_fsm.memory`)."""
        return memory.current(self.definition, self._snapshot)

    @property
    def summary(self) -> str:
        """The running summary of the exchanges summarised so far ("" before the first)."""
        return self._snapshot.summary.text

    @property
    def summary_pending(self) -> bool:
        """Whether exchanges are due to be summarised (see :meth:`summarize_pending`)."""
        return self._snapshot.summary.pending

    @classmethod
    def restore(
        cls,
        snapshot: Snapshot | Mapping[str, Any] | str,
        definition: FSMDefinition,
        llm: LLMClient,
        *,
        allow_changed_definition: bool = False,
        strict_definition: bool = False,
        **options: Any,
    ) -> Conversation:
        """A conversation continuing from ``snapshot`` (the model, its dict, or its JSON text).

        A snapshot taken on another version of ``definition`` restores when only its prose changed
        (descriptions, persona, purpose, instructions, examples); a change to its structure (states,
        transitions, conditions, keys, checks) raises :class:`ConversationError` naming what changed,
        unless ``allow_changed_definition``. ``strict_definition``: any change raises.
        """
        allow, strict = allow_changed_definition, strict_definition
        snap = restored(snapshot, definition, allow_changed=allow, strict=strict)
        conversation = cls(definition, llm, **options)
        conversation._snapshot = check_restore(definition, snap, allow_changed=allow, strict=strict)
        return conversation

    def update_context(self, delta: Mapping[str, Any]) -> None:
        """Set (or, with None, delete) context keys from code, outside any turn (provenance ``user_code``)."""
        self._refuse_busy()
        snap = self._snapshot
        values = as_json_data(delta, source="update_context")
        # as_json_data above: the context is saved with the snapshot, so code may write JSON data only
        context, provenance = write(snap.context, snap.provenance, values, by="user_code", turn=snap.turns)
        self._snapshot = snap.model_copy(update={"context": context, "provenance": provenance})

    def update_memory(self, delta: Mapping[str, Any]) -> None:
        """Write working-memory slots from code, outside any turn (None: back to the slot's initial text).

        Each slot must be declared and the value text within its ``max_chars``, or
        :class:`~llm_fsm.errors.MemoryValueError` names the slot and nothing is written."""
        self._refuse_busy()
        written = memory.code_update(self.definition, self._snapshot.memory, delta)
        self._snapshot = self._snapshot.model_copy(update={"memory": written})

    def record(self, message: str, *, replace: bool = False) -> None:
        """Record ``message``, written elsewhere (a person, another system), as the assistant's: an exchange without
        user words, or (``replace``) over the last reply. No model call; not a turn. Rules: :mod:`llm_fsm.recorded`."""
        self._refuse_busy()
        self._snapshot = recorded(self.definition, self._snapshot, message, replace=replace, settings=self.settings)

    # -- summaries ------------------------------------------------------------------------------

    def summarize_pending(self) -> summaries.SummaryRun | None:
        """Make the summary call that is due, now (one call: a backlog longer than ``max_exchanges`` takes
        several); None when nothing is due. A failed call is reported in the result, never raised.

        With ``background_summaries=True``, call it once the turn's reply is shown: the next turn makes
        it otherwise, before its own model call."""
        return self._summaries.make_now()

    async def asummarize_pending(self) -> summaries.SummaryRun | None:
        """Wait for the summary ``asend`` started in the background; if none runs, make the one that is due."""
        return await self._summaries.awaited_or_made()

    async def aclose(self) -> None:
        """Wait for a summary running in the background (call it before the event loop ends)."""
        await self._summaries.settle()

    def _refuse_busy(self) -> None:
        if self._busy:
            raise ConversationError("a turn of this conversation is in progress", state=self.state)

    # -- turns ----------------------------------------------------------------------------------

    def start(self) -> TurnResult:
        """The opening message of the current state: one model call, or none when the state has its own
        ``opening`` (written over the context; see :mod:`llm_fsm.definition.opening`). In a workflow, the run
        goes on through the steps nobody types for (:meth:`run`) and this is its last result."""
        return self._whole_run(None)

    def send(self, text: str) -> TurnResult:
        """Answer the user's ``text``: one model call when the reply is valid. In a workflow (some state acts on
        its own, or some move is automatic), the run goes on until a state waits for a person, a pause or the
        end: the result is the last step's, with the steps before it in ``result.steps``."""
        return self._whole_run(text)

    def resume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        """Continue a paused conversation: merge ``result`` into the context, then one model call (in a
        workflow, the rest of the run, as :meth:`send`).

        Works once per token: a second call with the same token raises :class:`ResumeError` and
        changes nothing. If the model call fails, nothing changes and the token stays valid.
        """
        return self._whole_run(None, (token, result))

    def run(self, text: str | None = None, *, resume: Resume | None = None) -> Iterator[TurnResult]:
        """The run from ``text`` (None: the opening of a new conversation, or the steps the current state takes on
        its own), or from ``resume=(token, result)``: one :class:`TurnResult` per step, each committed as it is
        yielded, until a state waits for a person, a pause, or the end (see :mod:`llm_fsm.running`). Yields nothing
        when there is nothing to do. :class:`RunLimitError` past the definition's ``max_run_steps``."""
        return running.steps(self, text, resume)

    def arun(self, text: str | None = None, *, resume: Resume | None = None) -> AsyncIterator[TurnResult]:
        """The async form of :meth:`run`."""
        return running.asteps(self, text, resume)

    def stream(self, text: str | None = None) -> Iterator[StreamEvent]:
        """Run a turn (``text=None``: the opening) and yield its events as they happen.

        Yields :class:`MessageDelta` for message text whose transition has been checked,
        :class:`MessageReset` if shown text must be discarded, and last the :class:`TurnResult`.
        The deltas after the last reset add up to the result's message. Closing the iterator
        early leaves the conversation exactly as it was before the turn. In a workflow, every step of the
        run, each ending with its own :class:`TurnResult` (a step that ended stays committed).
        """
        if self.definition.is_workflow:
            return running.step_events(self, text, stream=True)
        return events(self, text, stream=True)

    async def astart(self) -> TurnResult:
        return await self._awhole_run(None)

    async def asend(self, text: str) -> TurnResult:
        return await self._awhole_run(text)

    async def aresume(self, token: str, result: Mapping[str, Any] | None = None) -> TurnResult:
        return await self._awhole_run(None, (token, result))

    def astream(self, text: str | None = None) -> AsyncIterator[StreamEvent]:
        """The async form of :meth:`stream`."""
        if self.definition.is_workflow:
            return running.astep_events(self, text, stream=True)
        return aevents(self, text, stream=True)

    def _whole_run(self, text: str | None, resume: Resume | None = None) -> TurnResult:
        if not self.definition.is_workflow:
            return complete(self, text, resume)
        return running.last(list(running.steps(self, text, resume)) or [complete(self, text, resume)])

    async def _awhole_run(self, text: str | None, resume: Resume | None = None) -> TurnResult:
        if not self.definition.is_workflow:
            return await alast(aevents(self, text, resume, stream=False))
        results = [result async for result in running.asteps(self, text, resume)]
        return running.last(results or [await alast(aevents(self, text, resume, stream=False))])

    def _may_take(self, user: str | None, *, resuming: bool = False, going_on: bool = False) -> None:
        """Raise unless the conversation can take this turn now (the rule: :func:`turn_refusal`)."""
        refused = turn_refusal(self, user, busy=self._busy, resuming=resuming, going_on=going_on)
        if refused is not None:
            raise refused.error()


def wanted_order(llm: LLMClient) -> PromptOrder:
    """Where ``llm`` wants the prompt's reply rules (:data:`~llm_fsm.turn.prompt.PromptOrder`): its
    ``prompt_order`` if it names one, else ``"recency"``."""
    order = getattr(llm, "prompt_order", None)
    return order if order in PROMPT_ORDERS else "recency"


def tool_mode(llm: LLMClient) -> ToolMode:
    """How ``llm`` takes tool calls: its ``tool_mode()`` if it has one, else the JSON form (any model can)."""
    mode = getattr(llm, "tool_mode", None)
    return mode() if callable(mode) else "json"
