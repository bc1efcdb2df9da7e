"""OpenTelemetry traces of turns (the optional ``[otel]`` extra: ``pip install 'llm-fsm-runtime[otel]'``).

A turn is one span, ``invoke_agent {definition}``, with a child span per model call (``chat {model}``,
corrective and judge calls included), per tool call (``execute_tool {tool}``), per acceptance check
(``check {name}``) and per handler (``handler {name}``). Names and attributes follow the OpenTelemetry
GenAI semantic conventions (``gen_ai.*``); ours are ``llm_fsm.*``. The spans go to the tracer provider
the application set up (``opentelemetry.trace.set_tracer_provider``), or to the one given to
:func:`set_tracer_provider` here.

Nothing here costs anything unless the application uses OpenTelemetry: this module imports it only
when it is already imported (an application that set a tracer provider has imported it) or a
provider was given here, and a turn whose span does not record (no provider, or not sampled) is run
without any tracing. ``import llm_fsm`` never imports opentelemetry.

What spans hold: no message text, no context value, no tool argument or result, unless
``LLM_FSM_TRACE_CONTENT=1`` is set (read at each turn). Even then, values under secret context keys
(:mod:`llm_fsm.secrets`, the definition's ``secret_keys``) are masked, and wherever such a value
appears in recorded text (a user who typed a password) it is replaced by ``[masked]``. API keys,
headers and tokens are never recorded.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from llm_fsm.telemetry.recording import harmless, warn_once

if TYPE_CHECKING:
    from llm_fsm.telemetry.runs import RunTrace
    from llm_fsm.telemetry.spans import TurnTrace

__all__ = ["CONTENT_VARIABLE", "TRACER_NAME", "set_tracer_provider"]

CONTENT_VARIABLE = "LLM_FSM_TRACE_CONTENT"
TRACER_NAME = "llm_fsm"
INSTALL = "pip install 'llm-fsm-runtime[otel]'"
_ON, _OFF = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}


class _Settings:
    provider: Any = None  # given to set_tracer_provider; None: OpenTelemetry's global one
    tracer: Any = None


def set_tracer_provider(provider: Any) -> None:
    """Send llm_fsm's spans to ``provider`` (an OpenTelemetry ``TracerProvider``) instead of the
    global one; None goes back to the global one."""
    if provider is not None and not callable(getattr(provider, "get_tracer", None)):
        raise TypeError(f"set_tracer_provider takes an OpenTelemetry TracerProvider or None, not {provider!r:.80}")
    _Settings.provider, _Settings.tracer = provider, None


def content_enabled() -> bool:
    """Whether ``LLM_FSM_TRACE_CONTENT`` asks for message text and context values in spans."""
    value = os.environ.get(CONTENT_VARIABLE, "").strip().lower()
    if value in _ON:
        return True
    if value not in _OFF:
        warn_once(
            f"{CONTENT_VARIABLE}={value!r} is not understood: use 1 (record content) or 0; content is off", setting=True
        )
    return False


def _otel_in_use() -> bool:
    """Whether the application may be tracing: it imported OpenTelemetry, or gave us a provider."""
    if _Settings.provider is not None or "opentelemetry.trace" in sys.modules:
        return True
    if "OTEL_PYTHON_TRACER_PROVIDER" in os.environ:  # a provider named in the environment, loaded on first use
        return True
    if os.environ.get(CONTENT_VARIABLE) and content_enabled() and not _installed():
        warn_once(
            f"{CONTENT_VARIABLE} is set but OpenTelemetry is not installed, so no trace is recorded: {INSTALL}",
            setting=True,
        )
    return False


@functools.cache
def _installed() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("opentelemetry") is not None
    except ImportError:  # an import hook refused it: as good as missing
        return False


def _tracer() -> Any:
    if _Settings.tracer is None:
        try:
            from opentelemetry import trace
        except ImportError:  # pragma: no cover (a provider was given, so it is installed)
            return None
        provider = _Settings.provider or trace.get_tracer_provider()
        _Settings.tracer = provider.get_tracer(TRACER_NAME, _version())
    return _Settings.tracer


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-fsm-runtime")
    except PackageNotFoundError:  # pragma: no cover (run from a source tree)
        return "0"


def start_turn(conversation: Any, runner: Any) -> TurnTrace | NoTrace:
    """The trace of the turn ``runner`` is about to run: its span started (ended by :meth:`TurnTrace.end`), under
    the span of the run it is a step of, if any (``conversation.run_trace``)."""
    if not _otel_in_use():
        return NO_TRACE
    return _start(conversation, runner) or NO_TRACE


@harmless
def _start(conversation: Any, runner: Any) -> TurnTrace | None:
    tracer = _tracer()
    if tracer is None:
        return None
    from llm_fsm.telemetry.spans import TurnTrace

    parent = getattr(conversation, "run_trace", NO_RUN).parent
    return TurnTrace.start(tracer, conversation, runner, describe(conversation.llm), content_enabled(), parent)


def start_run(conversation: Any) -> RunTrace | NoRun:
    """The trace of a run (:mod:`llm_fsm.running`) about to start: its span, the parent of its steps' spans."""
    if not _otel_in_use():
        return NO_RUN
    return _start_run(conversation) or NO_RUN


@harmless
def _start_run(conversation: Any) -> RunTrace | None:
    tracer = _tracer()
    if tracer is None:
        return None
    from llm_fsm.telemetry.runs import RunTrace

    return RunTrace.start(tracer, conversation)


def retrying(error: BaseException, attempt: int, delay: float) -> None:
    """A model call is retried after ``error``: an event on the model call's span, if it is traced."""
    if "opentelemetry.trace" not in sys.modules:
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.add_event("llm_fsm.retry", {"error.type": type(error).__name__, "attempt": attempt, "delay_s": delay})


def describe(llm: Any) -> dict[str, Any]:
    """The GenAI attributes of ``llm``'s requests: its ``trace_attributes()`` (``LiteLLMClient`` has one),
    else its ``provider`` and ``model`` attributes if it has them (any client may)."""
    own = getattr(llm, "trace_attributes", None)
    if callable(own):
        return dict(own())
    model, provider = getattr(llm, "model", None), getattr(llm, "provider", None)
    return {
        "gen_ai.provider.name": provider if isinstance(provider, str) else "_OTHER",
        **({"gen_ai.request.model": model} if isinstance(model, str) else {}),
    }


class NoSpan:
    """The span of an untraced turn: every method does nothing (but run the code it is given)."""

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @staticmethod
    def run(function: Callable[..., Any], keywords: dict[str, Any]) -> Any:
        return function(**keywords)

    def verdict(self, why: str | None) -> None:
        return None

    def changed(self, delta: dict[str, Any]) -> None:
        return None

    @staticmethod
    def ended(run: Any) -> Any:
        return run


NO_SPAN = NoSpan()


class NoTrace:
    """The trace of an untraced turn: the same methods as :class:`TurnTrace`, doing nothing."""

    content = None

    def handler(self, name: str, timing: str, state: str, target: str | None) -> NoSpan:
        return NO_SPAN

    def check(self, name: str, kind: str, state: str) -> NoSpan:
        return NO_SPAN

    def tools(self, calls: Sequence[Any]) -> None:
        return None

    def complete(self, llm: Any, call: Any) -> Any:
        return llm.complete(call.request)

    async def acomplete(self, llm: Any, call: Any) -> Any:
        return await llm.acomplete(call.request)

    def stream(self, call: Any, items: Iterator[Any]) -> Iterator[Any]:
        return items

    def astream(self, call: Any, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return items

    def note(self, key: str, value: Any) -> None:
        return None

    def committed(self, result: Any) -> None:
        return None

    def end(self, error: BaseException | None) -> None:
        return None


NO_TRACE = NoTrace()


class NoRun:
    """The trace of an untraced run: its steps' spans have no parent of it."""

    parent = None

    def step(self, result: Any) -> None:
        return None

    def end(self, error: BaseException | None) -> None:
        return None


NO_RUN = NoRun()
