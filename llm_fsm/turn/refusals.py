"""Whether a conversation may take a turn now: one rule, for the library and for the HTTP API.

:func:`turn_refusal` answers None (the turn may start) or a :class:`Refusal`: a reason code, the
message and the state. ``Conversation`` raises the refusal's :meth:`~Refusal.error` when a turn starts.
``llm-fsm serve`` asks the same question before it streams a turn, since a stream's status (200) is
sent before the turn runs, and raises the same error, which it answers as it answers that error from
any turn (``llm_fsm.server.errors``: 410 ``conversation_ended``, 409 ``conversation_paused``...).

==============  ====================================  =========================================
reason          when                                  error
==============  ====================================  =========================================
``busy``        another turn of this object runs      ``ConversationError``
``ended``       the conversation reached a terminal   ``ConversationEnded``
                state
``paused``      a pause waits for ``resume()``        ``ConversationPaused``
``started``     an opening turn (no message) after    ``ConversationError``
                the opening was made
``not_text``    the message is not a ``str``          ``TypeError``
``empty``       the message has no visible text       ``EmptyMessageError``
==============  ====================================  =========================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from llm_fsm.errors import ConversationEnded, ConversationError, ConversationPaused, EmptyMessageError
from llm_fsm.values import blank

if TYPE_CHECKING:
    from llm_fsm.snapshot import PendingEvent

__all__ = ["Reason", "Refusal", "blankness", "turn_refusal"]

Reason = Literal["busy", "ended", "paused", "started", "not_text", "empty"]


class Standing(Protocol):
    """What the rule reads of a conversation (``Conversation`` has all of it)."""

    @property
    def state(self) -> str: ...
    @property
    def ended(self) -> bool: ...
    @property
    def paused(self) -> bool: ...
    @property
    def pending(self) -> PendingEvent | None: ...
    @property
    def history(self) -> Sequence[object]: ...


@dataclass(frozen=True)
class Refusal:
    """Why a turn may not start: a stable ``reason`` code, the ``message`` said to the caller, the ``state``."""

    reason: Reason
    message: str
    state: str

    def error(self) -> Exception:
        """The error a turn refused for this reason raises."""
        if self.reason == "ended":
            return ConversationEnded(self.message, state=self.state)
        if self.reason == "paused":
            return ConversationPaused(self.message, state=self.state)
        if self.reason == "empty":
            return EmptyMessageError(self.message)
        if self.reason == "not_text":  # a programming error, not a state of the conversation
            return TypeError(self.message)
        return ConversationError(self.message, state=self.state)


def turn_refusal(
    conversation: Standing, user: object, *, busy: bool = False, resuming: bool = False, going_on: bool = False
) -> Refusal | None:
    """Why ``conversation`` may not take a turn with the message ``user`` (None: the opening turn) now, or None.

    ``busy``: another turn of the same object is running. ``resuming``: the turn is a ``resume()``,
    whose pause and token the engine checks, so only ``busy`` refuses it here. ``going_on``: a step of a run
    that nobody typed for (an acting state's turn, an automatic move), which needs no message.
    """
    state = conversation.state
    if busy:
        return Refusal("busy", "another turn of this conversation is in progress", state)
    if resuming:
        return None
    if conversation.ended:
        return Refusal("ended", f"the conversation has ended in state '{state}'", state)
    if conversation.paused:
        reason = conversation.pending.reason if conversation.pending else "paused"
        # The HTTP API says "resume it" instead of "call resume()" (llm_fsm.server.errors).
        return Refusal("paused", f"the conversation is paused ({reason}); call resume() with its token", state)
    if user is None and going_on:
        return None
    if user is None:
        if conversation.history:
            return Refusal("started", "the opening turn was already made: send a message", state)
        return None
    if not isinstance(user, str):
        return Refusal("not_text", f"send() takes a str, not {type(user).__name__}", state)
    return _empty(user, state)


def _empty(user: str, state: str) -> Refusal | None:
    """A message with no text is refused: its turn would show the model an empty user turn, which reads
    as the conversation's beginning."""
    what = blankness(user)
    if what is None:
        return None
    return Refusal("empty", f"the user's message is {what}: there is nothing to answer", state)


def blankness(text: str) -> str | None:
    """What a text that shows nothing is, in words (``"empty"``, ``"only whitespace"``, ``"only invisible
    characters"``), or None when it shows something (see :func:`~llm_fsm.values.blank`)."""
    if not blank(text):
        return None
    return "empty" if not text else "only whitespace" if not text.strip() else "only invisible characters"
