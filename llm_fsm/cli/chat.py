"""``llm-fsm chat``: talk to a definition in the terminal, with the reply streaming in.

The message streams only once its transition has been checked (see ``llm_fsm.streaming``), so a
reply the runtime refuses is never displayed. Meta commands start with ``/``. Ctrl-D or Ctrl-C at
the prompt leave with exit code 0; Ctrl-C during a reply cancels that turn and changes nothing.
litellm is imported in a background thread: at launch when the opening needs the model, else once the
first prompt is up (a state's own opening needs no model, so the prompt comes at once).

In a workflow a message (or the opening) starts a run: each step shows as it happens (the marker of an
acting state's turn or of an automatic move, its tool calls, its report, its status line; see
:mod:`llm_fsm.cli.chat_steps`), and the prompt comes back where a state waits for a person. A new conversation
whose initial state acts asks for its task first (``task>``; an empty line starts it with none). A run that
stopped before its end (its process killed, a step that failed) goes on when the chat continues it, or before
the next message is sent.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console  # noqa: F401 (the tests make chat.console a Console of their own)

import llm_fsm
from llm_fsm.cli.chat_steps import acts_first, announce_first, announce_next, goes_on, show_step_kind
from llm_fsm.cli.chat_stored import StoredChat, exchanges
from llm_fsm.cli.chat_views import (
    COMMANDS,
    already_decided,
    console,
    error,
    errors,
    one_line,
    rendered,
    show_context,
    show_end,
    show_help,
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
from llm_fsm.cli.shown import as_text, in_markup
from llm_fsm.definition.texts import yes_no_choices, yes_or_no
from llm_fsm.errors import FSMError, OpeningError, RunLimitError
from llm_fsm.llm import LiteLLMClient, LLMClient
from llm_fsm.named_files import LIMIT_VARIABLE, FileRefused, limit, size_text
from llm_fsm.values import blank

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.driving import Resume
    from llm_fsm.turn.runner import TurnResult

__all__ = ["COMMANDS", "ChatSession", "chat", "readline_prompt", "status_line"]  # status_line: the tests' import

_ESCAPE = re.compile(r"(\x1b\[[0-9;]*m)")


def readline_prompt(markup: str) -> str:
    """The prompt rendered to ANSI, escape codes wrapped in \\x01..\\x02 so readline can redraw it."""
    with console.capture() as capture:
        console.print(markup, end="")
    return _ESCAPE.sub("\x01\\1\x02", capture.get())


class ChatSession(StoredChat):
    """One chat: its turns, the tool calls it asks approval for, and the meta commands. What it keeps in the
    store (the conversation, the snapshots /back returns to) and the commands that read or replace that
    are :class:`~llm_fsm.cli.chat_stored.StoredChat`'s."""

    # -- turns ----------------------------------------------------------------------------------

    def begin(self) -> bool:
        """The opening of a new conversation (or the task of its acting initial state: False when the person
        leaves at its prompt); for one continued, where it stands and why it is paused, and the steps left of
        a run that stopped before its end."""
        if acts_first(self.conversation):
            return self.task()
        if self.conversation.status == "new":
            self.opening()
            return True
        current = self.conversation
        told = f"state {current.state}, {exchanges(current.snapshot().history_len)}"
        console.print(as_text(f"Continuing conversation {self.tracked.id}: {told}."))
        if current.history:
            console.print(rendered(current.history[-1].assistant))
        if current.pending is not None:
            show_pending(current.pending, self.mask)
            self.approve(current.pending)
        if current.ended:
            show_end()
        if goes_on(current):
            console.print(as_text(f"(the run stopped in state {current.state} before its end: going on with it)"))
            self.turn(None)
        return True

    def task(self) -> bool:
        """The task of a new conversation whose initial state acts, read at ``task>`` and its run started (an
        empty line: with no task); False at the end of input or Ctrl-C."""
        state = self.conversation.state
        console.print(as_text(f"The state {state} acts on its own: type its task (Enter alone starts it with none)."))
        text = _read(readline_prompt("[bold magenta]task>[/] "))
        if text is None:
            return False
        self.turn(None if blank(text) else text.strip())
        return True

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
        if self.turn(None) is None and self.conversation.status == "new":
            errors.print("[dim](no opening yet: it is tried again when you type your next message)[/]")

    def say(self, text: str) -> None:
        """A message from the user: the opening first if it has not been made (it failed), then the turn."""
        if self.conversation.ended:
            error("the conversation has ended: /back undoes its last turn, /reset starts over, /quit leaves")
            return
        if acts_first(self.conversation):  # its first run failed: the message is its task
            self.turn(text)
            return
        if goes_on(self.conversation):  # a run stopped before its end: its steps left come first
            console.print("[dim](the run goes on first: it stopped before its end)[/]")
            self.turn(None)
            if self.conversation.ended or self.conversation.paused or goes_on(self.conversation):
                console.print("[dim](your message was not sent: the run did not stop where a state waits)[/]")
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
        if self.conversation.definition.is_workflow:
            return self.run_steps(text)
        try:
            result = self.run(lambda conversation: show_stream(conversation.stream(text), self.mask))
        except KeyboardInterrupt:
            errors.print("[yellow](turn cancelled: nothing changed)[/]")
            return None
        except FSMError as exc:  # the model failed, or the conversation cannot take this turn
            self.failed(text, exc)
            return None
        self.show_result(result)
        self.approve(result.pending)
        return result

    def failed(self, text: str | None, exc: FSMError) -> None:
        """The error of a turn that failed, in one line."""
        if text is None and isinstance(exc, OpeningError):
            # the state's own opening could not be written over the context: every try fails the same
            # way (the chat cannot change the context), so it says so once and leaves, not retry it
            fail(one_line(exc), 1)
        error(one_line(exc))

    def run_steps(self, text: str | None, resume: Resume | None = None) -> TurnResult | None:
        """A workflow's run from ``text`` (None: the opening, or the steps left) or ``resume``, each step shown as
        it ends; its last step's result, or None if its first failed or was cancelled (a step that ended stands)."""
        from llm_fsm.running import step_events

        shown: list[TurnResult] = []

        def each(result: TurnResult) -> bool:
            shown.append(result)
            self.show_step(result, announced=True)
            return announce_next(self.conversation)

        def action(conversation: llm_fsm.Conversation) -> TurnResult | RunLimitError:
            try:
                events = conversation.stream(text) if resume is None else step_events(conversation, None, resume)
                return show_stream(events, self.mask, each)
            except RunLimitError as exc:  # returned, not raised: the store saves the run's last step on a return
                return exc

        announce_first(self.conversation, text is not None or resume is not None)
        try:
            outcome = self.run(action)
        except KeyboardInterrupt:
            kept = f"the {len(shown)} steps shown stand, " if shown else ""
            errors.print(f"[yellow](run cancelled: {kept}the step under way changed nothing)[/]")
            return shown[-1] if shown else None
        except FSMError as exc:
            self.failed(text, exc)
            return shown[-1] if shown else None
        if isinstance(outcome, RunLimitError):
            error(one_line(outcome))
            return shown[-1] if shown else None
        self.approve(outcome.pending)
        return outcome

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
        choices = yes_no_choices(self.conversation.definition)
        answer = _read(f"approve? [{choices}] ")
        if answer is not None and answer.strip().startswith("/"):
            self.command(answer.strip())  # a command instead of an answer: run it; the question stays
        elif answer is None or self.decide(pending, answer) is None:
            console.print(f"[dim]Still waiting for approval: answer {in_markup(choices)}.[/]")

    def decide(self, pending: llm_fsm.PendingEvent, answer: str) -> bool | None:
        """Resume ``pending`` as ``answer`` (y/yes or n/no, or the definition's language's: sì, oui, ja...)
        says; None for any other answer."""
        said = yes_or_no(self.conversation.definition, answer)
        if said:
            self.resume('{"approved": true}')
            return True
        if said is False:
            reason = (_read("why not? (optional) ") or "").strip()
            self.resume(json.dumps({"approved": False, "reason": reason} if reason else {"approved": False}))
            return False
        return None

    def show_result(self, result: TurnResult) -> None:
        """A turn's result; a workflow's run's (a resume's), each of its steps."""
        for step in result.steps:
            self.show_step(step)
        self.show_step(result)

    def show_step(self, result: TurnResult, announced: bool = False) -> None:
        """One step's result (``announced``: an acting state's marker came before it, as it started)."""
        self.last = result
        show_step_kind(result, announced)
        # an automatic move says nothing unless its state opens; an act may report nothing, when its tools'
        # results took an automatic move at once
        if result.message or result.step == "turn":
            console.print(rendered(result.message))
        if result.step != "automatic":
            console.print(as_text(status_line(result), style="dim"))
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
            from llm_fsm.definition.wording import did_you_mean

            hint = did_you_mean(name, list(handlers))
            error(f"unknown command {name}{'; ' + hint if hint else ''} (type /help)")
            return True
        wrong = _misused(name, argument)
        if wrong:
            error(wrong)
            return True
        return handler(argument) is not False

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
        if self.conversation.definition.is_workflow:  # the rest of the run, each step shown as it ends
            self.run_steps(None, (pending.token, result))
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


def _read(prompt: str, before: Callable[[], None] | None = None) -> str | None:
    """One line of input; None at end of input (Ctrl-D) or Ctrl-C. ``before`` runs just before the prompt."""
    try:
        if before is not None:
            before()
        return input(prompt) if sys.stdin.isatty() else _piped_line(prompt)
    except (EOFError, KeyboardInterrupt):
        console.print()
        return None


def _piped_line(prompt: str) -> str:
    """What ``input(prompt)`` reads from a pipe or a file, but at most the size limit: ``input`` would read
    ``< /dev/zero``, one endless line, until memory runs out (exit 2 at a longer line)."""
    try:
        most = limit()
    except FileRefused as exc:
        fail(str(exc.strerror), 2)
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline(most + 1)
    if not line:
        raise EOFError
    if len(line.rstrip("\r\n")) > most:
        fail(f"a line of the input (stdin) is longer than {size_text(most)} ({LIMIT_VARIABLE})", 2)
    return line.removesuffix("\n")


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
    llm = model.client(stream=True, record=record, definitions=[fsm])
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

    console.print(f"[bold]{in_markup(fsm.name)}[/] · {in_markup(model.name)} · /help for commands, Ctrl-D to leave")
    if not session.begin():
        return
    _talk(session, warm_up=None if opens_with_model else lambda: _warm_up(llm))


def _check_state(fsm: llm_fsm.FSMDefinition, state: str | None) -> None:
    """``--state``: exit 2 when the definition has no such state."""
    if state is not None and state not in fsm.states:
        from llm_fsm.definition.wording import did_you_mean

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
