"""What the routes share (:class:`Service`): the definitions served, the model, the hooks, the store and
the policies; a client's stored conversation by its id (:class:`Stored`); and the hooks' sync handlers
and checks wrapped to run in worker threads (:func:`off_the_loop`), so a slow one does not hold the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from llm_fsm.conversation import Conversation
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import ConversationError
from llm_fsm.hooks import Hooks, is_async
from llm_fsm.llm import LLMClient
from llm_fsm.server.errors import APIError, not_found
from llm_fsm.server.retries import id_of
from llm_fsm.snapshot import Snapshot
from llm_fsm.store import Store, StoredConversation
from llm_fsm.store.clients import client_key

if TYPE_CHECKING:
    from llm_fsm.tools.mcp import MCPServer

Busy = Literal["queue", "reject"]
DEFAULT_WAIT = 30.0


class Service:
    """What the routes share: the definitions, the model, the hooks, the store and the policies."""

    def __init__(
        self,
        definitions: Mapping[str, FSMDefinition],
        llm: LLMClient,
        hooks: Hooks,
        store: Store,
        *,
        tokens: Mapping[str, str] | None,
        busy: Busy,
        wait: float,
        show_secrets: bool,
        options: Mapping[str, Any],
        mcp_servers: Iterable[MCPServer] = (),
    ) -> None:
        self.definitions = dict(definitions)
        self.llm = llm
        self.hooks = hooks
        self.store = store
        self.tokens = dict(tokens or {})
        self.wait = 0.0 if busy == "reject" else wait
        self.show_secrets = show_secrets
        self.options = dict(options)
        self.mcp_servers = list(mcp_servers)

    def mcp_servers_down(self) -> list[str]:
        """The names of the MCP servers that are down, after trying to bring each back (within its
        backoff): readiness is then the next call of a server no turn calls, and a server taken out
        of rotation for it comes back without traffic. Blocks (a restart): run it in a thread."""
        return [server.name for server in self.mcp_servers if server.revive(block=False) is not None]

    def definition(self, name: str | None) -> FSMDefinition:
        if name is None:
            if len(self.definitions) == 1:
                return next(iter(self.definitions.values()))
            raise APIError(400, "invalid_request", f"name the definition: one of {', '.join(sorted(self.definitions))}")
        found = self.definitions.get(name)
        if found is None:
            raise not_found(f"no definition named {name!r} (served: {', '.join(sorted(self.definitions))})")
        return found

    def new(
        self, client: str, definition: FSMDefinition, state: str | None, context: dict[str, Any], key: str | None
    ) -> Stored:
        """A conversation under a fresh id (128 random bits), built when its first turn runs. With an
        idempotency ``key`` the id is the key's: a creation sent again finds the conversation it made."""
        if state is not None and state not in definition.states:
            known = ", ".join(definition.states)
            raise APIError(400, "invalid_request", f"definition {definition.name!r} has no state {state!r} ({known})")
        conversation_id = secrets.token_hex(16) if key is None else id_of(key)

        def make(snapshot: Snapshot | None) -> Conversation:
            if snapshot is not None and key is not None:  # made by this key before: its answer is in it
                return self.restored(conversation_id, snapshot)
            if snapshot is not None:  # 128 random bits do not collide; refuse rather than take another's
                raise APIError(409, "conversation_conflict", "this conversation id is taken")
            return Conversation(
                definition, self.llm, state, context, hooks=self.hooks, id=conversation_id, **self.options
            )

        return self.at(client, conversation_id, make)

    def stored(self, client: str, conversation_id: str) -> Stored:
        """The client's stored conversation, read when its turn holds the lock. 404 when there is none (or
        it is another client's: its existence is not revealed); 422 when its definition is not served or
        changed in structure since it began."""
        if not _is_id(conversation_id):
            raise not_found(f"no conversation {conversation_id!r}")

        def make(snapshot: Snapshot | None) -> Conversation:
            if snapshot is None:  # never stored, another client's, or deleted: never start one in its place
                raise not_found(f"no conversation {conversation_id!r}")
            return self.restored(conversation_id, snapshot)

        return self.at(client, conversation_id, make)

    def restored(self, conversation_id: str, snapshot: Snapshot) -> Conversation:
        """The stored conversation; 422 when its definition is not served or changed in structure."""
        definition = self.definitions.get(snapshot.definition_name)
        if definition is None:
            name = snapshot.definition_name
            raise APIError(
                422,
                "definition_error",
                f"conversation {conversation_id!r} runs definition {name!r}, which this server does not serve",
            )
        try:
            return Conversation.restore(
                snapshot, definition, self.llm, hooks=self.hooks, id=conversation_id, **self.options
            )
        except ConversationError as exc:  # its definition's structure changed since it began
            advice = "serve the version of the definition it began with, or delete the conversation"
            raise APIError(422, "definition_error", f"{_without_api_advice(str(exc))}: {advice}") from None

    def at(self, client: str, conversation_id: str, make: Callable[[Snapshot | None], Conversation]) -> Stored:
        """The client's conversation ``conversation_id``, built by ``make`` when its turn first reads it. It is
        stored under ``CLIENT@ID`` (:func:`~llm_fsm.store.clients.client_key`): another client's key for the
        same id is another key."""
        return Stored(
            conversation_id, StoredConversation(self.store, client_key(client, conversation_id), make, wait=self.wait)
        )

    async def loaded(self, client: str, conversation_id: str) -> Stored:
        """:meth:`stored`, read now (without the lock: to show it)."""
        item = self.stored(client, conversation_id)
        item.stored._take_up(await self.store.aload(item.stored.id))  # noqa: SLF001 (load() would block the loop)
        return item

    def mask(self, definition: FSMDefinition) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return (lambda context: context) if self.show_secrets else definition.masked


@dataclasses.dataclass
class Stored:
    id: str
    stored: StoredConversation

    @property
    def definition(self) -> FSMDefinition:
        """The conversation's definition (once it was read)."""
        return self.stored.conversation.definition


def _is_id(text: str) -> bool:
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def _without_api_advice(message: str) -> str:
    """A runtime message without its advice to Python callers (``pass allow_changed_definition=True``), which
    a client of the HTTP API cannot follow."""
    return re.sub(
        r" \((?:pass allow_changed_definition=True|refused because of strict_definition=True)[^)]*\)", "", message
    )


# -- sync hooks off the event loop -----------------------------------------------------------------


def off_the_loop(hooks: Hooks) -> Hooks:
    """A copy of ``hooks`` whose sync handlers and checks run in worker threads, awaited by the turn.

    ``error`` handlers stay as they are: the runtime calls them where the error happens, synchronously.
    """
    copy = hooks.copy()
    copy.handlers = [
        h if h.is_async or "error" in h.timings else dataclasses.replace(h, function=_in_thread(h.function))
        for h in hooks.handlers
    ]
    copy.checks = {name: f if is_async(f) else _in_thread(f) for name, f in hooks.checks.items()}
    return copy


def _in_thread(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)  # keeps the signature: the runtime passes only the arguments it declares
    def in_thread(**arguments: Any) -> Any:
        return asyncio.to_thread(function, **arguments)

    return in_thread
