"""What a chat keeps in the store and changes there (the base of :class:`llm_fsm.cli.chat.ChatSession`).

The stored conversation a chat talks on, each turn run as a stored one; the snapshots ``/back`` returns to;
and the meta commands that read or replace the stored conversation: ``/history``, ``/save``, ``/load``,
``/back``. The turns themselves, the approvals and the other commands are :mod:`llm_fsm.cli.chat`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import llm_fsm
from llm_fsm.cli.chat_views import Mask, console, error, one_line, show_history
from llm_fsm.cli.conversation_factory import ConversationFactory
from llm_fsm.cli.shown import as_text
from llm_fsm.errors import ConversationError, FSMError

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.conversation import Conversation
    from llm_fsm.snapshot import Snapshot
    from llm_fsm.store.stored import StoredConversation
    from llm_fsm.turn.runner import TurnResult

T = TypeVar("T")

HISTORY_PAGE = 20  # exchanges /history shows at a time
NOT_SHOWN = -1  # StoredChat.older before any page of the history was shown


def exchanges(count: int) -> str:
    """``count`` exchanges (a history counts exchanges, each a reply and the message it answers, if any)."""
    return f"{count} exchange{'' if count == 1 else 's'}"


class StoredChat:
    """A chat's stored conversation, the snapshots /back returns to, and the last turn's result."""

    def __init__(
        self,
        tracked: StoredConversation,
        make: ConversationFactory,
        mask: Mask = lambda context: context,
        show_secrets: bool = False,
    ) -> None:
        self.tracked = tracked
        self.make = make
        self.mask = mask
        self.show_secrets = show_secrets  # for the sub-definitions' own masks
        self.undo: list[llm_fsm.Snapshot] = []
        self.last: TurnResult | None = None
        # where "/history older" goes on: the first exchange the last page shown starts at (None: that page
        # began the history; NOT_SHOWN: no page shown yet, so the page before the one /history shows)
        self.older: int | None = NOT_SHOWN

    @property
    def conversation(self) -> Conversation:
        return self.tracked.conversation

    def run(self, action: Callable[[Conversation], T]) -> T:
        """``action`` as a stored turn; once it is saved, /back can return to the snapshot it ran on. That is
        the newest stored version, which may hold turns another process saved since this chat last looked:
        then the older undo snapshots come from before those turns, and are dropped (going back to one would
        drop them)."""
        seen = self.tracked.version
        ran_on: list[Snapshot] = []
        took_up: list[bool] = []

        def recorded(conversation: Conversation) -> T:
            # run under the lock on the newest version: a version other than the one this chat saw means
            # another process saved since (the turn's own checkpoints come after this)
            ran_on.append(conversation.snapshot())
            took_up.append(self.tracked.version != seen)
            return action(conversation)

        result = self.tracked.run(recorded)
        if any(took_up):
            self.undo.clear()
        self.undo.extend(ran_on[:1])
        return result

    def replace(self, command: str, conversation: Conversation) -> bool:
        """Save ``conversation`` over the stored one for ``command`` (/back, /load, /reset); False, and nothing
        changed, when it cannot be: someone else saved the conversation since this chat last saw it."""
        from llm_fsm.errors import ConflictError

        try:
            self.tracked.replace(conversation)
        except ConflictError as exc:
            record = self.tracked.store.load(self.tracked.id)
            if record is None or record.version == self.tracked.version:
                error(one_line(exc))  # its lock is held by a turn running elsewhere
                return False
            error(
                f"the conversation changed elsewhere since this chat last saw it (another process saved it): "
                f"{command} would drop what it saved, so nothing changed. /history shows it; your next message "
                f"continues from it"
            )
            return False
        except FSMError as exc:  # e.g. a file holding only the tail of another conversation's history
            error(one_line(exc))
            return False
        self.older = NOT_SHOWN  # another history: "/history older" starts from its last page
        return True

    # -- meta commands that read or replace the stored conversation ----------------------------

    def history(self, argument: str) -> None:
        """A page of the stored history (the last ``HISTORY_PAGE`` exchanges); ``older``: the page before."""
        if argument not in ("", "older"):
            error(f"/history takes 'older' or nothing (usage: /history [older]), not {argument!r}")
            return
        before = None
        if argument == "older":
            if self.older == NOT_SHOWN:  # no page shown yet: the one before the last page, the one /history shows
                last = self.tracked.history(limit=HISTORY_PAGE)
                self.older = last.before if last is not None else None
            if not self.older:
                console.print("No earlier exchanges: /history shows the last ones.")
                return
            before = self.older
        page = self.tracked.history(before=before, limit=HISTORY_PAGE)
        if page is None:  # nothing stored yet (the opening failed): what this chat holds
            snapshot = self.conversation.snapshot()
            exchanges = [(snapshot.history_start + i, e) for i, e in enumerate(snapshot.history)]
            show_history(exchanges[-HISTORY_PAGE:], snapshot.history_len)
            return
        self.older = page.before
        show_history(page.exchanges, page.total)

    def save(self, path: str) -> None:
        from llm_fsm.jsonfiles import write_private

        try:  # the file holds everything the user said, the whole history: readable by them only
            write_private(path, self.tracked.whole().model_dump_json(indent=2))
        except OSError as exc:
            error(f"cannot write {path}: {exc.strerror or exc}")
            return
        console.print(as_text(f"saved to {path}"))

    def load(self, path: str) -> None:
        try:
            restored = self.make.build(read_snapshot(path))
        except FSMError as exc:
            error(one_line(exc))
            return
        # the whole snapshot to go back to: the file's conversation replaces the stored rows, so the tail this
        # chat holds could not be saved back over them (see llm_fsm.store.history.check_same)
        try:
            current = self.tracked.whole()
        except FSMError as exc:
            error(one_line(exc))
            return
        if not self.replace("/load", restored):
            return
        self.undo.append(current)
        where = f"state {self.conversation.state}, {exchanges(self.conversation.snapshot().history_len)}"
        console.print(as_text(f"loaded {path}: {where}"))

    def back(self, _: str) -> None:
        if not self.undo:
            console.print("Nothing to undo.")
            return
        target, used = self.undo[-1], set(self.conversation.snapshot().used_tokens)
        pending = target.pending
        if pending is not None and pending.kind == "tool_approval" and pending.token in used:
            tool = pending.payload.get("tool", "?")
            error(f"/back cannot undo the call to '{tool}': it was approved and ran (going back could run it twice)")
            return
        if not self.replace("/back", self.make(target)):
            return
        self.undo.pop()
        console.print(as_text(f"Undone: back in state {self.conversation.state}."))


def read_snapshot(path: str) -> Snapshot:
    """The conversation a ``/save`` wrote to ``path``; ConversationError saying, in one line, what the file
    is and why it cannot be loaded."""
    from pydantic import ValidationError

    from llm_fsm.jsonfiles import JSONFileError, not_a, other_kind, read_json, validation_summary
    from llm_fsm.snapshot import Snapshot

    try:
        document = read_json(path, "saved conversation")
        if not isinstance(document, dict) or other_kind(document, "saved conversation"):
            wrong = not_a(path, document, "saved conversation", "it is not a JSON object")
            raise JSONFileError(f"{wrong} (/load takes a file written by /save)")
        return Snapshot.model_validate(document)
    except JSONFileError as exc:
        raise ConversationError(str(exc)) from None
    except ValidationError as exc:
        raise ConversationError(f"{path} is not a saved conversation: {validation_summary(exc)}") from None
