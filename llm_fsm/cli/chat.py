"""``llm-fsm chat``: talk to a definition in the terminal, with the reply streaming in.

The message streams only once its transition has been checked (see ``llm_fsm.streaming``), so a
reply the runtime refuses is never displayed. Meta commands start with ``/``. Ctrl-D or Ctrl-C at
the prompt leave with exit code 0; Ctrl-C during a reply cancels that turn and changes nothing.
litellm is imported in a background thread at launch, so the banner shows at once.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

import llm_fsm
from llm_fsm.cli.main import app, fail
from llm_fsm.cli.options import (
    AllowChangedDefinitionOption,
    ApiBaseOption,
    ApiKeyOption,
    ConversationFactory,
    ConversationOption,
    DefinitionArgument,
    GuidedOption,
    HooksOption,
    MaxRetriesOption,
    MaxTokensOption,
    MCPOption,
    ModelOption,
    Provider,
    RecordOption,
    ResponseFormat,
    ResponseFormatOption,
    ShowSecretsOption,
    StoreOption,
    StrictDefinitionOption,
    TemperatureOption,
    TimeoutOption,
    ToolCalling,
    ToolCallingOption,
    WaitOption,
    check_definition_policy,
    complete_states,
    connect_mcp,
    load_definition,
    load_hooks,
    make_client,
    masker,
    open_conversation,
)
from llm_fsm.definition import GlobalTransition
from llm_fsm.errors import ConversationError, FSMError
from llm_fsm.llm import LiteLLMClient, LLMClient
from llm_fsm.values import blank

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.conversation import Conversation, StreamEvent
    from llm_fsm.engine import Snapshot
    from llm_fsm.store.stored import StoredConversation
    from llm_fsm.turn import TurnResult

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)

# name: (argument, what it does). A command without an argument refuses one; "[JSON]" is optional.
COMMANDS = {
    "/state": ("", "the current state, its purpose and where it can go"),
    "/context": ("", "the collected context, the working memory and the running summary"),
    "/history": ("", "the conversation so far"),
    "/why": ("", "what the last turn rejected, and why"),
    "/save": ("FILE", "save the conversation to a JSON file (readable only by you)"),
    "/load": ("FILE", "continue a conversation saved with /save"),
    "/back": ("", "undo the last turn"),
    "/resume": ("[JSON]", "continue a paused conversation with this result (a JSON object)"),
    "/reset": ("", "start over"),
    "/help": ("", "this list"),
    "/quit": ("", "leave (Ctrl-D works too)"),
}
_ESCAPE = re.compile(r"(\x1b\[[0-9;]*m)")


def readline_prompt(markup: str) -> str:
    """The prompt rendered to ANSI, escape codes wrapped in \\x01..\\x02 so readline can redraw it."""
    with console.capture() as capture:
        console.print(markup, end="")
    return _ESCAPE.sub("\x01\\1\x02", capture.get())


class ChatSession:
    """One chat: the conversation, the snapshots that /back returns to, and the last turn's result."""

    def __init__(
        self,
        tracked: StoredConversation,
        make: ConversationFactory,
        mask: Callable[[dict[str, Any]], dict[str, Any]] = lambda context: context,
        show_secrets: bool = False,
    ) -> None:
        self.tracked = tracked
        self.make = make
        self.mask = mask
        self.show_secrets = show_secrets  # for the sub-definitions' own masks
        self.undo: list[llm_fsm.Snapshot] = []
        self.last: TurnResult | None = None

    # -- turns ----------------------------------------------------------------------------------

    def begin(self) -> None:
        """The opening of a new conversation; for one continued, where it stands and why it is paused."""
        if self.conversation.status == "new":
            self.opening()
            return
        current = self.conversation
        console.print(
            f"Continuing conversation {self.tracked.id}: state {current.state}, {len(current.history)} messages."
        )
        if current.history:
            from rich.markdown import Markdown

            console.print(Markdown(current.history[-1].assistant))
        if current.pending is not None:
            show_pending(current.pending, self.mask)
            self.approve(current.pending)
        if current.ended:
            show_end()

    def opening(self) -> None:
        """The opening message; when it fails, the next message the user types tries it again first."""
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
        before = self.conversation.snapshot()
        try:
            result = self.tracked.run(lambda conversation: _show(conversation.stream(text), self.mask))
        except KeyboardInterrupt:
            errors.print("[yellow](turn cancelled: nothing changed)[/]")
            return None
        except FSMError as exc:  # the model failed, or the conversation cannot take this turn
            error(_one_line(exc))
            return None
        self.undo.append(before)
        self.show_result(result)
        self.approve(result.pending)
        return result

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
        from rich.markdown import Markdown

        self.last = result
        console.print(Markdown(result.message))
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
            "/state": self.show_state,
            "/context": self.show_context,
            "/history": self.show_history,
            "/why": self.show_why,
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

    def show_state(self, _: str) -> None:
        from llm_fsm import subflows
        from llm_fsm.subflow_turns import offering, outer_moves

        root = self.conversation.snapshot()
        defs = subflows.levels(self.conversation.definition, root)
        snaps = [root, *(frame.snapshot for frame in root.stack)]
        outer = outer_moves(defs, snaps) if root.stack else {}  # the lower levels' moves from anywhere
        definition, snapshot = offering(defs, outer), snaps[-1]
        if root.stack:  # a sub-conversation talks: where in the stack
            console.print(f"[dim]in {escape(subflows.breadcrumb(self.conversation.definition, root))}[/]")
        state = definition.states[snapshot.state]
        console.print(f"[bold]{state.id}[/]" + (f": {escape(state.purpose)}" if state.purpose else ""))
        back_to = definition.return_target(state.id, snapshot.came_from)
        for transition in definition.moves(state.id, back_to):
            kind = " (from anywhere)" if isinstance(transition, GlobalTransition) else ""
            if transition.target_state in outer:
                kind = f" (from anywhere in '{escape(defs[outer[transition.target_state][0]].name)}')"
            console.print(
                f"  → {transition.target_state}{kind} (priority {transition.priority}) {escape(transition.description)}"
            )
        if state.terminal:
            console.print("  (terminal state)")

    def show_context(self, _: str) -> None:
        from rich.json import JSON

        console.print(JSON(json.dumps(self.mask(self.conversation.context), ensure_ascii=False, default=str)))
        for key, origin in self.conversation.provenance.items():
            console.print(f"  [dim]{escape(key)}: set by {escape(origin['by'])} on turn {origin['turn']}[/]")
        self.show_memory()
        self.show_sub_conversations()

    def show_sub_conversations(self) -> None:
        """What each sub-conversation under way holds: its context and its working memory."""
        from rich.json import JSON

        from llm_fsm import memory, subflows

        root = self.conversation.snapshot()
        for sub, frame in zip(subflows.levels(self.conversation.definition, root)[1:], root.stack, strict=True):
            mask = masker(sub, self.show_secrets)
            where = f"(sub-conversation, state {escape(frame.snapshot.state)})"
            console.print(f"[bold]in {escape(sub.name)}[/] [dim]{where}[/]")
            console.print(JSON(json.dumps(mask(dict(frame.snapshot.context)), ensure_ascii=False, default=str)))
            if sub.memory is not None:
                for name, text in mask(memory.current(sub, frame.snapshot)).items():
                    console.print(f"  {escape(name)}: {escape(str(text)) if text else '[dim](empty)[/]'}")

    def show_memory(self) -> None:
        """The working memory's slots and the running summary, when the definition has them."""
        from llm_fsm.summaries import enabled

        conversation = self.conversation
        definition = conversation.definition
        if definition.memory is not None:
            console.print("[bold]memory[/]")
            for name, text in self.mask(conversation.memory).items():
                console.print(f"  {escape(name)}: {escape(str(text)) if text else '[dim](empty)[/]'}")
        if any(enabled(definition)):
            summary = conversation.snapshot().summary
            told = f"{summary.through} of {len(conversation.history)} exchanges summarised"
            if summary.pending:
                told += f", {summary.due - summary.through} due"
            if summary.error:
                told += f"; the last summary call failed: {summary.error}"
            console.print(f"[bold]summary[/] [dim]({escape(told)})[/]")
            console.print(f"  {escape(summary.text)}" if summary.text else "  [dim](none yet)[/]")

    def show_history(self, _: str) -> None:
        for exchange in self.conversation.history:
            if exchange.user is not None:
                console.print(f"[bold cyan]you>[/] {escape(exchange.user)}")
            console.print(f"[bold green]bot>[/] {escape(exchange.assistant)} [dim]({exchange.state})[/]")

    def show_why(self, _: str) -> None:
        last = self.last
        if last is not None and last.ran_in is not None:
            console.print(f"The last turn ran in the sub-conversation {escape(' › '.join(last.ran_in))}.")
        if last is not None and len(last.frames) > 1:
            path = " › ".join(definition for definition, _ in last.frames)
            console.print(f"Now in {escape(path)}: {escape(last.frames[-1][1])}.")
        if last is not None and last.tool_calls:
            console.print("Tool calls of the last turn:")
            for run in last.tool_calls:
                console.print(f"- {escape(tool_line(run, self.mask))}")
        if last is None or not last.rejected:
            console.print("Nothing was rejected in the last turn.")
            return
        for rejection in last.rejected:
            console.print(f"- [bold]{rejection.kind}[/] (call {rejection.attempt}): {escape(rejection.reason)}")

    def save(self, path: str) -> None:
        from llm_fsm.jsonfiles import write_private

        try:  # the file holds everything the user said: readable by them only
            write_private(path, self.conversation.snapshot().model_dump_json(indent=2))
        except OSError as exc:
            error(f"cannot write {path}: {exc.strerror or exc}")
            return
        console.print(f"saved to {path}", markup=False)

    def load(self, path: str) -> None:
        try:
            restored = self.make.build(read_snapshot(path))
        except FSMError as exc:
            error(_one_line(exc))
            return
        self.undo.append(self.conversation.snapshot())
        self.tracked.replace(restored)
        where = f"state {self.conversation.state}, {len(self.conversation.history)} messages"
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
        before = self.conversation.snapshot()
        try:
            with console.status("resuming…"):
                outcome = self.tracked.run(lambda conversation: conversation.resume(pending.token, result))
        except KeyboardInterrupt:
            errors.print("[yellow](resume cancelled: nothing changed)[/]")
            return
        except FSMError as exc:
            error(_one_line(exc))
            return
        self.undo.append(before)
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
        self.tracked.replace(self.make(self.undo.pop()))
        console.print(f"Undone: back in state {self.conversation.state}.")

    def reset(self, _: str) -> None:
        self.tracked.replace(self.make(None))
        self.undo.clear()
        self.last = None
        console.print("Starting over.")
        self.opening()


def already_decided(pending: llm_fsm.PendingEvent) -> bool:
    """Whether the tool call ``pending`` holds was decided already (saved as approved, running or run):
    a process stopped after the decision, and resuming it goes on with that decision, whatever is sent."""
    call = pending.tool_call if pending.kind == "tool_approval" else None
    return isinstance(call, dict) and call.get("approval") is not None


def show_pending(pending: llm_fsm.PendingEvent, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    if pending.kind == "tool_approval":
        arguments = pending.payload.get("arguments")
        shown = json.dumps(mask(arguments) if isinstance(arguments, dict) else arguments, ensure_ascii=False)
        if already_decided(pending):
            tool = escape(str(pending.payload.get("tool")))
            console.print(f"[bold yellow]⏸ interrupted:[/] the approved call to {tool}, with {escape(shown)}")
            return
        console.print(f"[bold yellow]⏸ approval needed:[/] the tool {escape(str(pending.payload.get('tool')))}", end="")
        console.print(f" wants to run with {shown}", markup=False)
        return
    console.print(f"[bold yellow]⏸ paused:[/] {escape(pending.reason)}")
    if pending.payload:
        console.print(json.dumps(mask(pending.payload), ensure_ascii=False, default=str), markup=False)
    console.print("[dim]Type /resume JSON (for example /resume {}) to continue.[/]")


def show_end() -> None:
    still = "/history, /save FILE and /back still work; /quit or Ctrl-D leaves."
    console.print(f"[bold]The conversation has ended.[/] {still}")


def show_help(_: str) -> None:
    for name, (argument, text) in COMMANDS.items():
        console.print(f"  [bold]{(name + ' ' + argument).strip():<14}[/] {text}")


def error(message: str) -> None:
    """One ``error:`` line on stderr (the message is text, never read as rich markup)."""
    errors.print(Text.assemble(("error:", "red"), " ", message))


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


def _show(events: Iterator[StreamEvent], mask: Callable[[dict[str, Any]], dict[str, Any]]) -> TurnResult:
    """Render the message while it streams; return the turn's result (printed by the caller)."""
    # Imported here: markdown rendering costs ~25 ms to import, which --help should not pay.
    from rich.live import Live
    from rich.markdown import Markdown
    from rich.spinner import Spinner

    from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult

    shown = ""
    live = Live(Spinner("dots", text="thinking…"), console=console, refresh_per_second=15, transient=True)
    try:
        # Not "with Live(...)": a Ctrl-C landing inside Live's own start-up would skip its exit and
        # leave the refresh thread drawing over the prompt; stop() in finally always runs.
        live.start()
        for event in events:
            if isinstance(event, MessageDelta):
                shown += event.text
                live.update(Markdown(shown))
            elif isinstance(event, MessageReset):
                shown = ""
                live.update(Spinner("dots", text="thinking…"))
            elif isinstance(event, ToolCall):
                live.update(Spinner("dots", text=f"running {event.name}…"))
            elif isinstance(event, ToolResult):
                live.console.print(Text(f"🔧 {tool_line(event.run, mask)}", style="dim"))
                live.update(Spinner("dots", text="thinking…"))
            else:
                return event
    finally:
        live.stop()
        close = getattr(events, "close", None)
        if close is not None:
            close()  # a cancelled turn (Ctrl-C) must not leave the stream half-run
    raise FSMError("the turn ended without a result")  # pragma: no cover


def status_line(result: TurnResult) -> str:
    move = f"{result.previous_state} → {result.state}" if result.transitioned else result.state
    parts = [f"state {move}"]
    if result.context_updates:
        parts.append("collected " + ", ".join(result.context_updates))
    calls = f"{result.llm_calls} LLM call{'s' if result.llm_calls != 1 else ''}"
    parts += [calls, f"{result.usage.total_tokens} tokens"]
    if result.tool_calls:
        count = len(result.tool_calls)
        parts.append(f"{count} tool call{'s' if count != 1 else ''} (/why)")
    if result.rejected:
        parts.append(f"{len(result.rejected)} rejected (/why)")
    return " · ".join(parts)


def tool_line(run: Any, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    """``name({arguments}) → result`` (or ``→ error: ...``), in one bounded line."""
    from llm_fsm.secrets import mask_run

    shown = mask_run(run.model_dump(), mask)
    arguments = shown["arguments"]
    result = json.dumps(shown["result"], ensure_ascii=False, default=str)
    outcome = f"error: {run.error}" if run.error is not None else result
    decided = f" [{run.approval}]" if run.approval else ""
    line = f"{run.name}({json.dumps(arguments, ensure_ascii=False, default=str)}){decided} → {outcome}"
    return line if len(line) <= 160 else line[:159] + "…"


def _one_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _read(prompt: str) -> str | None:
    """One line of input; None at end of input (Ctrl-D) or Ctrl-C."""
    try:
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


@app.command()
def chat(
    ctx: typer.Context,
    definition: DefinitionArgument,
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    api_key: ApiKeyOption = None,
    timeout: TimeoutOption = 60.0,
    max_retries: MaxRetriesOption = 2,
    temperature: TemperatureOption = None,
    response_format: ResponseFormatOption = ResponseFormat.auto,
    max_tokens: MaxTokensOption = None,
    tool_calling: ToolCallingOption = ToolCalling.auto,
    guided: GuidedOption = False,
    state: Annotated[
        str | None, typer.Option("--state", help="Start in this state.", autocompletion=complete_states)
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="Initial context, a JSON object.")] = None,
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
    from llm_fsm.wording import did_you_mean

    fsm = load_definition(definition)
    registry = load_hooks(hooks)
    connect_mcp(fsm, definition, registry, mcp, ctx)
    initial_context = _parse_context(context)
    if state is not None and state not in fsm.states:
        hint = did_you_mean(state, list(fsm.states))
        fail(f"unknown state '{state}'{'; ' + hint if hint else ''}", 2)
    provider = Provider(
        api_base, api_key, timeout, max_retries, temperature, response_format, max_tokens, tool_calling, guided
    )
    llm = make_client(model, provider, stream=True, record=record)
    _warm_up(llm)

    make = ConversationFactory(
        fsm,
        llm,
        registry,
        state=state,
        context=initial_context,
        allow_changed_definition=allow_changed_definition,
        strict_definition=strict_definition,
    )
    tracked = open_conversation(make, store, conversation, wait)
    session = ChatSession(tracked, make, masker(fsm, show_secrets), show_secrets)
    import readline  # noqa: F401  (line editing and history for input())

    console.print(f"[bold]{escape(fsm.name)}[/] · {escape(str(model))} · /help for commands, Ctrl-D to leave")
    session.begin()
    prompt = readline_prompt("[bold cyan]you>[/] ")
    while (line := _read(prompt)) is not None:
        line = line.strip()
        if line.startswith("/"):
            if not session.command(line):
                return
        elif not blank(line):
            session.say(line)
        else:  # an empty turn would read to the model as the conversation's beginning: never sent
            console.print("[dim](nothing sent: type a message, or /help for commands)[/]")
