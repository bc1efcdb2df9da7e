"""The conversation a command works on: made new or restored from its options, and opened where it is kept.

:class:`ConversationFactory` makes it (refusing, in one line that says what would allow it, to continue a
stored conversation whose definition changed); :func:`open_conversation` loads it from the store of
``--store``/``--conversation``/``--wait``, or from a memory store for one run. Each exits with a one-line error
when what was given cannot be used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

import llm_fsm
from llm_fsm.cli.main import complain, fail
from llm_fsm.cli.shown import shown
from llm_fsm.errors import ConversationError, DefinitionError, FSMError, StoreError
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LLMClient

if TYPE_CHECKING:
    # The modules that build pydantic models or import Jinja load inside the commands that use them:
    # "llm-fsm --help" and the authoring commands never pay for what they do not run.
    from llm_fsm.conversation import Conversation
    from llm_fsm.snapshot import Snapshot
    from llm_fsm.store.base import Store
    from llm_fsm.store.stored import StoredConversation

UNSTORED_ID = "terminal"  # the id of a conversation kept only while the command runs


def check_definition_policy(allow_changed_definition: bool, strict_definition: bool) -> None:
    """A usage error (exit 2) when both options are given: one refuses every change, the other allows any."""
    if allow_changed_definition and strict_definition:
        fail(
            "--strict-definition (refuse any change to the definition) and --allow-changed-definition (continue "
            "whatever changed) contradict each other: give one of them",
            2,
        )


@dataclass
class ConversationFactory:
    """Makes new (``None``) or restored conversations for a command, with its options."""

    fsm: llm_fsm.FSMDefinition
    llm: LLMClient
    hooks: Hooks
    state: str | None = None
    context: dict[str, Any] | None = None
    allow_changed_definition: bool = False
    strict_definition: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # more Conversation options

    def build(self, snapshot: Snapshot | None) -> Conversation:
        """The conversation; FSMError when the definition names unregistered handlers or checks, the
        initial context is not JSON data, or a stored conversation ran on a definition whose structure
        changed since (any change, with ``strict_definition``), unless ``allow_changed_definition``."""
        from llm_fsm.conversation import Conversation

        if snapshot is None:
            return Conversation(self.fsm, self.llm, self.state, self.context, hooks=self.hooks, **self.options)
        if not self.allow_changed_definition:
            refusal = self._refusal(snapshot)
            if refusal:
                raise ConversationError(refusal)
        return Conversation.restore(
            snapshot, self.fsm, self.llm, hooks=self.hooks, allow_changed_definition=True, **self.options,
        )  # fmt: skip

    def _refusal(self, snapshot: Snapshot) -> str | None:
        """Why ``snapshot`` may not continue on this definition, with what would let it; None if it may."""
        saved = (snapshot.definition_hash, snapshot.definition_outline)
        name = snapshot.definition_name
        changes = self.fsm.blocking_changes(*saved, strict=self.strict_definition, name=name)
        if not changes:
            return self._subflow_refusal(snapshot)
        if name != self.fsm.name:
            return (
                f"this conversation was saved with another definition ('{name}'), not '{self.fsm.name}' "
                f"(run it with that definition, or with --allow-changed-definition to continue it on this one)"
            )
        if not self.strict_definition:
            why = "run with --allow-changed-definition to continue it anyway"
        elif self.fsm.blocking_changes(*saved, name=name):
            why = "refused because of --strict-definition"
        else:  # only prose changed: that alone would not have stopped it
            why = "refused because of --strict-definition, which refuses an edit to prose too"
        changed = "; ".join(changes)
        return f"the definition '{self.fsm.name}' changed since this conversation was saved: {changed} ({why})"

    def _subflow_refusal(self, snapshot: Snapshot) -> str | None:
        """Why ``snapshot``'s sub-conversations may not continue on the sub-definitions now on disk."""
        from llm_fsm.subflows import changed_subflows

        changed = changed_subflows(self.fsm, snapshot, strict=self.strict_definition) if snapshot.stack else []
        if not changed:
            return None
        name, changes = changed[0]
        why = "refused because of --strict-definition"
        if not self.strict_definition:
            why = "run with --allow-changed-definition to continue it anyway"
        changed_text = "; ".join(changes)
        return f"the subflow definition '{name}' changed since this conversation was saved: {changed_text} ({why})"

    def __call__(self, snapshot: Snapshot | None) -> Conversation:
        """:meth:`build`, exiting 2 with each problem on a line of its own when it fails."""
        try:
            return self.build(snapshot)
        except DefinitionError as exc:
            for problem in exc.problems:
                complain(str(problem))
        except FSMError as exc:
            complain(str(exc))
        raise typer.Exit(2)


def open_conversation(
    make: Callable[[Snapshot | None], Conversation], store_url: str | None, conversation_id: str | None, wait: float
) -> StoredConversation:
    """The conversation a command works on, loaded (exit 2 if it cannot be)."""
    from llm_fsm.store.stored import StoredConversation

    try:
        store, conversation_id = _where_kept(store_url, conversation_id)
        stored = StoredConversation(store, conversation_id, make, wait=wait)
        stored.load()
    except (StoreError, ConversationError) as exc:
        fail(str(exc), 2)
    return stored


def _where_kept(store_url: str | None, conversation_id: str | None) -> tuple[Store, str]:
    """Where the conversation is kept: the store and id named, else a memory store for as long as the command runs."""
    from llm_fsm.store import open_store
    from llm_fsm.store.base import public_url

    if store_url is None and conversation_id is None:  # kept for this run only, but its turns run the same way
        return open_store("memory:"), UNSTORED_ID
    store = open_store(store_url)
    if conversation_id is not None:
        found = stored_id(store, conversation_id)
        if store.load(found) is None:  # said, since a mistyped id would otherwise start a conversation silently
            where = shown(public_url(store.url))
            typer.echo(f"note: no conversation {shown(found)} in {where}: a new one starts under that id", err=True)
        return store, found
    conversation_id = uuid.uuid4().hex[:12]
    typer.echo(f"conversation: {conversation_id} (continue it with --conversation {conversation_id})", err=True)
    return store, conversation_id


def stored_id(store: Store, name: str) -> str:
    """The stored id the conversation id a user gave means: ``llm-fsm serve``'s bare id finds the one client's
    ``CLIENT@ID`` that has it, with a note on stderr saying whose it is (see :func:`llm_fsm.store.clients.resolve`);
    exit 2 when several clients have one by that id."""
    from llm_fsm.store.clients import AmbiguousIdError, client_of, resolve

    try:
        found = resolve(store, name)
    except AmbiguousIdError as exc:
        fail(str(exc), 2)
    if found != name:
        whose = f"the conversation of client '{client_of(found)}' of llm-fsm serve"
        typer.echo(f"note: {name} is {whose}: {found}", err=True)
    return found


def masker(definition: llm_fsm.FSMDefinition, show_secrets: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How displays show a context: secret-looking values masked, unless --show-secrets."""
    return (lambda context: context) if show_secrets else definition.masked
