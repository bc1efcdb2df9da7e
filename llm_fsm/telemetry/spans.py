"""The spans of a traced turn (imported only when the application uses OpenTelemetry)."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from llm_fsm.hooks import Break
from llm_fsm.telemetry.recording import (
    Call,
    Content,
    Conversation,
    LLMClient,
    LLMResponse,
    Prepared,
    ToolRun,
    TurnResult,
    TurnRunner,
    error_attributes,
    harmless,
    messages,
)


class TurnTrace:
    """The spans of one turn. The turn's span is never made current (a turn's generator yields to the
    caller between steps); each child span is made current only while its own code runs, so spans that
    code makes (an instrumented HTTP client, a database) nest under it, in threads and tasks alike."""

    def __init__(
        self, tracer: Any, span: Any, conversation: Conversation, runner: TurnRunner, llm: dict[str, Any], content: bool
    ) -> None:
        self.tracer = tracer
        self.span = span
        self.runner = runner
        self.llm_attributes = llm
        self.conversation_id = conversation.id
        self.content = Content(conversation.definition) if content else None
        if self.content is not None:
            self.content.learn(runner.base.context)
        self.parents = [otel_trace.set_span_in_context(span)]
        self.calls = 0
        self.deferred: list[tuple[Any, int, dict[str, Any]]] = []

    @classmethod
    def start(
        cls,
        tracer: Any,
        conversation: Conversation,
        runner: TurnRunner,
        llm: dict[str, Any],
        content: bool,
        parent: Any = None,
    ) -> TurnTrace | None:
        """The trace of ``runner``'s turn, its span started (under ``parent``, a run's context, if given); None when
        the span does not record (no provider, or not sampled: the turn then runs untraced)."""
        definition = conversation.definition
        kind = "resume" if runner.resuming is not None else "message" if runner.user is not None else "opening"
        step = getattr(getattr(runner, "work", None), "step", "turn")  # a step of a run nobody typed for
        kind = step if step != "turn" and runner.resuming is None else kind
        attributes: dict[str, Any] = {
            **llm,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": definition.name,
            "llm_fsm.definition.models": definition.name,
            "llm_fsm.definition.version": definition.version,
            "llm_fsm.turn.kind": kind,
            "llm_fsm.turn.runner": runner.turn_index,
            "llm_fsm.state.before": runner.base.state,
        }
        if conversation.id is not None:
            attributes["gen_ai.conversation.id"] = conversation.id
        attributes.update(getattr(runner, "frame_attributes", {}))  # a turn inside a sub-conversation (subflows)
        if runner.resuming is not None:
            attributes.update(_resume_attributes(runner))
        name = f"invoke_agent {definition.name}"
        span = tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes)
        if not span.is_recording():
            return None
        return cls(tracer, span, conversation, runner, llm, content)

    # -- child spans ----------------------------------------------------------------------------

    def child(self, name: str, attributes: dict[str, Any], *, client: bool = False) -> Any:
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        return self.tracer.start_span(name, context=self.parents[-1], kind=kind, attributes=attributes)

    def finish(self, span: Any, content: dict[str, Any] | None = None) -> None:
        """End ``span``; with content, at the turn's end (its end time kept), once every secret of the turn is known."""
        if self.content is None or not content:
            span.end()
        else:
            self.deferred.append((span, time.time_ns(), content))

    def current(self, span: Any) -> _Current:
        return _Current(self, span)

    def failed(self, span: Any, error: BaseException) -> None:
        if span.is_recording():
            span.set_attribute("error.type", type(error).__qualname__)
            span.add_event("exception", error_attributes(error, self.content))
            span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))

    # -- model calls ----------------------------------------------------------------------------

    def call_span(self, call: Call, *, stream: bool) -> Any:
        self.calls += 1
        model = self.llm_attributes.get("gen_ai.request.model")
        attributes = {
            **self.llm_attributes,
            "gen_ai.operation.name": "chat",
            "gen_ai.output.type": "json",
            "llm_fsm.call.kind": call.kind,
            "llm_fsm.call.purpose": call.purpose,
            "llm_fsm.call.number": self.calls,
            "llm_fsm.state": call.request.state or "",
            "llm_fsm.stream": stream,
        }
        if self.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = self.conversation_id
        return self.child(f"chat {model}" if model else "chat", attributes, client=True)

    def responded(self, span: Any, call: Call, response: LLMResponse) -> None:
        usage = response.usage
        attributes: dict[str, Any] = {}
        if response.model:
            attributes["gen_ai.response.model"] = response.model
        if response.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
        if usage.prompt_tokens or usage.completion_tokens:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        attributes.update(cache_attributes(usage))
        if usage.cost is not None:
            attributes["llm_fsm.usage.cost"] = usage.cost
        if response.tool_calls:
            attributes["llm_fsm.tool_calls.requested"] = len(response.tool_calls)
        span.set_attributes(attributes)
        content = None
        if self.content is not None:
            self.content.learn_reply(response.text)
            asked = [{"role": "assistant", "content": response.text, "tool_calls": [
                {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}} for c in response.tool_calls
            ]}]  # fmt: skip
            output = [{**messages(asked)[0], "finish_reason": response.finish_reason or "stop"}]
            content = {"gen_ai.input.messages": messages(call.request.messages), "gen_ai.output.messages": output}
        self.finish(span, content)

    def complete(self, llm: LLMClient, call: Call) -> LLMResponse:
        span = self.call_span(call, stream=False)
        try:
            with self.current(span):
                response = llm.complete(call.request)
        except BaseException:
            self.finish(span)
            raise
        self.responded(span, call, response)
        return response

    async def acomplete(self, llm: LLMClient, call: Call) -> LLMResponse:
        span = self.call_span(call, stream=False)
        try:
            with self.current(span):
                response = await llm.acomplete(call.request)
        except BaseException:
            self.finish(span)
            raise
        self.responded(span, call, response)
        return response

    def stream(self, call: Call, items: Iterator[Any]) -> Iterator[Any]:
        """``items`` (a streamed call's deltas, then its response); its span is current only while the
        next item is read, never while the caller holds one."""
        span = self.call_span(call, stream=True)
        try:
            while True:
                with self.current(span):
                    item = next(items, None)
                if item is None:
                    break
                if not isinstance(item, str):  # the response, after the text deltas
                    self.responded(span, call, item)
                    span = None
                yield item
        finally:
            _close(items)
            if span is not None:  # closed early, or failed: its error is recorded already
                self.finish(span)

    async def astream(self, call: Call, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        span = self.call_span(call, stream=True)
        try:
            while True:
                with self.current(span):
                    item = await anext(items, None)
                if item is None:
                    break
                if not isinstance(item, str):
                    self.responded(span, call, item)
                    span = None
                yield item
        finally:
            if callable(aclose := getattr(items, "aclose", None)):
                await aclose()
            if span is not None:
                self.finish(span)

    # -- handlers, checks, tools ----------------------------------------------------------------

    def handler(self, name: str, timing: str, state: str, target: str | None) -> StepSpan:
        attributes = {"llm_fsm.handler": name, "llm_fsm.handler.timing": timing, "llm_fsm.state": state}
        if target is not None:
            attributes["llm_fsm.target"] = target
        return StepSpan(self, self.child(f"handler {name}", attributes))

    def check(self, name: str, kind: str, state: str) -> StepSpan:
        attributes = {"llm_fsm.check": name, "llm_fsm.check.kind": kind, "llm_fsm.state": state}
        return StepSpan(self, self.child(f"check {name}", attributes))

    def tools(self, calls: Sequence[Prepared]) -> list[ToolSpan]:
        spans = []
        for prepared in calls:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": prepared.call.name,
                "gen_ai.tool.call.id": prepared.call.id,
                "gen_ai.tool.type": "function",
                "llm_fsm.tool.round": prepared.round,
            }
            if prepared.tool is not None and prepared.tool.description:
                attributes["gen_ai.tool.description"] = prepared.tool.description
            spans.append(ToolSpan(self, self.child(f"execute_tool {prepared.call.name}", attributes)))
        return spans

    # -- the turn's end -------------------------------------------------------------------------

    def note(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    @harmless
    def committed(self, result: TurnResult) -> None:
        self.span.set_attributes(_committed_attributes(result))
        for rejection in result.rejected:
            event: dict[str, Any] = {"kind": rejection.kind, "attempt": rejection.attempt}
            if rejection.key:
                event["key"] = rejection.key
            if rejection.target_state:
                event["target_state"] = rejection.target_state
            if self.content is not None:
                event["reason"] = rejection.reason  # scrubbed at the end, with what the turn taught
            self.span.add_event("llm_fsm.rejection", event)
        if self.content is not None:
            self.content.learn(result.context)
            user = [{"role": "user", "parts": [{"type": "text", "content": result.user}]}] if result.user else []
            said = {"role": "assistant", "parts": [{"type": "text", "content": result.message}]}
            self.span.set_attributes({
                "gen_ai.input.messages": self.content.text(user),
                "gen_ai.output.messages": self.content.text([{**said, "finish_reason": "stop"}]),
                "llm_fsm.context_updates": self.content.text(self.content.masked(result.context_updates)),
                "llm_fsm.context": self.content.text(self.content.masked(result.context)),
            })  # fmt: skip

    @harmless
    def end(self, error: BaseException | None) -> None:
        """The turn is over: committed, failed (``error``) or abandoned (a stream closed early)."""
        if self.content is not None:
            self.content.learn(self.runner.context)
            for span, end_time, content in self.deferred:
                span.set_attributes({key: self.content.text(value) for key, value in content.items()})
                span.end(end_time=end_time)
            self.deferred.clear()
        if isinstance(error, Exception):
            self.failed(self.span, error)
        elif error is not None:
            self.span.set_attribute("llm_fsm.turn.abandoned", True)
        self.span.end()


def cache_attributes(usage: Any) -> dict[str, int]:
    """The prompt-cache figures of ``usage`` under OpenTelemetry's GenAI names (when there are some)."""
    attributes = {}
    if usage.cached_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
    if usage.cache_write_tokens:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    return attributes


def _resume_attributes(runner: TurnRunner) -> dict[str, Any]:
    pause = runner.resuming
    assert pause is not None
    attributes: dict[str, Any] = {"llm_fsm.resume.kind": pause.kind}
    if pause.handler:
        attributes["llm_fsm.resume.handler"] = pause.handler
    if pause.kind == "tool_approval":
        decision = runner.decision or {}
        verdict = "supplied" if "result" in decision else "approved" if decision.get("approved") else "rejected"
        attributes.update({"llm_fsm.resume.decision": verdict, "llm_fsm.resume.tool": pause.payload.get("tool", "")})
    return attributes


def _committed_attributes(result: TurnResult) -> dict[str, Any]:
    """What a committed turn's span says about it: the move, the calls, the rejections, the usage."""
    moved = result.previous_state is not None and result.previous_state != result.state
    kinds = [r.kind for r in result.rejected]
    attributes: dict[str, Any] = {
        "llm_fsm.state.after": result.state,
        "llm_fsm.transition": f"{result.previous_state} -> {result.state}" if moved else "stay",
        "llm_fsm.status": result.status,
        "llm_fsm.llm_calls": result.llm_calls,
        "llm_fsm.rejections": len(kinds),
        "llm_fsm.tool_calls": len(result.tool_calls),
        "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": result.usage.completion_tokens,
        **cache_attributes(result.usage),
    }
    if kinds:
        attributes["llm_fsm.rejection.kinds"] = kinds
    if result.corrections:  # the keys only: their values are content (llm_fsm.context, when captured)
        attributes["llm_fsm.definition.corrections"] = list(result.corrections)
    if result.usage.cost is not None:
        attributes["llm_fsm.usage.cost"] = result.usage.cost
    if result.pending is not None:
        attributes.update(_pause_attributes(result))
    return attributes


def _pause_attributes(result: TurnResult) -> dict[str, Any]:
    pending = result.pending
    assert pending is not None
    attributes: dict[str, Any] = {"llm_fsm.paused": True, "llm_fsm.pause.kind": pending.kind}
    if pending.handler:
        attributes["llm_fsm.pause.handler"] = pending.handler
    if pending.timing:
        attributes["llm_fsm.pause.timing"] = pending.timing
    if pending.kind == "tool_approval":
        attributes["llm_fsm.pause.tool"] = str(pending.payload.get("tool", ""))
    return attributes


def _close(items: Any) -> None:
    if callable(close := getattr(items, "close", None)):
        close()


class _Current:
    """``with``: ``span`` is the current span (and an error raised inside is recorded on it)."""

    def __init__(self, trace: TurnTrace, span: Any) -> None:
        self.trace, self.span = trace, span

    def __enter__(self) -> None:
        self.token = otel_context.attach(otel_trace.set_span_in_context(self.span))

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        otel_context.detach(self.token)
        if isinstance(error, Exception):
            self.trace.failed(self.span, error)
        elif error is not None and not isinstance(error, GeneratorExit):
            self.span.set_attribute("llm_fsm.cancelled", True)  # asyncio's CancelledError, KeyboardInterrupt


class StepSpan:
    """The span of a handler or a check: ``with`` it, the step's model calls (a judge's) nest under it;
    :meth:`run` calls the step's function with the span current."""

    def __init__(self, trace: TurnTrace, span: Any) -> None:
        self.trace, self.span = trace, span
        self.content: dict[str, Any] = {}
        self.recorded = False

    def __enter__(self) -> StepSpan:
        self.trace.parents.append(otel_trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.trace.parents.pop()
        if isinstance(error, Break):
            self.span.set_attribute("llm_fsm.handler.break", True)
        elif isinstance(error, Exception) and not self.recorded:
            self.trace.failed(self.span, error)
        elif error is not None and not isinstance(error, Exception):
            self.span.set_attribute("llm_fsm.abandoned", True)
        self.trace.finish(self.span, self.content)

    def run(self, function: Callable[..., Any], keywords: dict[str, Any]) -> Any:
        with self._current():
            outcome = function(**keywords)
        return _Within(self, outcome) if _awaitable(outcome) else outcome

    def _current(self) -> _Recorded:
        return _Recorded(self)

    def verdict(self, why: str | None) -> None:
        self.span.set_attribute("llm_fsm.check.passed", why is None)
        if why is not None:
            self.content["llm_fsm.check.reason"] = why

    def changed(self, delta: dict[str, Any]) -> None:
        if delta:
            self.span.set_attribute("llm_fsm.handler.keys", sorted(delta))
            if self.trace.content is not None:
                self.content["llm_fsm.handler.delta"] = self.trace.content.masked(delta)


class _Recorded:
    """The step's span current; an error its code raises recorded (a ``Break`` is not an error)."""

    def __init__(self, step: StepSpan) -> None:
        self.step = step

    def __enter__(self) -> None:
        self.token = otel_context.attach(otel_trace.set_span_in_context(self.step.span))

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        otel_context.detach(self.token)
        if isinstance(error, Exception) and not isinstance(error, Break):
            self.step.trace.failed(self.step.span, error)
            self.step.recorded = True


class _Within:
    """An awaitable whose code runs with a step's span current (in the task that awaits it)."""

    def __init__(self, step: StepSpan, awaitable: Any) -> None:
        self.step, self.awaitable = step, awaitable

    def __await__(self) -> Any:
        with self.step._current():
            return (yield from self.awaitable.__await__())

    def close(self) -> None:
        if callable(close := getattr(self.awaitable, "close", None)):
            close()


def _awaitable(value: Any) -> bool:
    return inspect.isawaitable(value)


class ToolSpan:
    """The span of a tool call: :meth:`run` calls the tool with the span current (in its worker thread
    or task); :meth:`ended` records its outcome."""

    def __init__(self, trace: TurnTrace, span: Any) -> None:
        self.trace, self.span = trace, span
        self.step = StepSpan(trace, span)

    def run(self, function: Callable[..., Any], keywords: dict[str, Any]) -> Any:
        with self.step._current():
            outcome = function(**keywords)
        return _coroutine(self.step, outcome) if _awaitable(outcome) else outcome

    def ended(self, run: ToolRun) -> ToolRun:
        if run.error is not None and not self.step.recorded:  # not raised by the tool: timed out, or a bad result
            kind = "timeout" if run.error.startswith(("timed out", "not run")) else "invalid_result"
            self.span.set_attribute("error.type", kind)
            self.span.set_status(Status(StatusCode.ERROR, kind))
        content = None
        if self.trace.content is not None:
            self.trace.content.learn({"arguments": run.arguments, "result": run.result})
            content = {"gen_ai.tool.call.arguments": self.trace.content.masked(run.arguments)}
            if run.error is None:
                content["gen_ai.tool.call.result"] = self.trace.content.masked(run.result)
            else:
                content["llm_fsm.tool.error"] = run.error
        self.trace.finish(self.span, content)
        return run


async def _coroutine(step: StepSpan, awaitable: Any) -> Any:
    """``awaitable`` as a coroutine (``asyncio.run`` takes nothing else) with the step's span current."""
    with step._current():
        return await awaitable
