"""The chat beside the editor: one conversation at a time with the definition as it is being edited.

Each :meth:`TryIt.start` loads the edited value (not the file: what the author sees is what they try) and
makes the model for it anew, since ``--model simulated`` walks the very definition it is given: a state added
since the last start must be one it can reach. Other models (``chat``'s model options) are made by the same
factory. Turns run under a lock: the page's requests run in a thread pool, and a conversation takes one turn
at a time. What fails, in the definition, the runtime or the model, is a :class:`TryItError` whose message
says what to do, never a traceback.

The path the conversation took (``visited``: the states in the order they were entered) and the move of
the last turn (``edge``) are what the page lights up on the graph; the turn's tool runs (``tool_calls``: name,
arguments, ``ok``, ``error``) are lines of its transcript.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_fsm.editor.refusal import Refused
from llm_fsm.errors import (
    ConversationEnded,
    ConversationError,
    ConversationPaused,
    DefinitionError,
    EmptyMessageError,
    FSMError,
    LLMError,
    Problem,
)
from llm_fsm.hooks import Hooks

if TYPE_CHECKING:
    from llm_fsm.conversation import Conversation
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.llm import LLMClient
    from llm_fsm.tools.tool_types import ToolRun
    from llm_fsm.turn.steps import TurnResult

logger = logging.getLogger("llm_fsm.editor")

ClientFactory = Callable[["FSMDefinition"], "LLMClient"]
SHOWN_PROBLEMS = 5  # problems named in the message of a definition that does not load; the rest are counted
TURN_WAIT = 300.0  # seconds a request waits for the turn under way before it is refused as busy


class TryItError(Refused):
    """A chat request that failed: in the definition, the runtime or the model."""


def simulated(definition: FSMDefinition) -> LLMClient:
    """``--model simulated``: valid replies along the graph of this definition (offline, no key)."""
    from llm_fsm.testing.simulation import SimulatedLLM

    return SimulatedLLM(definition)


class TryIt:
    """The chat of one editor: ``start`` a conversation on an edited value, then ``send`` it messages.

    ``source`` is the file's path: relative subflow paths resolve from its folder, and problems name it.
    ``client_factory`` makes the model for a definition (default: :func:`simulated`)."""

    def __init__(
        self,
        source: str | Path,
        client_factory: ClientFactory | None = None,
        hooks: Hooks | None = None,
        *,
        conversation_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.source = str(source)
        self.client_factory = client_factory or simulated
        self.hooks = hooks if hooks is not None else Hooks()
        self.options = dict(conversation_options or {})
        self._lock = threading.Lock()
        self._conversation: Conversation | None = None
        self._visited: list[str] = []

    def start(
        self,
        value: Any,
        from_state: str | None = None,
        context: Mapping[str, Any] | None = None,
        *,
        text: str | None = None,
    ) -> dict[str, Any]:
        """A new conversation on ``value`` (``text``: the text a save would write of it, so that problems
        point into the file as it will be), from ``from_state`` (None: the initial state), and its opening."""
        if context is not None and not isinstance(context, Mapping):
            raise TryItError(400, "invalid_request", f"the context must be a JSON object, not {_kind(context)}")
        if from_state is not None and not isinstance(from_state, str):
            raise TryItError(
                400, "invalid_request", f"the state must be a state id (a string), not {_kind(from_state)}"
            )
        definition = self._load(value, text)
        if from_state is not None and from_state not in definition.states:
            known = ", ".join(definition.states)
            raise TryItError(422, "unknown_state", f"there is no state '{from_state}' to start from (states: {known})")
        with self._turn():
            from llm_fsm.conversation import Conversation

            self._conversation = None
            try:
                llm = self.client_factory(definition)
                conversation = Conversation(
                    definition, llm, state=from_state, context=dict(context or {}), hooks=self.hooks, **self.options
                )
            except DefinitionError as exc:  # handlers, checks or tools the hooks do not provide
                raise _not_loading(exc.problems, "it cannot run") from None
            except Exception as exc:
                raise _failure(exc) from None
            self._visited = [conversation.state]
            result = self._run(conversation.start)
            self._conversation = conversation
            return self._answer(conversation, result, moved=False)

    def send(self, text: Any) -> dict[str, Any]:
        """The reply of the conversation started last to the user's ``text``, and where it moved."""
        if not isinstance(text, str):
            raise TryItError(400, "invalid_request", f"the message must be a string, not {_kind(text)}")
        with self._turn():
            conversation = self._conversation
            if conversation is None:
                raise TryItError(409, "no_chat", "no chat is under way: start one first")
            result = self._run(lambda: conversation.send(text))
            return self._answer(conversation, result, moved=True)

    def stop(self) -> None:
        """Forget the conversation (the next message needs a new start)."""
        with self._turn():
            self._conversation = None
            self._visited = []

    # -- inside ------------------------------------------------------------------------------------

    def _load(self, value: Any, text: str | None) -> FSMDefinition:
        from llm_fsm.definition.loader import load_text

        if not isinstance(value, dict):
            raise TryItError(
                422, "definition_error", f"fix the problems first: a definition is a JSON object, not {_kind(value)}"
            )
        written = text if text is not None else json.dumps(value, indent=2, ensure_ascii=False)
        try:
            report = load_text(written.removeprefix("\ufeff"), source=self.source)
        except (RecursionError, ValueError) as exc:
            raise TryItError(422, "definition_error", f"fix the problems first: {exc}") from None
        if report.definition is None:
            raise _not_loading(report.errors, "it does not load")
        return report.definition

    def _turn(self) -> Any:
        lock = self._lock

        class Held:
            def __enter__(self) -> None:
                if not lock.acquire(timeout=TURN_WAIT):
                    raise TryItError(409, "busy", "the chat is still answering the last message: try again")

            def __exit__(self, *exc: object) -> None:
                lock.release()

        return Held()

    def _run(self, turn: Callable[[], TurnResult]) -> TurnResult:
        try:
            return turn()
        except TryItError:
            raise
        except Exception as exc:
            raise _failure(exc) from None

    def _answer(self, conversation: Conversation, result: TurnResult, *, moved: bool) -> dict[str, Any]:
        edge = None
        for step in (*result.steps, result):
            if step.state != self._visited[-1]:
                self._visited.append(step.state)
            if step.previous_state is not None and step.previous_state != step.state:
                edge = {"from": step.previous_state, "to": step.state}
        return {
            "state": conversation.state,
            "message": result.message,
            "context": conversation.context,
            "ended": conversation.ended,
            "paused": conversation.paused,
            "visited": list(self._visited),
            "edge": edge if moved else None,
            "tool_calls": [_tool_call(run) for step in (*result.steps, result) for run in step.tool_calls],
        }


def _tool_call(run: ToolRun) -> dict[str, Any]:
    """A tool run of the turn as the transcript shows it: what was called with what, and whether it failed.
    Its result is left out: the reply says what the model made of it, and a result can be large."""
    return {"name": run.name, "arguments": run.arguments, "ok": run.ok, "error": run.error}


def _not_loading(problems: list[Problem], why: str) -> TryItError:
    shown = "; ".join(str(p) for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    if more > 0:
        shown += f"; and {more} more (see the problems list)"
    problem_list = [{"path": p.path, "message": p.message, "line": p.line, "column": p.column} for p in problems]
    return TryItError(422, "definition_error", f"fix the problems first: {why}: {shown}", problems=problem_list)


def _failure(exc: Exception) -> TryItError:
    """What the page is told when the model or the runtime fails in a turn."""
    if isinstance(exc, ConversationEnded):
        return TryItError(409, "conversation_ended", f"{exc}: restart the chat to go on")
    if isinstance(exc, ConversationPaused):
        return TryItError(
            409, "conversation_paused", f"{exc}: the editor's chat cannot resume a pause; restart the chat"
        )
    if isinstance(exc, EmptyMessageError):
        return TryItError(422, "empty_message", str(exc))
    if isinstance(exc, LLMError):
        return TryItError(502, "model_error", f"the model failed: {exc}")
    if isinstance(exc, ConversationError | FSMError):
        return TryItError(422, "runtime_error", f"{type(exc).__name__}: {exc}")
    logger.exception("the editor's chat failed")
    return TryItError(500, "internal_error", f"the chat failed: {type(exc).__name__}: {exc}")


def _kind(value: Any) -> str:
    from llm_fsm.definition.wording import what

    return what(value)
