"""The messages a turn sends the model, owned in one place (:class:`Transcript`, ``Working.transcript``): the
prompt, the tool rounds after it, and the exchange of the last correction, which stays in what the model reads
next only where tools follow it (a correction answered by a reply is not sent again)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Message = dict[str, Any]


class Transcript:
    """The turn's messages to the model so far."""

    def __init__(self) -> None:
        self.messages: list[Message] = []  # the prompt, then each tool round's exchange
        self.correction: list[Message] = []  # the last correction's exchange (the reply, then what was wrong)

    def start(self, messages: list[Message]) -> list[Message]:
        """The turn's prompt (or what follows a person's decision about a tool call): what the model reads first."""
        self.messages, self.correction = messages, []
        return messages

    def corrected(self, reply: str, feedback: str) -> list[Message]:
        """What the model reads after ``feedback`` on its ``reply``: the messages so far, then that exchange."""
        self.correction = [{"role": "assistant", "content": reply}, {"role": "user", "content": feedback}]
        return [*self.messages, *self.correction]

    def tools_answered(self, exchange: Sequence[Message]) -> list[Message]:
        """What the model reads after a tool round's ``exchange``: the correction that call answered stays."""
        self.messages, self.correction = [*self.messages, *self.correction, *exchange], []
        return self.messages
