"""``llm-fsm chat``: talk to a definition in the terminal, with the reply streaming in.

The message streams only once its transition has been checked (see ``llm_fsm.streaming``), so a
reply the runtime refuses is never displayed. Meta commands start with ``/``. Ctrl-D or Ctrl-C at
the prompt leave with exit code 0; Ctrl-C during a reply cancels that turn and changes nothing.
litellm is imported in a background thread: at launch when the opening needs the model, else once the
first prompt is up (a state's own opening needs no model, so the prompt comes at once).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console  # noqa: F401 (the tests make chat.console a Console of their own)
from rich.markup import escape
from rich.text import Text

import llm_fsm
from llm_fsm.cli.chat_views import (
    COMMANDS,
    Mask,
    already_decided,
    console,
    error,
    errors,
    one_line,
    rendered,
    show_context,
    show_end,
    show_help,
    show_history,
    show_pending,
    show_state,
    show_stream,
    show_why,
    status_line,
)
from llm_fsm.cli.conversation_factory import (
    ConversationFactory,
    check_definition_policy,
    masker,
    open_conversation,
)
from llm_fsm.cli.main import app, fail
from llm_fsm.cli.options import (
    AllowChangedDefinitionOption,
    ConversationOption,
    DefinitionArgument,
    HooksOption,
    MCPOption,
    ModelOptions,
    RecordOption,
    ShowSecretsOption,
    StoreOption,
    StrictDefinitionOption,
    WaitOption,
    complete_states,
    connect_mcp,
    load_definition,
    load_hooks,
    with_model_options,
)
from llm_fsm.errors import ConversationError, FSMError, OpeningError
from llm_fsm.llm import LiteLLMClient, LLMClient
from llm_fsm.values import blank

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.conversation import Conversation
    from llm_fsm.engine import Snapshot
    from llm_fsm.store.stored import StoredConversation
    from llm_fsm.turn import TurnResult

__all__ = ["COMMANDS", "ChatSession", "chat", "readline_prompt", "status_line"]  # status_line: the tests' import

_ESCAPE = re.compile(r"(\x1b\[[0-9;]*m)")
HISTORY_PAGE = 20  # exchanges /history shows at a time
NOT_SHOWN = -1  # ChatSession.older before any page of the history was shown


def readline_prompt(markup: str) -> str:
    """The prompt rendered to ANSI, escape codes wrapped in \\x01..\\x02 so readline can redraw it."""
    with console.capture() as capture:
        console.print(markup, end="")
    return _ESCAPE.sub("\x01\\1\x02", capture.get())


def exchanges(count: int) -> str:
    """``count`` exchanges (a history counts exchanges, each a reply and the message it answers, if any)."""
    return f"{count} exchange{'' if count == 1 else 's'}"


class ChatSession:
    """One chat: the conversation, the snapshots that /back returns to, and the last turn's result."""

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

    # -- turns ----------------------------------------------------------------------------------

    def begin(self) -> None:
        """The opening of a new conversation; for one continued, where it stands and why it is paused."""
        if self.conversation.status == "new":
            self.opening()
            return
        current = self.conversation
        console.print(
            f"Continuing conversation {self.tracked.id}: state {current.state}, "
            f"{exchanges(current.snapshot().history_len)}."
        )
        if current.history:
            console.print(rendered(current.history[-1].assistant))
        if current.pending is not None:
            show_pending(current.pending, self.mask)
            self.approve(current.pending)
        if current.ended:
            show_end()

    def opens_with_model(self) -> bool:
        """Whether :meth:`begin` makes a model call: a new conversation whose opening the definition does
        not write (a conversation continued shows where it stands, with no call)."""
        from llm_fsm.subflows.stack import innermost

        current = self.conversation
        # the state it opens in: the innermost sub-conversation's, when its initial state runs one
        talking, where = innermost(current.definition, current.snapshot())
        return current.status == "new" and talking.states[where.state].opening is None

    def opening(self) -> None:
        """The opening message; when its model call fails, the next message the user types tries it again
        first (an opening the state writes that cannot be written ends the chat: see :meth:`turn`)."""
        if self.turn(None) is None:
            errors.print("[dim](no opening yet: it is tried again when you type your next message)[/]")

    def say(self, text: str) -> None:
        """A message from the user: the opening first if it has not been made (it failed), then the turn."""
        if self.conversation.ended:
            error("the conversation has ended: /back undoes its last turn, /reset starts over, /quit leaves")
            return
        if self.conversation.status == "new":
            console.print("[dim](the opening message first)[/]")
            self.opening()
            if self.conversation.status == "new":
                return
        self.turn(text)

    def turn(self, text: str | None) -> TurnResult | None:
        """Run one turn, streaming its message; None if it failed or was cancelled (nothing changed)."""
        pending = self.conversation.pending
        if pending is not None and pending.kind == "tool_approval" and text is not None:
            if self.decide(pending, text) is not None:  # y or n typed after the question
                return self.last
            errors.print('Waiting for approval: type y or n (or /resume {"approved": true}).')
            return None
        if self.conversation.paused:
            errors.print("The conversation is paused: type [bold]/resume JSON[/] to continue it.")
            return None
        try:
            result = self.run(lambda conversation: show_stream(conversation.stream(text), self.mask))
        except KeyboardInterrupt:
            errors.print("[yellow](turn cancelled: nothing changed)[/]")
            return None
        except FSMError as exc:  # the model failed, or the conversation cannot take this turn
            if text is None and isinstance(exc, OpeningError):
                # the state's own opening could not be written over the context: every try fails the same
                # way (the chat cannot change the context), so it says so once and leaves, not retry it
                fail(one_line(exc), 1)
            error(one_line(exc))
            return None
        self.show_result(result)
        self.approve(result.pending)
        return result

    def run(self, action: Callable[[Conversation], TurnResult]) -> TurnResult:
        """``action`` as a stored turn; once it is saved, /back can return to the snapshot it ran on. That is
        the newest stored version, which may hold turns another process saved since this chat last looked:
        then the older undo snapshots come from before those turns, and are dropped (going back to one would
        drop them)."""
        seen = self.tracked.version
        ran_on: list[Snapshot] = []
        took_up: list[bool] = []

        def recorded(conversation: Conversation) -> TurnResult:
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

    def approve(self, pending: llm_fsm.PendingEvent | None) -> None:
        """A tool call waiting for approval: ask y/n here (nothing typed: it stays paused for /resume). One
        already approved, whose process stopped while it ran or before its turn ended, is not asked again:
        the decision was saved (a "no" now could not undo a call that may have run), so it goes on."""
        if pending is None or pending.kind != "tool_approval":
            return
        if already_decided(pending):
            console.print("[dim](this call was approved before the last session stopped: continuing it)[/]")
            self.resume('{"approved": true}')
            return
        answer = _read("approve? [y/n] ")
        if answer is not None and answer.strip().startswith("/"):
            self.command(answer.strip())  # a command instead of an answer: run it; the question stays
        elif answer is None or self.decide(pending, answer) is None:
            console.print("[dim]Still waiting for approval: type y or n.[/]")

    def decide(self, pending: llm_fsm.PendingEvent, answer: str) -> bool | None:
        """Resume ``pending`` as ``answer`` (y/yes or n/no) says; None for any other answer."""
        word = answer.strip().lower()
        if word in ("y", "yes"):
            self.resume('{"approved": true}')
            return True
        if word in ("n", "no"):
            reason = (_read("why not? (optional) ") or "").strip()
            self.resume(json.dumps({"approved": False, "reason": reason} if reason else {"approved": False}))
            return False
        return None

    @property
    def conversation(self) -> Conversation:
        return self.tracked.conversation

    def show_result(self, result: TurnResult) -> None:
        self.last = result
        console.print(rendered(result.message))
        console.print(Text(status_line(result), style="dim"))
        if result.pending is not None:
            show_pending(result.pending, self.mask)
        if result.ended:
            show_end()

    # -- meta commands --------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run a meta command; return False when the chat should end. A misused command prints one error line."""
        name, _, argument = line.partition(" ")
        argument = argument.strip()
        handlers: dict[str, Callable[[str], bool | None]] = {
            "/state": lambda _: show_state(self.conversation),
            "/context": lambda _: show_context(self.conversation, self.mask, self.show_secrets),
            "/history": self.history,
            "/why": lambda _: show_why(self.last, self.mask),
            "/save": self.save,
            "/load": self.load,
            "/back": self.back,
            "/resume": self.resume,
            "/reset": self.reset,
            "/help": show_help,
            "/quit": lambda _: False,
        }
        name = "/quit" if name == "/exit" else name
        handler = handlers.get(name)
        if handler is None:
            from llm_fsm.wording import did_you_mean

            hint = did_you_mean(name, list(handlers))
            error(f"unknown command {name}{'; ' + hint if hint else ''} (type /help)")
            return True
        wrong = _misused(name, argument)
        if wrong:
            error(wrong)
            return True
        return handler(argument) is not False

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
        console.print(f"saved to {path}", markup=False)

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
        console.print(f"loaded {path}: {where}", markup=False)

    def resume(self, argument: str) -> None:
        pending = self.conversation.pending
        if pending is None:
            error("nothing to resume: the conversation is not paused")
            return
        try:
            result = json.loads(argument) if argument else {}
        except json.JSONDecodeError as exc:
            error(f"/resume takes a JSON object: {exc.msg} at column {exc.colno}")
            return
        if not isinstance(result, dict):
            error('/resume takes a JSON object, e.g. /resume {"approved": true}')
            return
        try:
            with console.status("resuming…"):
                outcome = self.run(lambda conversation: conversation.resume(pending.token, result))
        except KeyboardInterrupt:
            errors.print("[yellow](resume cancelled: nothing changed)[/]")
            return
        except FSMError as exc:
            error(one_line(exc))
            return
        self.show_result(outcome)
        self.approve(outcome.pending)

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
        console.print(f"Undone: back in state {self.conversation.state}.")

    def reset(self, _: str) -> None:
        if not self.replace("/reset", self.make(None)):
            return
        self.undo.clear()
        self.last = None
        console.print("Starting over.")
        self.opening()


def _misused(name: str, argument: str) -> str | None:
    """Why ``name argument`` is not how the command is used, or None."""
    expected, _ = COMMANDS[name]
    if argument and not expected:
        return f"{name} takes no argument (usage: {name})"
    if not argument and expected and not expected.startswith("["):
        return f"{name} needs a {expected} (usage: {name} {expected})"
    return None


def read_snapshot(path: str) -> Snapshot:
    """The conversation a ``/save`` wrote to ``path``; ConversationError saying, in one line, what the file
    is and why it cannot be loaded."""
    from pydantic import ValidationError

    from llm_fsm.engine import Snapshot
    from llm_fsm.jsonfiles import JSONFileError, not_a, other_kind, read_json, validation_summary

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


def _read(prompt: str, before: Callable[[], None] | None = None) -> str | None:
    """One line of input; None at end of input (Ctrl-D) or Ctrl-C. ``before`` runs just before the prompt."""
    try:
        if before is not None:
            before()
        return input(prompt)
    except (EOFError, KeyboardInterrupt):
        console.print()
        return None


def _parse_context(text: str | None) -> dict[str, Any]:
    """``--context``: a JSON object (exit 2 otherwise; NaN and Infinity are not JSON)."""
    if text is None:
        return {}
    try:
        value = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        fail(f"--context is not valid JSON: {exc.msg} at column {exc.colno}", 2)
    except RecursionError:
        fail("--context is not valid JSON: it is nested too deeply", 2)
    except ValueError as exc:  # NaN or Infinity (see _not_json), or a number too long to convert
        fail(f"--context is not valid JSON: {exc}", 2)
    if not isinstance(value, dict):
        fail("--context must be a JSON object", 2)
    return value


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON value")


def _warm_up(llm: LLMClient) -> None:
    """Import litellm in the background while the banner shows and the user reads it."""
    client = getattr(llm, "inner", llm)  # a RecordingLLM wraps the real client
    if isinstance(client, LiteLLMClient):
        threading.Thread(target=lambda: client.litellm, name="llm-fsm-import", daemon=True).start()


StateOption = Annotated[
    str | None, typer.Option("--state", help="Start in this state.", autocompletion=complete_states)
]
ContextOption = Annotated[str | None, typer.Option("--context", help="Initial context, a JSON object.")]


@app.command()
@with_model_options()
def chat(
    ctx: typer.Context,
    definition: DefinitionArgument,
    model: ModelOptions,
    state: StateOption = None,
    context: ContextOption = None,
    hooks: HooksOption = None,
    mcp: MCPOption = None,
    store: StoreOption = None,
    conversation: ConversationOption = None,
    wait: WaitOption = 30.0,
    allow_changed_definition: AllowChangedDefinitionOption = False,
    strict_definition: StrictDefinitionOption = False,
    show_secrets: ShowSecretsOption = False,
    record: RecordOption = None,
) -> None:
    """Chat with a definition in the terminal; the reply streams in."""
    check_definition_policy(allow_changed_definition, strict_definition)
    fsm = load_definition(definition)
    registry = load_hooks(hooks)
    connect_mcp(fsm, definition, registry, mcp, ctx)
    initial_context = _parse_context(context)
    _check_state(fsm, state)
    llm = model.client(stream=True, record=record)
    make = ConversationFactory(
        fsm, llm, registry, state=state, context=initial_context,
        allow_changed_definition=allow_changed_definition, strict_definition=strict_definition,
    )  # fmt: skip
    tracked = open_conversation(make, store, conversation, wait)
    session = ChatSession(tracked, make, masker(fsm, show_secrets), show_secrets)
    # litellm takes seconds to import: at once when the opening needs the model, so the import overlaps
    # the start-up; else once the first prompt is up, so nothing the user waits for shares the CPU with it
    opens_with_model = session.opens_with_model()
    if opens_with_model:
        _warm_up(llm)
    import readline  # noqa: F401  (line editing and history for input())

    console.print(f"[bold]{escape(fsm.name)}[/] · {escape(str(model.name))} · /help for commands, Ctrl-D to leave")
    session.begin()
    _talk(session, warm_up=None if opens_with_model else lambda: _warm_up(llm))


def _check_state(fsm: llm_fsm.FSMDefinition, state: str | None) -> None:
    """``--state``: exit 2 when the definition has no such state."""
    if state is not None and state not in fsm.states:
        from llm_fsm.wording import did_you_mean

        hint = did_you_mean(state, list(fsm.states))
        fail(f"unknown state '{state}'{'; ' + hint if hint else ''}", 2)


def _talk(session: ChatSession, warm_up: Callable[[], None] | None = None) -> None:
    """Read the user's lines until /quit, Ctrl-D or Ctrl-C: each a meta command or a message.
    ``warm_up`` starts as the first prompt is shown (the user reads and types meanwhile)."""
    prompt = readline_prompt("[bold cyan]you>[/] ")
    while (line := _read(prompt, before=warm_up)) is not None:
        warm_up = None
        line = line.strip()
        if line.startswith("/"):
            if not session.command(line):
                return
        elif not blank(line):
            session.say(line)
        else:  # an empty turn would read to the model as the conversation's beginning: never sent
            console.print("[dim](nothing sent: type a message, or /help for commands)[/]")
