"""What ``llm-fsm chat`` shows: the meta commands' displays, a turn's message while it streams, its status line,
pauses and errors. Read-only: the chat itself (:mod:`llm_fsm.cli.chat`) changes the conversation."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

import llm_fsm
from llm_fsm.cli.conversation_factory import masker
from llm_fsm.cli.shown import as_text, in_markup, json_text, json_view, shown
from llm_fsm.definition.models import GlobalTransition
from llm_fsm.errors import FSMError

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.conversation import Conversation, StreamEvent
    from llm_fsm.snapshot import Exchange
    from llm_fsm.turn.runner import TurnResult

Mask = Callable[[dict[str, Any]], dict[str, Any]]  # how a context is shown (secret-looking values masked)

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)

# name: (argument, what it does). A command without an argument refuses one; "[JSON]" is optional.
COMMANDS = {
    "/state": ("", "the current state, its purpose and where it can go"),
    "/context": ("", "the collected context, the working memory and the running summary"),
    "/history": ("[older]", "the conversation so far, a page at a time (older: the page before the last shown)"),
    "/why": ("", "what the last turn rejected, and why"),
    "/save": ("FILE", "save the conversation to a JSON file (readable only by you)"),
    "/load": ("FILE", "continue a conversation saved with /save"),
    "/back": ("", "undo the last turn"),
    "/resume": ("[JSON]", "continue a paused conversation with this result (a JSON object)"),
    "/reset": ("", "start over"),
    "/help": ("", "this list"),
    "/quit": ("", "leave (Ctrl-D works too)"),
}


def show_state(conversation: Conversation) -> None:
    """``/state``: the state, its purpose and its moves (a sub-conversation's, with the outer moves, when one talks)."""
    from llm_fsm import subflows
    from llm_fsm.subflows import offering, outer_moves

    root = conversation.snapshot()
    defs = subflows.levels(conversation.definition, root)
    snaps = [root, *(frame.snapshot for frame in root.stack)]
    outer = outer_moves(defs, snaps) if root.stack else {}  # the lower levels' moves from anywhere
    definition, snapshot = offering(defs, outer), snaps[-1]
    if root.stack:  # a sub-conversation talks: where in the stack
        console.print(f"[dim]in {in_markup(subflows.breadcrumb(conversation.definition, root))}[/]")
    state = definition.states[snapshot.state]
    console.print(f"[bold]{in_markup(state.id)}[/]" + (f": {in_markup(state.purpose)}" if state.purpose else ""))
    back_to = definition.return_target(state.id, snapshot.came_from)
    for transition in definition.moves(state.id, back_to):
        kind = " (from anywhere)" if isinstance(transition, GlobalTransition) else ""
        if transition.target_state in outer:
            kind = f" (from anywhere in '{defs[outer[transition.target_state][0]].name}')"
        move = f"  → {transition.target_state}{kind} (priority {transition.priority}) {transition.description}"
        console.print(as_text(move))
    if state.terminal:
        console.print("  (terminal state)")


def show_context(conversation: Conversation, mask: Mask, show_secrets: bool) -> None:
    """``/context``: the context and where each key came from, the memory, the summary, the sub-conversations."""
    console.print(json_view(mask(conversation.context)))
    for key, origin in conversation.provenance.items():
        console.print(as_text(f"  {key}: set by {origin['by']} on turn {origin['turn']}", style="dim"))
    _show_memory(conversation, mask)
    _show_sub_conversations(conversation, show_secrets)


def _show_sub_conversations(conversation: Conversation, show_secrets: bool) -> None:
    """What each sub-conversation under way holds: its context and its working memory."""
    from llm_fsm import memory, subflows

    root = conversation.snapshot()
    for sub, frame in zip(subflows.levels(conversation.definition, root)[1:], root.stack, strict=True):
        mask = masker(sub, show_secrets)
        where = f"(sub-conversation, state {in_markup(frame.snapshot.state)})"
        console.print(f"[bold]in {in_markup(sub.name)}[/] [dim]{where}[/]")
        console.print(json_view(mask(dict(frame.snapshot.context))))
        if sub.memory is not None:
            _show_slots(mask(memory.current(sub, frame.snapshot)))


def _show_memory(conversation: Conversation, mask: Mask) -> None:
    """The working memory's slots and the running summary, when the definition has them."""
    from llm_fsm.memory.summaries import enabled

    definition = conversation.definition
    if definition.memory is not None:
        console.print("[bold]memory[/]")
        _show_slots(mask(conversation.memory))
    if any(enabled(definition)):
        summary = conversation.snapshot().summary
        told = f"{summary.through} of {conversation.snapshot().history_len} exchanges summarised"
        if summary.pending:
            told += f", {summary.due - summary.through} due"
        if summary.error:
            told += f"; the last summary call failed: {summary.error}"
        console.print(f"[bold]summary[/] [dim]({in_markup(told)})[/]")
        console.print(as_text(f"  {summary.text}") if summary.text else "  [dim](none yet)[/]")


def _show_slots(slots: dict[str, Any]) -> None:
    """A working memory's slots, one a line."""
    for name, text in slots.items():
        console.print(Text.assemble(f"  {shown(name)}: ", shown(text) if text else ("(empty)", "dim")))


def show_history(exchanges: Sequence[tuple[int, Exchange]], total: int) -> None:
    """``/history``: a page of the conversation, exchanges with their index, of ``total``; a line saying how
    to see the ones before, when there are."""
    for _, exchange in exchanges:
        if exchange.user is not None:
            console.print(Text.assemble(("you>", "bold cyan"), " ", shown(exchange.user)))
        bot = ("bot>", "bold green"), " ", shown(exchange.assistant), " ", (f"({shown(exchange.state)})", "dim")
        console.print(Text.assemble(*bot))
    if exchanges and exchanges[0][0] > 0:
        page = f"exchanges {exchanges[0][0] + 1}-{exchanges[-1][0] + 1} of {total}"
        console.print(f"[dim]({page}: /history older shows the ones before)[/]")


def show_why(last: TurnResult | None, mask: Mask) -> None:
    """``/why``: where the last turn ran, its tool calls, and what it rejected."""
    if last is not None and last.ran_in is not None:
        console.print(as_text(f"The last turn ran in the sub-conversation {' › '.join(last.ran_in)}."))
    if last is not None and len(last.frames) > 1:
        path = " › ".join(definition for definition, _ in last.frames)
        console.print(as_text(f"Now in {path}: {last.frames[-1][1]}."))
    if last is not None and last.tool_calls:
        console.print("Tool calls of the last turn:")
        for run in last.tool_calls:
            console.print(as_text(f"- {tool_line(run, mask)}"))
    if last is None or not last.rejected:
        console.print("Nothing was rejected in the last turn.")
        return
    for rejection in last.rejected:
        why = f" (call {rejection.attempt}): {shown(rejection.reason)}"
        console.print(Text.assemble("- ", (shown(rejection.kind), "bold"), why))


def already_decided(pending: llm_fsm.PendingEvent) -> bool:
    """Whether the tool call ``pending`` holds was decided already (saved as approved, running or run):
    a process stopped after the decision, and resuming it goes on with that decision, whatever is sent."""
    call = pending.tool_call if pending.kind == "tool_approval" else None
    return isinstance(call, dict) and call.get("approval") is not None


def show_pending(pending: llm_fsm.PendingEvent, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    if pending.kind == "tool_approval":
        arguments = pending.payload.get("arguments")
        written = json_text(mask(arguments) if isinstance(arguments, dict) else arguments)
        tool = shown(pending.payload.get("tool"))
        if already_decided(pending):
            console.print(_pause_line("interrupted", f"the approved call to {tool}, with {written}"))
            return
        console.print(_pause_line("approval needed", f"the tool {tool} wants to run with {written}"))
        return
    console.print(_pause_line("paused", shown(pending.reason)))
    if pending.payload:
        console.print(as_text(json_text(mask(pending.payload))))
    console.print("[dim]Type /resume JSON (for example /resume {}) to continue.[/]")


def _pause_line(kind: str, text: str) -> Text:
    """``⏸ kind: text``, the text printed as written (shown already)."""
    return Text.assemble((f"⏸ {kind}:", "bold yellow"), " ", text)


def show_end() -> None:
    still = "/history, /save FILE and /back still work; /quit or Ctrl-D leaves."
    console.print(f"[bold]The conversation has ended.[/] {still}")


def show_help(_: str) -> None:
    for name, (argument, text) in COMMANDS.items():
        console.print(f"  [bold]{(name + ' ' + argument).strip():<14}[/] {text}")


def error(message: str) -> None:
    """One ``error:`` line on stderr (the message is text, never read as rich markup: see :mod:`llm_fsm.cli.shown`)."""
    errors.print(Text.assemble(("error:", "red"), " ", shown(message)))


# what Markdown could read as markup: any of these characters, a line break, spaces at either end (an indented
# code block), or a start that opens a list, a quote or a heading
_MARKUP = re.compile(r"[\n*_`#\[\]<>|~\\&]|^\s|\s$|^(?:[-+>=]|\d+[.)])")


_LINE_BREAK = re.compile(r"(?<![\n ])\n(?!\n)")  # one line break, not already hard ("  \n") and not a paragraph's
_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.DOTALL)  # code, fenced or inline: shown as written anyway
# what rich would draw as something else or drop: an image (an icon, with words lost beside it), an HTML tag
# (dropped, and a block of HTML with the text in it)
_AS_TEXT = re.compile(r"!\[|<(?=[A-Za-z/!?])")


def _as_written(message: str) -> str:
    """``message`` for rich's Markdown with what it would drop kept: its line breaks (Markdown joins the lines),
    and images and HTML tags outside code, escaped to show as written."""
    kept, start = [], 0
    for code in [*_CODE.finditer(message), None]:
        end = len(message) if code is None else code.start()
        kept.append(_AS_TEXT.sub(lambda found: "!\\[" if found[0] == "![" else "\\<", message[start:end]))
        if code is not None:
            kept.append(code[0])
            start = code.end()
    return _LINE_BREAK.sub("  \n", "".join(kept))


def rendered(message: str) -> Text | Any:
    """``message`` for the console, :func:`~llm_fsm.cli.shown.shown` (its control characters as visible
    escapes): as Markdown, or as plain text when Markdown would show it the same (one paragraph with no
    markup). Plain text spares importing rich.markdown (markdown-it, pygments: a tenth of a second or more),
    so a state's own opening is shown without it and the first prompt comes sooner. A link shows its
    target after its text: a terminal's hyperlink would hide where it goes."""
    message = shown(message)
    if not _MARKUP.search(message):
        return Text(message)
    from rich.markdown import Markdown

    return Markdown(_as_written(message), hyperlinks=False)


def show_stream(
    events: Iterator[StreamEvent], mask: Mask, each: Callable[[TurnResult], bool] | None = None
) -> TurnResult:
    """Render the message while it streams; return the turn's result (printed by the caller).

    ``each``: the events are a whole run's (a workflow's steps, each ending with its own result). It is called
    with each step's result as the step ends, the display stopped so that it can print the step, and says
    whether another step follows (a spinner shows meanwhile); the result returned is the last step's."""
    from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult

    display, result = _Display(mask), None
    try:
        display.start()
        for event in events:
            if isinstance(event, (MessageDelta, MessageReset, ToolCall, ToolResult)):
                display.show(event)
                continue
            display.finish(event)
            if each is None:
                return event
            result = event
            display.stop()
            if each(event):
                display.start()
    finally:
        display.stop()
        close = getattr(events, "close", None)
        if close is not None:
            close()  # a cancelled turn (Ctrl-C) must not leave the stream half-run
    if result is None:
        raise FSMError("the turn ended without a result")  # pragma: no cover
    return result


class _Display:
    """The spinner of the step under way, then its message as it streams in (gone once the step ends)."""

    def __init__(self, mask: Mask) -> None:
        self.mask = mask
        self.streamed = ""
        self.tools = 0  # the tool calls of the step under way shown so far
        self.live: Any = None  # rich's Live while a step runs

    def start(self) -> None:
        # Imported here: --help should not pay for them (markdown, when a message needs it: see rendered()).
        from rich.live import Live

        self.streamed, self.tools = "", 0
        self.live = Live(_spinner("thinking…"), console=console, refresh_per_second=15, transient=True)
        # Not "with Live(...)": a Ctrl-C landing inside Live's own start-up would skip its exit and
        # leave the refresh thread drawing over the prompt; stop() (in show_stream's finally) always runs.
        self.live.start()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def show(self, event: StreamEvent) -> None:
        from llm_fsm.streaming import MessageDelta, MessageReset, ToolCall, ToolResult

        if isinstance(event, MessageDelta):
            self.streamed += event.text
            self.live.update(rendered(self.streamed))
        elif isinstance(event, MessageReset):
            self.streamed = ""
            self.live.update(_spinner("thinking…"))
        elif isinstance(event, ToolCall):
            self.live.update(_spinner(as_text(f"running {event.name}…")))  # a str would be markup
        elif isinstance(event, ToolResult):
            self._tool(event.run)
            self.live.update(_spinner("thinking…"))

    def finish(self, result: TurnResult) -> None:
        """The step's tool calls not shown as they ran: a turn that ends right after its tools, an automatic
        move their results allow, streams no ToolResult for them."""
        for run in result.tool_calls[self.tools :]:
            self._tool(run)

    def _tool(self, run: Any) -> None:
        self.tools += 1
        self.live.console.print(as_text(f"🔧 {tool_line(run, self.mask)}", style="dim"))


def _spinner(text: str | Text) -> Any:
    from rich.spinner import Spinner

    return Spinner("dots", text=text)


def status_line(result: TurnResult) -> str:
    move = f"{result.previous_state} → {result.state}" if result.transitioned else result.state
    parts = [f"state {move}"]
    if collected := [key for key, value in result.context_updates.items() if value is not None]:
        parts.append("collected " + ", ".join(collected))
    if cleared := [key for key, value in result.context_updates.items() if value is None]:  # clearing.RULE
        parts.append("cleared " + ", ".join(cleared))
    calls = f"{result.llm_calls} LLM call{'s' if result.llm_calls != 1 else ''}"
    parts += [calls, f"{result.usage.total_tokens} tokens"]
    if result.tool_calls:
        count = len(result.tool_calls)
        parts.append(f"{count} tool call{'s' if count != 1 else ''} (/why)")
    if result.rejected:
        parts.append(f"{len(result.rejected)} rejected (/why)")
    return " · ".join(parts)


def tool_line(run: Any, mask: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    """``name({arguments}) → result`` (or ``→ error: ...``), in one bounded line, :func:`~llm_fsm.cli.shown.shown`."""
    from llm_fsm.secrets import mask_run

    masked = mask_run(run.model_dump(), mask)
    outcome = f"error: {run.error}" if run.error is not None else json_text(masked["result"])
    decided = f" [{run.approval}]" if run.approval else ""
    line = shown(f"{run.name}({json_text(masked['arguments'])}){decided} → {outcome}")
    return line if len(line) <= 160 else line[:159] + "…"


def one_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
