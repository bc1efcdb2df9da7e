"""A conversation kept in a store: each turn runs under its lock, on the newest version, and is saved.

This is the one place a stored turn is written: lock, load, take up a newer version saved by
someone else, run the turn, save with a version check. :func:`advance` (one call per turn, for
servers) and the terminal commands' ``--conversation`` both go through :class:`StoredConversation`,
so two turns of one conversation never interleave and no turn is lost. A turn that fails saves nothing
but its checkpoints: a checkpoint (a tool call a person approved is about to run, or ran) is saved, with the
version check, the moment the turn makes it and before the turn goes on, so a process that dies at any point
leaves a retry what it needs to run that call at most once.
A turn run with an idempotency key keeps its result in the snapshot it saves, so the same request sent
again, from any process, gets that result and runs nothing (:mod:`llm_fsm.store.idempotency`). A keyed run of
a workflow saved part-way (each step is saved before the next begins) says so in each step it saves: the request
sent again goes on with the run from the stored step, rather than take the run's first step (its message) again.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from llm_fsm import running
from llm_fsm.conversation import Conversation
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.llm import LLMClient
from llm_fsm.recorded import checked_message
from llm_fsm.snapshot import KeyedResult, Snapshot
from llm_fsm.store import idempotency
from llm_fsm.store.base import DEFAULT_WAIT, Record, Store
from llm_fsm.store.history import Page, bounded, whole
from llm_fsm.subflows import stack
from llm_fsm.turn.runner import TurnResult
from llm_fsm.values import derived_uid

T = TypeVar("T")
Make = Callable[[Snapshot | None], Conversation]  # None: a new conversation; else one restored from it


class StoredConversation:
    """The conversation stored under ``conversation_id``, built by ``make`` when it is first used."""

    def __init__(self, store: Store, conversation_id: str, make: Make, *, wait: float = DEFAULT_WAIT) -> None:
        _check_make(make)
        self.store = store
        self.id = conversation_id
        self.make = make
        self.wait = wait
        self.version = 0  # of the stored snapshot the conversation continues; 0: nothing stored yet
        self.replayed = False  # whether the last run returned a kept answer (an idempotency key sent again)
        self._conversation: Conversation | None = None
        self._keyed: tuple[str, str | None] | None = None  # the key and fingerprint of the run under the lock

    @property
    def conversation(self) -> Conversation:
        """The conversation as this object last saw it (loaded on first use)."""
        if self._conversation is None:
            self.load()
        assert self._conversation is not None
        return self._conversation

    @property
    def is_new(self) -> bool:
        """Whether nothing was stored under the id when the conversation was last loaded or saved."""
        return self.version == 0

    def load(self) -> Conversation:
        """Read the stored conversation without the lock (to show it before a turn); a new one if none is stored."""
        self._take_up(self.store.load(self.id))
        return self.conversation

    def run(
        self, action: Callable[[Conversation], T], *, idempotency_key: str | None = None, fingerprint: str | None = None
    ) -> T:
        """``action`` on the newest stored version, under the conversation's lock, then a version-checked save.

        ``idempotency_key``: a request sent again with the key of one whose turn was saved returns that
        turn's result (a :class:`TurnResult`, or None) and runs nothing; :class:`IdempotencyKeyReused` when
        its ``fingerprint`` (see :func:`~llm_fsm.store.idempotency.fingerprint`; None: not compared)
        differs from the first one's. ``replayed`` says whether it did. With a key, ``action`` returns a
        :class:`TurnResult` or None. The key of a run saved part-way (killed between two of its steps) goes on
        with the run instead of ``action`` (``replayed`` too), and returns its last step's result, whose
        ``steps`` are those taken now.
        """
        with self.store.lock(self.id, timeout=self.wait):
            # loaded again under the lock: another process may have saved a turn since this object last looked
            self._catch_up(self.store.load(self.id), idempotency_key)
            # the kept answers of the newest version, read under the lock: two retries of one request
            # cannot both run the turn
            kept = self._answered(idempotency_key, fingerprint)
            if kept is not None and not kept.begun:
                return cast(T, idempotency.replayed(kept))
            step = action if kept is None else cast(Callable[[Conversation], T], _going_on)
            with self._holding(idempotency_key, fingerprint):  # the turn's checkpoints are saved as they come
                result = step(self.conversation)
            self._remember(idempotency_key, fingerprint, result)
            # version-checked even under the lock: a turn that lost its lock (its lease ran out) fails here
            # rather than overwrite the turn that took it over
            self.version = self.store.save(self.id, self.conversation.snapshot(), expected_version=self.version)
            self._carry_tail()
        return result

    async def arun(
        self,
        action: Callable[[Conversation], Awaitable[T]],
        *,
        idempotency_key: str | None = None,
        fingerprint: str | None = None,
    ) -> T:
        """The async form of :meth:`run`: ``action`` returns an awaitable (``lambda c: c.asend(text)``)."""
        async with self.store.alock(self.id, timeout=self.wait):
            self._catch_up(await self.store.aload(self.id), idempotency_key)
            kept = self._answered(idempotency_key, fingerprint)
            if kept is not None and not kept.begun:
                return cast(T, idempotency.replayed(kept))
            step = action if kept is None else cast(Callable[[Conversation], Awaitable[T]], _agoing_on)
            with self._holding(idempotency_key, fingerprint):
                result = await step(self.conversation)
            self._remember(idempotency_key, fingerprint, result)
            self.version = await self.store.asave(self.id, self.conversation.snapshot(), expected_version=self.version)
            self._carry_tail()
        return result

    def record(self, message: str, *, replace: bool = False, idempotency_key: str | None = None) -> None:
        """:meth:`Conversation.record` on the newest stored version, under the lock, then saved (as :meth:`run`):
        ``message``, written elsewhere, recorded as the assistant's turn. Nothing stored yet under the id: a new
        conversation, with ``message`` as its opening. ``idempotency_key``: the same record sent again (after a
        lost answer) records nothing more; the key with another message or ``replace`` is
        :class:`IdempotencyKeyReused`."""
        self.run(lambda c: c.record(message, replace=replace), **_recording(message, replace, idempotency_key))

    async def arecord(self, message: str, *, replace: bool = False, idempotency_key: str | None = None) -> None:
        """The async form of :meth:`record`: the lock is waited for without a thread."""

        async def action(conversation: Conversation) -> None:
            conversation.record(message, replace=replace)

        await self.arun(action, **_recording(message, replace, idempotency_key))

    def _carry_tail(self) -> None:
        """Once saved, the conversation keeps only the history's tail a turn needs, as a load gives it: the
        rest is in the store (:meth:`history`), so a long-lived conversation does not grow in memory."""
        conversation = self.conversation
        conversation._snapshot = bounded(conversation.snapshot(), self.store.tail)

    def history(self, *, before: int | None = None, limit: int = 50) -> Page | None:
        """A page of the stored history (see :meth:`Store.history`): exchanges with their index, oldest first,
        and the cursor of the page before; None when nothing is stored yet."""
        return self.store.history(self.id, before=before, limit=limit)

    async def ahistory(self, *, before: int | None = None, limit: int = 50) -> Page | None:
        return await self.store.ahistory(self.id, before=before, limit=limit)

    def whole(self) -> Snapshot:
        """The conversation's snapshot with its whole history (the stored exchanges before the tail it
        carries, read page by page): for a file that must hold everything, such as chat's ``/save``."""
        return whole(self.store, self.id, self.conversation.snapshot())

    @contextmanager
    def _holding(self, key: str | None = None, fingerprint: str | None = None) -> Iterator[None]:
        """While the lock is held: the conversation's checkpoints are saved here (never without the lock), those
        between two steps of a run with ``key`` saying that its run began."""
        self.conversation.checkpoints = self
        self._keyed = None if key is None else (key, fingerprint)
        try:
            yield
        finally:
            self.conversation.checkpoints = None
            self._keyed = None

    def hold(self, snapshot: Snapshot) -> None:
        """Save a checkpoint of the turn running under the lock, before the turn goes on."""
        # its version is the one the turn's final save (or its next checkpoint) must then match
        self.version = self.store.save(self.id, self._marked(snapshot), expected_version=self.version)

    async def ahold(self, snapshot: Snapshot) -> None:
        self.version = await self.store.asave(self.id, self._marked(snapshot), expected_version=self.version)

    def _marked(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` as a checkpoint saves it: between two steps of a keyed run, saying that the run began."""
        # a checkpoint inside a turn (an approved tool call's) comes while the turn is busy: the request sent
        # again redoes that turn, which finds the call's record; one between two steps of a run comes between turns
        if self._keyed is None or self.conversation._busy:
            return snapshot
        return idempotency.begun(snapshot, *self._keyed)

    def replace(self, conversation: Conversation) -> None:
        """Go on with ``conversation`` (after an undo, a reset, a file loaded), saved over the stored one:
        only over the version this object last saw. :class:`ConflictError`, and nothing changed, when
        someone else saved since: what they saved is not what the replacement was chosen over (an undo to
        this object's last snapshot would drop their turns)."""
        if conversation.id is None:
            conversation.id = self.id
        with self.store.lock(self.id, timeout=self.wait):
            # the version check does it all: a turn saved by another process since fails the save
            self.version = self.store.save(self.id, conversation.snapshot(), expected_version=self.version)
            self._conversation = conversation
            self._carry_tail()

    def _answered(self, key: str | None, fingerprint: str | None) -> KeyedResult | None:
        """The kept answer to ``key`` in the newest version (read under the lock), if any."""
        self.replayed = False
        if key is None:
            return None
        kept = idempotency.answered(self.conversation.snapshot(), idempotency.check_key(key), fingerprint)
        self.replayed = kept is not None
        return kept

    def _remember(self, key: str | None, fingerprint: str | None, result: object) -> None:
        """Keep the answer to ``key`` in the snapshot about to be saved: the key is saved with its turn or not
        at all. The conversation holds that snapshot, so that its next save keeps the key too."""
        if key is not None:
            conversation = self.conversation
            conversation._snapshot = idempotency.remembered(conversation.snapshot(), key, fingerprint, result)

    def _catch_up(self, record: Record | None, key: str | None = None) -> None:
        if self._conversation is None or (record is not None and record.version != self.version):
            self._take_up(record)  # first use, or another process took a turn since
        if record is None and key is not None:
            self._derive_uid(key)

    def _derive_uid(self, key: str) -> None:
        """A conversation a keyed request creates gets a uid that the store id and the key determine, not a
        random one: the tool calls of its first turn then have the same idempotency keys in every retry of
        that request, in any process (a retry finds nothing stored and makes the conversation again)."""
        conversation = self.conversation
        snapshot = conversation.snapshot()
        if snapshot.turns or snapshot.history_len or snapshot.pending is not None:
            return  # it has begun (in this object, unsaved): its uid stays
        uid = derived_uid("stored-conversation", self.id, key)
        fresh = snapshot.model_copy(update={"uid": uid, "stack": ()})  # its frames' uids derive from the root's
        conversation._snapshot = stack.entered(conversation.definition, fresh) if snapshot.stack else fresh

    def _take_up(self, record: Record | None) -> None:
        conversation = self.make(None if record is None else record.snapshot)
        if conversation.id is None:  # its traces name it by its store id
            conversation.id = self.id
        # the tail a save carries covers what this conversation's prompt shows (a window wider than the
        # store's default would otherwise come back narrower from a load); a store only ever carries more
        self.store.tail = max(self.store.tail, shown_at_most(conversation))
        self._conversation = conversation
        self.version = record.version if record is not None else 0


def _going_on(conversation: Conversation) -> TurnResult | None:
    """The rest of a run saved part-way: its last step's result (None: no step was left)."""
    results = list(conversation.run())
    return running.last(results) if results else None


async def _agoing_on(conversation: Conversation) -> TurnResult | None:
    results = [result async for result in conversation.arun()]
    return running.last(results) if results else None


def shown_at_most(conversation: Conversation) -> int:
    """The most exchanges a prompt of ``conversation`` shows: its history window, and with running summaries
    up to ``batch`` more waiting to be folded (see :func:`llm_fsm.memory.summaries.visible`)."""
    from llm_fsm.memory import summaries

    window = max(conversation.settings.prompt.settings.history_window, 0)
    definition = conversation.definition
    return window + (summaries.spec(definition).batch if any(summaries.enabled(definition)) else 0)


def advance(
    store: Store,
    conversation_id: str,
    definition: FSMDefinition,
    llm: LLMClient,
    text: str | None,
    *,
    wait: float = DEFAULT_WAIT,
    action: Callable[[Conversation], TurnResult] | None = None,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
    **options: Any,
) -> TurnResult:
    """One turn of a stored conversation: lock, load or create, send ``text`` (None: start), save.

    ``action`` replaces the default turn (e.g. ``lambda c: c.resume(token, result)``). ``options``
    go to the conversation (``hooks=``, ``max_corrections=``...) and, for a stored one, to
    :meth:`Conversation.restore` (``allow_changed_definition=``, ``strict_definition=``). A turn that
    fails saves nothing. :class:`ConflictError` if the conversation stays locked for ``wait`` seconds.

    ``idempotency_key``: sent again, the key of a turn that was saved returns that turn's result and runs
    nothing (see :meth:`StoredConversation.run`); the ``fingerprint`` compared is ``text``'s unless given
    (with ``action``, give one: ``fingerprint("resume", [token, result])``).
    """
    stored = StoredConversation(store, conversation_id, _maker(definition, llm, options), wait=wait)
    key = {"idempotency_key": idempotency_key, "fingerprint": _fingerprint(text, action, fingerprint)}
    turn: Callable[[Conversation], TurnResult] = action or (lambda c: c.start() if text is None else c.send(text))
    return stored.run(turn, **key)


async def aadvance(
    store: Store, conversation_id: str, definition: FSMDefinition, llm: LLMClient, text: str | None, *,
    wait: float = DEFAULT_WAIT, action: Callable[[Conversation], Awaitable[TurnResult]] | None = None,
    idempotency_key: str | None = None, fingerprint: str | None = None, **options: Any,
) -> TurnResult:  # fmt: skip
    """The async form of :func:`advance` (``action``, if given, returns an awaitable: ``lambda c: c.aresume(...)``).

    Waiting for the lock takes no thread: many tasks on one conversation take their turns one after another.
    """
    stored = StoredConversation(store, conversation_id, _maker(definition, llm, options), wait=wait)
    key = {"idempotency_key": idempotency_key, "fingerprint": _fingerprint(text, action, fingerprint)}
    return await stored.arun(action or (lambda c: c.astart() if text is None else c.asend(text)), **key)


def _recording(message: object, replace: object, key: str | None) -> dict[str, str | None]:
    """The idempotency arguments of a record, once its arguments are checked (before the lock is taken)."""
    checked_message(message, replace)
    asked = None if key is None else idempotency.fingerprint("record", {"message": message, "replace": replace})
    return {"idempotency_key": key, "fingerprint": asked}


def _fingerprint(text: str | None, action: object, given: str | None) -> str | None:
    """What a turn of :func:`advance` asks: ``given``, else ``text`` when no ``action`` replaces the turn."""
    if given is not None or action is not None:
        return given
    return idempotency.fingerprint("start") if text is None else idempotency.fingerprint("send", text)


_MAKE = (
    "make must be a function of one argument: called with None for a new conversation, or with the "
    "Snapshot to restore, it returns the Conversation (e.g. Conversation(definition, llm) or "
    "Conversation.restore(snapshot, definition, llm))"
)


def _check_make(make: object) -> None:
    """A clear TypeError now, rather than one from inside the first turn, for a ``make`` that cannot be called
    with the snapshot (a callable whose signature Python cannot read is taken on trust)."""
    if not callable(make):
        raise TypeError(f"StoredConversation: {_MAKE}; got {type(make).__name__} {make!r:.60}")
    try:
        signature = inspect.signature(make)
    except (TypeError, ValueError):  # a builtin or an extension's callable: nothing to read
        return
    try:
        signature.bind(None)
    except TypeError:
        name = getattr(make, "__qualname__", type(make).__name__)
        raise TypeError(f"StoredConversation: {_MAKE}; {name}{signature} cannot take it") from None


_RESTORE_ONLY = ("allow_changed_definition", "strict_definition")


def _maker(definition: FSMDefinition, llm: LLMClient, options: dict[str, Any]) -> Make:
    """New or restored conversations; the options of :meth:`Conversation.restore` go to restores only."""
    new = {k: v for k, v in options.items() if k not in _RESTORE_ONLY}

    def make(snapshot: Snapshot | None) -> Conversation:
        if snapshot is None:
            return Conversation(definition, llm, **new)
        return Conversation.restore(snapshot, definition, llm, **options)

    return make
