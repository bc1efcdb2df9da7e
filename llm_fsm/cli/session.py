"""A conversation for the terminal commands, saved to a store after every turn when one is named.

``--conversation ID`` (with ``--store URL``, default SQLite under ``$LLM_FSM_HOME``) makes ``run``
and ``chat`` continue where that conversation stopped. Each turn holds the conversation's lock
(waiting up to ``--wait`` seconds for another process), picks up any newer version first, and
saves with a version check, so two terminals on one id never lose a turn.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

import typer

from llm_fsm.conversation import Conversation
from llm_fsm.engine import Snapshot
from llm_fsm.errors import ConversationError, StoreError
from llm_fsm.store import Store, open_store

T = TypeVar("T")


class Tracked:
    """The conversation in use, and where it is saved (if anywhere)."""

    def __init__(
        self,
        make: Callable[[Snapshot | None], Conversation],
        store: Store | None = None,
        conversation_id: str | None = None,
        wait: float = 30.0,
    ) -> None:
        self.make = make
        self.store = store
        self.id = conversation_id
        self.wait = wait
        self.version = 0
        self.conversation = make(None)
        if store is not None and conversation_id is not None:
            record = store.load(conversation_id)
            if record is not None:
                self.conversation, self.version = make(record.snapshot), record.version

    @property
    def is_new(self) -> bool:
        return self.version == 0

    def run(self, action: Callable[[Conversation], T]) -> T:
        """Run ``action`` on the conversation; with a store, under its lock, then save the result."""
        if self.store is None or self.id is None:
            return action(self.conversation)
        with self.store.lock(self.id, timeout=self.wait):
            record = self.store.load(self.id)
            if record is not None and record.version != self.version:  # another process went on
                self.conversation, self.version = self.make(record.snapshot), record.version
            result = action(self.conversation)
            self.save()
        return result

    def replace(self, conversation: Conversation) -> None:
        """Use ``conversation`` from now on (after /back, /load, /reset), saving it."""
        self.conversation = conversation
        if self.store is not None and self.id is not None:
            with self.store.lock(self.id, timeout=self.wait):
                record = self.store.load(self.id)
                self.version = record.version if record else 0
                self.save()

    def save(self) -> None:
        assert self.store is not None and self.id is not None
        self.version = self.store.save(self.id, self.conversation.snapshot(), expected_version=self.version)


def track(
    make: Callable[[Snapshot | None], Conversation],
    store_url: str | None,
    conversation_id: str | None,
    wait: float,
) -> Tracked:
    """The conversation for a command: stored when ``--store`` or ``--conversation`` is given."""
    if store_url is None and conversation_id is None:
        return Tracked(make)
    try:
        store = open_store(store_url)
        if conversation_id is None:
            conversation_id = uuid.uuid4().hex[:12]
            typer.echo(f"conversation: {conversation_id} (continue it with --conversation {conversation_id})", err=True)
        return Tracked(make, store, conversation_id, wait)
    except (StoreError, ConversationError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
