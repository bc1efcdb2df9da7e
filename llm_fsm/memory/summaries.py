"""Running summaries: what leaves the history window is folded into a summary the prompt carries.

Opt-in, per definition or per state::

    "summaries": {"on_overflow": true, "on_leave": false, "max_chars": 1500, "max_tokens": 600,
                  "batch": 4, "max_exchanges": 24, "instructions": "Keep every date and amount."}
    "states": {"intake": {"summaries": {"on_leave": true}, ...}}

A state's ``on_overflow``/``on_leave`` override the definition's for that state; the bounds are the
definition's (their defaults when only states opt in). Two triggers say how much of the history is
due to be folded (``Snapshot.summary.due``: the exchanges ``history[:due]``):

- ``on_overflow`` (in the state the turn ends in): once ``history_window + batch`` exchanges are not
  summarised, all but the last ``history_window`` are due. The prompt then shows the exchanges not yet
  summarised, between ``history_window`` and ``history_window + batch - 1`` of them, so a summary call
  is needed once every ``batch`` turns, not every turn;
- ``on_leave`` (in the state the turn leaves): when a turn moves out of the state, its exchanges are
  due, with any earlier ones not yet summarised: every exchange but the last (the reply that made the
  move speaks for the new state).

A summary call folds the due exchanges (``max_exchanges`` at most per call; the rest at the next one)
into the running summary: its input is the previous summary and those exchanges (each message cut to
the prompt's ``max_message_chars``), its output is bounded by ``max_tokens`` and cut to ``max_chars``
(reported: ``SummaryRun.cut``). It is one extra model call, of kind ``summary``
(``LLMRequest.kind``), made at most once per turn and never two at a time, counted in
``TurnResult.summary`` and never in ``llm_calls`` (which counts the calls for the reply).

When it runs: by default at the end of the turn that made it due, after the reply is decided (the
turn's result counts it). With ``Conversation(..., background_summaries=True)`` it runs after the turn
is returned: ``asend`` starts it as a task that the next turn (or ``asummarize_pending``/``aclose``)
awaits; the sync API runs it when you call ``summarize_pending()`` (say, once the reply is shown).
A summary still due when a turn starts in background mode (you never called ``summarize_pending``,
the process died, the call failed) is made at the start of that turn, before its prompt is built.

A failed summary call never fails the turn: the summary stays as it was, the failure is reported
(``SummaryRun.error``, ``Snapshot.summary.error``) and the due exchanges are folded at the next try.
After :data:`MAX_FAILURES` failures in a row the exchanges of the failing call are given up on (logged as
a warning): ``through`` moves past them, they stay out of the summary and in the history, and each next
batch due gets a single try until a call succeeds (which resets the count). So a summary model that keeps
failing costs a call per batch, not one per turn, and a stored snapshot stays bounded.
Since ``through`` (what is summarised) and ``due`` are in the snapshot, every store keeps them, and a
conversation restored after a crash summarises what was due. A summary is applied only to the
history it was made from: if the conversation went back (``/back``) meanwhile, it is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_fsm.definition.memory import RunningSummary, StateSummaries, SummarySpec

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.llm import LLMRequest, LLMResponse, Usage
    from llm_fsm.snapshot import Exchange, Snapshot

logger = logging.getLogger(__name__)

# failed summary calls in a row before the exchanges due are given up on (see outcome); after that, each next
# batch due gets one try until a call succeeds again
MAX_FAILURES = 3

__all__ = [
    "MAX_FAILURES",
    "RunningSummary",
    "StateSummaries",
    "SummaryRun",
    "SummarySpec",
    "job",
    "mark_due",
    "parse",
    "visible",
]


@dataclass(frozen=True)
class SummaryRun:
    """One summary call: the exchanges it folded (``start`` to ``end``), its usage, what went wrong."""

    start: int
    end: int
    usage: Usage
    error: str | None = None
    cut: bool = False  # the summary was longer than max_chars and was cut
    chars: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "folded": [self.start, self.end], "ok": self.ok, "error": self.error, "cut": self.cut,
            "chars": self.chars, "usage": asdict(self.usage),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SummaryRun:
        """The run :meth:`to_dict` gave."""
        from llm_fsm.llm import Usage

        start, end = data["folded"]
        return cls(start, end, Usage(**data["usage"]), data["error"], data["cut"], data["chars"])


@dataclass(frozen=True)
class Job:
    """The exchanges ``history[start:end]`` to fold into ``previous``."""

    start: int
    end: int
    previous: str
    exchanges: tuple[Exchange, ...]
    left: str | None  # the state just left, when its exchanges are what is folded


@dataclass(frozen=True)
class CallFailed:
    """What a driver sends back instead of a response when the summary call raised."""

    error: Exception


# -- settings -------------------------------------------------------------------------------------


def spec(definition: FSMDefinition) -> SummarySpec:
    return definition.summaries or _DEFAULT


_DEFAULT = SummarySpec()


def triggers(definition: FSMDefinition, state_id: str) -> tuple[bool, bool]:
    """(on_overflow, on_leave) in a state: its own choice, else the definition's (else off)."""
    top = definition.summaries
    own = definition.states[state_id].summaries if state_id in definition.states else None
    overflow = own.on_overflow if own is not None and own.on_overflow is not None else bool(top and top.on_overflow)
    leave = own.on_leave if own is not None and own.on_leave is not None else bool(top and top.on_leave)
    return overflow, leave


def enabled(definition: FSMDefinition) -> tuple[bool, bool]:
    """Whether any state summarises on overflow, and whether any on leaving (computed once per definition)."""
    # cached under the initial state's id: the answer is the whole definition's
    known: tuple[bool, bool] | None = definition.known("summaries", definition.initial_state)
    if known is not None:  # asked on every prompt: no lambda made once it is known
        return known
    return definition.derived("summaries", definition.initial_state, lambda _: _any_triggers(definition))


def _any_triggers(definition: FSMDefinition) -> tuple[bool, bool]:
    both = [triggers(definition, sid) for sid in definition.states]
    return any(o for o, _ in both), any(leave for _, leave in both)


# -- what is due, what the prompt shows -----------------------------------------------------------


def mark_due(definition: FSMDefinition, snapshot: Snapshot, window: int) -> Snapshot:
    """The snapshot after a turn, with what its triggers make due (unchanged when nothing is)."""
    if not any(enabled(definition)):
        return snapshot
    history, summary = snapshot.history, snapshot.summary
    # a trigger only moves "due" forward: never back before what is summarised or already due; n counts the
    # whole history (a stored conversation carries its tail only: see Snapshot.history_start)
    n, due = snapshot.history_len, max(summary.due, summary.through)
    overflow, _ = triggers(definition, snapshot.state)
    if overflow and n - summary.through >= max(window, 0) + spec(definition).batch:
        due = max(due, n - max(window, 0))
    # an exchange records the state after its reply: history[-2].state is the state this turn left
    if len(history) >= 2 and history[-2].state != history[-1].state and triggers(definition, history[-2].state)[1]:
        due = max(due, n - 1)
    if due == summary.due:
        return snapshot
    return snapshot.model_copy(update={"summary": summary.model_copy(update={"due": min(due, n)})})


def visible(
    definition: FSMDefinition, history: Sequence[Exchange], summary: RunningSummary, window: int, *, start: int = 0
) -> list[Any]:
    """The exchanges the prompt shows: the last ``window`` (with summaries, of those not summarised,
    up to ``window + batch - 1`` where exchanges wait for a summary on overflow). ``history`` is the tail
    a snapshot carries, ``start`` the index of its first exchange (``Snapshot.history_start``)."""
    size = max(window, 0)
    overflow, leave = enabled(definition)
    if not (overflow or leave):
        return list(history[-size:]) if size else []
    if overflow:
        size += spec(definition).batch - 1
    # what is summarised is not shown again: the summary in the prompt holds it
    rest = history[min(max(summary.through - start, 0), len(history)) :]
    return list(rest[-size:]) if size else []


def job(definition: FSMDefinition, snapshot: Snapshot) -> Job | None:
    """The next summary call's work, or None when nothing is due."""
    summary, history, offset = snapshot.summary, snapshot.history, snapshot.history_start
    if not summary.pending or summary.through >= snapshot.history_len:
        return None
    # a stored conversation carries every exchange from ``through`` on while a summary is pending
    # (store.base.carried_from), so ``start`` is never before the tail; max() keeps indexing safe regardless
    start = max(summary.through, offset)
    end = min(summary.due, snapshot.history_len, start + spec(definition).max_exchanges)
    last = history[end - 1 - offset].state
    following = history[end - offset] if end < snapshot.history_len else None
    left = last if following is not None and following.state != last else None  # the next reply moved on
    return Job(start, end, summary.text, tuple(history[start - offset : end - offset]), left)


# -- the call ------------------------------------------------------------------------------------


def request(definition: FSMDefinition, work: Job, prompt: Any) -> LLMRequest:
    """The summary call: the previous summary and the exchanges to fold, bounded in and out.
    ``prompt`` is the conversation's ``PromptBuilder`` (not imported here: it imports this module)."""
    from llm_fsm.llm import LLMRequest

    bounds = spec(definition)
    messages = prompt.summary_messages(definition, work.previous, work.exchanges, bounds, left=work.left)
    schema = {
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
        "additionalProperties": False,
    }
    return LLMRequest(messages, schema, schema, kind="summary", max_tokens=bounds.max_tokens)


def complete(call: Callable[[], LLMResponse]) -> LLMResponse | CallFailed:
    """The summary call's answer; a failure is returned, never raised (it must not fail the turn)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 (any failure of the summary call is reported, and retried later)
        return CallFailed(exc)


async def acomplete(call: Awaitable[LLMResponse]) -> LLMResponse | CallFailed:
    try:
        return await call
    except Exception as exc:  # noqa: BLE001
        return CallFailed(exc)


def outcome(definition: FSMDefinition, snapshot: Snapshot, work: Job, answer: Any) -> tuple[Snapshot, SummaryRun]:
    """The snapshot after the summary call answered (a response, or :class:`CallFailed`), and its report."""
    from llm_fsm.errors import ReplyFormatError
    from llm_fsm.llm import LLMResponse, Usage

    summary = snapshot.summary
    usage = answer.usage if isinstance(answer, LLMResponse) else Usage()
    try:
        if isinstance(answer, CallFailed):
            raise answer.error
        if not isinstance(answer, LLMResponse):
            raise TypeError(f"expected the model's response, got {type(answer).__name__}")
        text, cut = parse(answer.text, spec(definition).max_chars)
    except (ReplyFormatError, Exception) as exc:  # noqa: BLE001 (reported, retried at the next summary)
        error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ReplyFormatError) else str(exc)
        update: dict[str, Any] = {"calls": summary.calls + 1, "failures": summary.failures + 1, "error": error}
        if summary.failures + 1 >= MAX_FAILURES:
            # Given up: a stored snapshot carries every exchange still due (store.history.carried_from), so a
            # summary that never succeeds would grow it with the conversation's age. These exchanges are left
            # out of the summary (they stay in the history, and in a store's history rows); the next due ones
            # get one try each until a call succeeds again.
            update["through"] = work.end
            error = f"{error} (gave up on exchanges {work.start + 1}-{work.end} after {summary.failures + 1} failures)"
            logger.warning("running summary: %s; they are not in the summary, only in the history", error)
        failed = summary.model_copy(update=update)
        return snapshot.model_copy(update={"summary": failed}), SummaryRun(work.start, work.end, usage, error)
    done = summary.model_copy(
        update={"text": text, "through": work.end, "calls": summary.calls + 1, "failures": 0, "error": None}
    )
    return snapshot.model_copy(update={"summary": done}), SummaryRun(work.start, work.end, usage, None, cut, len(text))


def parse(text: str, max_chars: int) -> tuple[str, bool]:
    """The summary in a reply (``{"summary": "..."}``, or plain text), cut to ``max_chars``; whether it was cut."""
    from llm_fsm.contract import reply_object, strip_thinking
    from llm_fsm.errors import ReplyFormatError, ReplyTruncated
    from llm_fsm.values import clean_text

    body = strip_thinking(text or "").strip()
    summary: Any = body
    if body.startswith(("{", "```")):
        try:
            data = reply_object(body)
        except ReplyTruncated:  # cut at the token limit: keep what was written (it is cut below anyway)
            data = _partial(body)
        summary = data.get("summary") if isinstance(data, dict) else None
        if not isinstance(summary, str):
            raise ReplyFormatError('the summary reply has no "summary" text')
    summary = clean_text(summary).strip()
    if not summary:
        raise ReplyFormatError("the summary reply is empty")
    return (summary[:max_chars], True) if len(summary) > max_chars else (summary, False)


def _partial(text: str) -> Any:
    from pydantic_core import from_json

    start = text.find("{")
    try:
        # trailing-strings: the summary text cut mid-string is kept, as far as it got
        return from_json(text[start:], allow_partial="trailing-strings") if start >= 0 else None
    except ValueError:
        return None


def _carried(snapshot: Snapshot, lowest: int, end: int) -> tuple[Exchange, ...]:
    """The exchanges ``snapshot`` carries from index ``lowest`` to ``end`` (absolute indices)."""
    offset = snapshot.history_start
    return tuple(snapshot.history[max(lowest - offset, 0) : max(end - offset, 0)])


def applied(current: Snapshot, before: Snapshot, after: Snapshot) -> Snapshot | None:
    """``current`` with the summary a background call made from ``before`` (giving ``after``), or None
    when ``current`` moved on in a way the summary no longer fits (it went back, or another summary ran)."""
    if current.summary.through != before.summary.through or current.summary.text != before.summary.text:
        return None
    # the summary folds before.history[:end]: it fits only while current still starts with those exchanges
    end = after.summary.through
    lowest = max(current.history_start, before.history_start)  # what both carry (all of it, unless stored)
    if current.history_len < end or _carried(current, lowest, end) != _carried(before, lowest, end):
        return None
    # turns taken meanwhile may have made more due: that is kept for the next call
    merged = after.summary.model_copy(update={"due": max(current.summary.due, after.summary.due)})
    return current.model_copy(update={"summary": merged})
