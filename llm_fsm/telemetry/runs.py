"""The span of a run (:mod:`llm_fsm.running`): ``run {definition}``, with each step's turn span under it
(imported only when tracing, like :mod:`llm_fsm.telemetry.spans`).

Its attributes say where the run began and ended, how many steps it took (and of which kinds), and why it stopped:
``waits`` (a state waits for a person), ``paused``, ``ended``, or the error's type (``RunLimitError`` at the limit).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from llm_fsm.telemetry.recording import harmless


class RunTrace:
    """The span of one run; ``parent`` is the context its steps' spans start in."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self.parent = otel_trace.set_span_in_context(span)
        self.kinds: Counter[str] = Counter()
        self.last: Any = None

    @classmethod
    def start(cls, tracer: Any, conversation: Any) -> RunTrace | None:
        """The run's span started; None when it does not record (its steps are then traced as turns of their own)."""
        definition = conversation.definition
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": definition.name,
            "llm_fsm.definition.version": definition.version,
            "llm_fsm.state.before": conversation.state,
        }
        if conversation.id is not None:
            attributes["gen_ai.conversation.id"] = conversation.id
        span = tracer.start_span(f"run {definition.name}", kind=SpanKind.INTERNAL, attributes=attributes)
        return cls(span) if span.is_recording() else None

    @harmless
    def step(self, result: Any) -> None:
        self.kinds[result.step] += 1
        self.last = result

    @harmless
    def end(self, error: BaseException | None) -> None:
        attributes: dict[str, Any] = {
            "llm_fsm.run.steps": sum(self.kinds.values()),
            **{f"llm_fsm.run.steps.{kind}": count for kind, count in self.kinds.items()},
        }
        if self.last is not None:
            attributes["llm_fsm.state.after"] = self.last.state
        if isinstance(error, Exception):
            attributes["llm_fsm.run.stopped"] = type(error).__name__
            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
        elif error is not None:  # closed before its end (a stream the caller stopped reading)
            attributes["llm_fsm.run.stopped"] = "abandoned"
        elif self.last is not None:
            attributes["llm_fsm.run.stopped"] = "ended" if self.last.ended else self.last.status
            if self.last.status == "active":
                attributes["llm_fsm.run.stopped"] = "waits"
        self.span.set_attributes(attributes)
        self.span.end()
