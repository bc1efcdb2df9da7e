"""Every error llm_fsm raises derives from :class:`FSMError`.

::

    FSMError
    ├── DefinitionError        a definition failed to load; ``.problems`` lists every problem found
    ├── LogicError             a JsonLogic rule is malformed or too deep (also reported at load time)
    ├── PromptError            a prompt template failed to render (missing variable, sandbox violation)
    │   └── OpeningError           a state's opening could not be written over the context (a key it reads is missing)
    ├── LLMError               the model could not be reached or refused the request
    │   ├── LLMAuthError           credentials rejected (never retried)
    │   ├── LLMRequestError        the request itself is wrong: 400/404/422, unknown model (never retried)
    │   ├── LLMContextWindowError  the prompt is longer than the model's context window
    │   ├── LLMUnavailableError    timeouts, connection errors, 429 and 5xx, after our retries ran out
    │   ├── ScriptExhausted        a ScriptedLLM has no reply left for a call (test doubles)
    │   └── CassetteMismatch       a replayed conversation sent a request the cassette did not record
    ├── ReplyFormatError       the model's text holds no usable reply (also a ValueError; a turn turns it
    │   │                      into a format rejection and a corrective call, so it never escapes a turn)
    │   └── ReplyTruncated         the reply was cut off before its end (token limit, or JSON that stops short)
    ├── HandlerError           a handler with the "raise" policy failed (the turn was rolled back)
    ├── RefinementError        a state's checks kept failing and its policy is "raise"
    ├── ContextValueError      code wrote a context value that is not JSON data (also a TypeError)
    ├── MemoryValueError       code wrote a memory slot that is not declared, not text, or too long (a ValueError)
    ├── EmptyMessageError      send() was given no text: empty, or only whitespace (a ValueError; nothing changed)
    ├── StoreError             a conversation store cannot be opened or used
    │   └── ConflictError          another writer holds the conversation, or saved it first
    └── ConversationError      the conversation cannot take this call in its current status
        ├── ConversationEnded      the conversation reached a terminal state
        ├── ConversationPaused     a handler paused it: resume() with the pending event's token first
        ├── ResumeError            the resume token is wrong or was already used
        ├── IdempotencyKeyReused   an idempotency key sent again with another request
        └── RunLimitError          a run took ``max_run_steps`` steps on its own and stopped (its steps stand)

Setup errors (``DefinitionError``, ``LogicError``, ``PromptError``) are raised while loading or
rendering; run errors (``LLMError``, ``ConversationError``) while a conversation runs. A failed turn
never changes the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class FSMError(Exception):
    """Base of every error raised by llm_fsm."""


@dataclass(frozen=True)
class Problem:
    """One problem found in a definition: where it is, what is wrong, and how to fix it."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    code: str = "invalid"
    source: str | None = None

    def __str__(self) -> str:
        where = self.source or ""
        if self.line is not None:
            where = f"{where}:{self.line}:{self.column}" if where else f"{self.line}:{self.column}"
        head = f"{where}: " if where else ""
        path = f"{self.path}: " if self.path else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{head}{path}{self.message}{hint}"


class DefinitionError(FSMError):
    """A definition is invalid. ``problems`` holds every problem found, not only the first."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        name = f" {source}" if source else ""
        super().__init__(f"invalid definition{name}: {count} problem(s)\n{lines}")


class LogicError(FSMError):
    """A JsonLogic rule is malformed, uses an operator outside the allow-list, or nests too deep."""


class PromptError(FSMError):
    """A prompt template could not be rendered."""


class OpeningError(PromptError):
    """A state's own opening (its ``opening`` template) could not be written over the context: a key it
    reads is missing, or the sandbox refused it. The opening turn changed nothing."""


class LLMError(FSMError):
    """The model call failed. ``attempts`` counts the calls made, ``cause`` keeps the provider's error."""

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status_code: int | None = None,
        attempts: int = 1,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code
        self.attempts = attempts
        self.cause = cause


class LLMAuthError(LLMError):
    """The provider rejected the credentials."""


class LLMRequestError(LLMError):
    """The provider rejected the request as malformed (400/404/422, unknown model or provider)."""


class LLMContextWindowError(LLMRequestError):
    """The prompt does not fit the model's context window."""


class LLMUnavailableError(LLMError):
    """Timeouts, connection failures, rate limits or server errors persisted after every retry."""


class ScriptExhausted(LLMError):
    """The script has no reply left for a call the runtime made."""


class CassetteMismatch(LLMError):
    """The runtime sent a request the cassette did not record (``diff`` shows how they differ)."""

    def __init__(self, message: str, diff: str) -> None:
        super().__init__(f"{message}\n{diff}" if diff else message, model="replay")
        self.diff = diff


class ReplyFormatError(FSMError, ValueError):
    """The model's text holds no usable reply. ``str()`` says what is wrong, for the model to fix."""


class ReplyTruncated(ReplyFormatError):
    """The reply stops before its end: the provider hit the token limit, or its JSON is cut short."""


class ConversationError(FSMError):
    """The conversation cannot accept this call now. ``state`` is where it stands."""

    def __init__(self, message: str, *, state: str | None = None) -> None:
        super().__init__(message)
        self.state = state


class ConversationEnded(ConversationError):
    """The conversation is in a terminal state and accepts no more messages."""


class ConversationPaused(ConversationError):
    """The conversation waits for ``resume()``: a handler raised ``Break``. ``conv.pending`` says why."""


class ResumeError(ConversationError):
    """``resume()`` was called with a token that is not the pending one, or that was already used."""


class IdempotencyKeyReused(ConversationError):
    """An idempotency key came again with another request than the one it was first sent with (a new
    request needs a new key); nothing ran. See :mod:`llm_fsm.store.idempotency`."""


class RunLimitError(ConversationError):
    """A run took ``limit`` steps on its own (acting states and automatic moves) and stopped in ``state``: the
    definition's ``max_run_steps``. Every step it took was committed (and saved, with a store)."""

    def __init__(self, message: str, *, state: str | None = None, limit: int = 0) -> None:
        super().__init__(message, state=state)
        self.limit = limit


class HandlerError(FSMError):
    """A handler with the ``raise`` policy failed; the turn was rolled back. ``cause`` is its exception."""

    def __init__(self, name: str, timing: str, cause: BaseException) -> None:
        try:  # a cause whose __str__ raises must not replace this error with its own
            said = str(cause)
        except Exception:
            said = ""
        what = f"{type(cause).__name__}: {said}" if said else type(cause).__name__
        super().__init__(f"handler '{name}' failed at '{timing}': {what}")
        self.name = name
        self.timing = timing
        self.cause = cause


class HooksLoadError(FSMError):
    """``Hooks.load`` could not give the ``Hooks`` object a ``MODULE:NAME`` or ``FILE.py:NAME`` spec names."""


class RefinementError(FSMError):
    """A state's checks still failed after its retries, and its policy is ``raise``. Nothing changed.

    ``failures`` holds the failed checks as :class:`~llm_fsm.snapshot.Rejection` objects.
    """

    def __init__(self, message: str, *, state: str, failures: tuple[Any, ...]) -> None:
        super().__init__(message)
        self.state = state
        self.failures = failures


class ContextValueError(FSMError, TypeError):
    """Code wrote a context value that is not JSON data (see :mod:`llm_fsm.values`). ``key`` names where."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class MemoryValueError(FSMError, ValueError):
    """Code wrote a working-memory slot that is not declared, a value that is not text, or one too long."""


class EmptyMessageError(FSMError, ValueError):
    """The user's message is empty or only whitespace: there is nothing to answer, so no turn runs.

    The opening turn takes no message: it is ``start()`` (``None`` in :meth:`Conversation.stream`).
    """


class StoreError(FSMError):
    """A conversation store cannot be opened or used (bad URL, unreadable data, server unreachable)."""


class ConflictError(StoreError):
    """Another writer holds the conversation (or saved it first). ``conversation_id`` names it."""

    def __init__(self, message: str, *, conversation_id: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
