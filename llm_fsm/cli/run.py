"""``llm-fsm run``: a conversation from lines of input, one JSON line for the opening and for each turn.

In a workflow (a definition where some state acts or some move is automatic) an input line starts a run, and
each of its steps prints its own line as it ends (see :mod:`llm_fsm.running`): a new conversation whose initial
state acts takes the input's first line as its task (no line: it starts with none), and a stored one left
mid-run (killed, or stopped at ``max_run_steps``) goes on with the steps left before it reads a line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from io import TextIOWrapper
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from llm_fsm.cli.conversation_factory import (
    UNSTORED_ID,
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
    HistoryWindowOption,
    HooksOption,
    MaxCorrectionsOption,
    MCPOption,
    ModelOptions,
    RecordOption,
    ReplayOption,
    ShowSecretsOption,
    StoreOption,
    StrictDefinitionOption,
    WaitOption,
    connect_mcp,
    load_definition,
    load_hooks,
    with_model_options,
)
from llm_fsm.cli.shown import json_text, shown
from llm_fsm.errors import ConversationError, FSMError, LLMError, ResumeError, RunLimitError, StoreError
from llm_fsm.named_files import LIMIT_VARIABLE, NotARegularFile, limit, open_file, size_text
from llm_fsm.values import blank

if TYPE_CHECKING:
    from llm_fsm.conversation import Conversation
    from llm_fsm.driving import Resume
    from llm_fsm.store.stored import StoredConversation
    from llm_fsm.turn.runner import TurnResult

Mask = Callable[[dict[str, Any]], dict[str, Any]]


InputOption = Annotated[str, typer.Option("--input", "-i", help="File of user messages, one per line; - for stdin.")]
ResumeOption = Annotated[
    str | None,
    typer.Option(
        "--resume", help='Continue a paused stored conversation with this JSON object first (e.g. {"approved": true}).'
    ),
]


@app.command()
@with_model_options()
def run(
    ctx: typer.Context,
    definition: DefinitionArgument,
    model: ModelOptions,
    input: InputOption = "-",
    history_window: HistoryWindowOption = 6,
    max_corrections: MaxCorrectionsOption = 1,
    hooks: HooksOption = None,
    mcp: MCPOption = None,
    store: StoreOption = None,
    conversation: ConversationOption = None,
    wait: WaitOption = 30.0,
    allow_changed_definition: AllowChangedDefinitionOption = False,
    strict_definition: StrictDefinitionOption = False,
    show_secrets: ShowSecretsOption = False,
    record: RecordOption = None,
    replay: ReplayOption = None,
    resume: ResumeOption = None,
) -> None:
    """Run a conversation non-interactively: one JSON line for the opening and for each turn (in a workflow,
    for each step of a run: with -c ID and no input, a stored run stopped mid-way goes on).

    Exits 3 when the conversation is left paused (a handler's pause, or a tool call waiting for
    approval): the last line's "pending" says why; run again with --store, -c and --resume JSON."""
    check_definition_policy(allow_changed_definition, strict_definition)
    from llm_fsm.turn.prompt import PromptBuilder, PromptSettings

    fsm = load_definition(definition)
    registry = load_hooks(hooks)
    connect_mcp(fsm, definition, registry, mcp, ctx)
    llm = model.client(record=record, replay=replay, definitions=[fsm])
    builder = PromptBuilder(settings=PromptSettings(history_window=history_window))
    make = ConversationFactory(
        fsm, llm, registry, options={"max_corrections": max_corrections, "prompt": builder},
        allow_changed_definition=allow_changed_definition, strict_definition=strict_definition,
    )  # fmt: skip
    try:
        most = limit()
        # "utf-8-sig": an editor's byte order mark is not the user's first word
        stream = sys.stdin if input == "-" else TextIOWrapper(open_file(input, "file of messages"), "utf-8-sig")
    except NotARegularFile as exc:  # a pipe is read as stdin: a FIFO would block the open until written to
        fail(f"cannot read input {input}: {exc.strerror} (--input - reads standard input)", 2)
    except OSError as exc:
        fail(f"cannot read input {input}: {exc.strerror or exc}", 2)
    with stream:
        decision = _decision(resume)
        tracked = open_conversation(make, store, conversation, wait)
        _converse(tracked, _lines(stream, input, most), masker(fsm, show_secrets), decision)


PAUSED_EXIT = 3  # the conversation waits for a person (a pause, or a tool call to approve)


def _decision(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--resume takes a JSON object: {exc.msg} at column {exc.colno}", 2)
    if not isinstance(value, dict):
        fail("--resume takes a JSON object, e.g. --resume '{\"approved\": true}'", 2)
    return value


def _converse(
    tracked: StoredConversation,
    lines: Iterator[str],
    mask: Mask,
    decision: dict[str, Any] | None = None,
) -> None:
    if tracked.conversation.ended:
        fail(f"conversation {tracked.id!r} has ended (state '{tracked.conversation.state}')", 1)
    try:
        lines = _first_turn(tracked, mask, decision, lines)
        for line in lines:
            if tracked.conversation.ended or tracked.conversation.paused:
                break
            _steps(tracked, mask, line)
        _exit_if_paused(tracked)
    except LLMError as exc:
        fail(f"model call failed: {exc}", 1)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except ResumeError as exc:  # a --resume value that does not fit the pause: a bad option value
        fail(f"--resume: {exc}", 2)
    except RunLimitError as exc:
        fail(_stopped(exc, tracked), 1)
    except (ConversationError, StoreError) as exc:
        fail(str(exc), 1)
    except FSMError as exc:
        fail(str(exc), 2)


def _stopped(exc: RunLimitError, tracked: StoredConversation) -> str:
    """The error of a run stopped at ``max_run_steps``, with how to go on from the command line."""
    if tracked.id == UNSTORED_ID:
        return f"{exc} (from the command line: run with --store and -c ID to keep a run and go on with it)"
    return f"{exc} (from the command line: run again with --store, -c {tracked.id} and no input)"


def _first_turn(
    tracked: StoredConversation, mask: Mask, decision: dict[str, Any] | None, lines: Iterator[str]
) -> Iterator[str]:
    """The turn a run opens with before its input's lines, where it has one; the lines left for the turns after.

    The resume of a paused conversation with ``decision`` (--resume; exit 2 where it is not paused); the start
    of a new one (in a workflow whose initial state acts, a run with the first line as its task: no line, no
    task); in a stored workflow, the steps a run stopped mid-way has left (none where its state waits)."""
    conversation = tracked.conversation
    if decision is not None:
        pending = conversation.pending
        if pending is None:
            fail("--resume: the conversation is not paused (resume a stored one: --store and -c ID)", 2)
        _steps(tracked, mask, resume=(pending.token, decision))
    elif tracked.is_new:
        acts = conversation.definition.states[conversation.state].acts
        _steps(tracked, mask, next(lines, None) if acts else None)
    elif _goes_on(conversation):
        _steps(tracked, mask)
    return lines


def _goes_on(conversation: Conversation) -> bool:
    """Whether a stored conversation has steps to take on its own: a run stopped before its end."""
    from llm_fsm.running import next_step

    return next_step(conversation) is not None


def _steps(tracked: StoredConversation, mask: Mask, text: str | None = None, resume: Resume | None = None) -> None:
    """The run from ``text`` (None: the opening, or the steps left) or ``resume``, under the conversation's lock.

    In a workflow each step's line is printed as the step ends (the next step saves it, before it begins);
    elsewhere the turn's line once it is saved, as always: a line printed is a turn kept."""
    if not tracked.conversation.definition.is_workflow:
        for result in tracked.run(lambda conversation: list(conversation.run(text, resume=resume))):
            _emit(result, mask)
        return

    def action(conversation: Conversation) -> RunLimitError | None:
        try:
            for result in conversation.run(text, resume=resume):
                _emit(result, mask)
        except RunLimitError as exc:
            # returned, not raised: the store saves a run's last step only when the action returns
            return exc
        return None

    stopped = tracked.run(action)
    if stopped is not None:
        raise stopped


def _exit_if_paused(tracked: StoredConversation) -> None:
    """Exit :data:`PAUSED_EXIT` where the conversation waits for a person, saying on stderr how to continue it."""
    conversation = tracked.conversation
    if conversation.paused and conversation.pending is not None:
        how = "a --store to keep it" if tracked.id == UNSTORED_ID else f"--store, -c {tracked.id} and --resume JSON"
        typer.echo(f"paused: {shown(conversation.pending.reason)} (to continue: run again with {how})", err=True)
        raise typer.Exit(PAUSED_EXIT)


def _lines(stream: TextIO, name: str, most: int) -> Iterator[str]:
    """The input's lines with text; exit 2 at a line that is not UTF-8 text (a binary file given as input), or
    longer than ``most`` characters (stdin is read a line at a time, and ``< /dev/zero`` is one endless line).

    A blank line is skipped with a ``note:`` on stderr: it is no message (an empty turn would read to the
    model as the conversation's beginning), stopping a whole run for it would punish a spacing habit, and
    skipping it silently would leave the output's turns one short of the input's lines unexplained.
    """
    source = "(stdin)" if name == "-" else name
    try:
        for number, line in enumerate(iter(lambda: stream.readline(most + 1), ""), 1):
            if len(line.rstrip("\r\n")) > most:
                fail(f"line {number} of the input {source} is longer than {size_text(most)} ({LIMIT_VARIABLE})", 2)
            if number == 1:  # an editor's byte order mark is no text (a file's is dropped as it is read; stdin's here)
                line = line.removeprefix("\ufeff")
            if not blank(line):
                yield line.rstrip("\r\n")
            else:
                typer.echo(f"note: input line {number} is blank: skipped, no turn sent", err=True)
    except UnicodeDecodeError as exc:
        fail(f"the input {source} is not UTF-8 text: {exc.reason}", 2)


def _emit(result: TurnResult, mask: Mask) -> None:
    if result.fallback and result.rejected and all(r.kind == "truncated" for r in result.rejected):
        # no reply fit: a token limit too low for any reply reads as the model asking the user for more
        typer.echo(
            "note: every reply of this turn was cut at the token limit (--max-tokens): the turn fell back", err=True
        )
    line = result.to_dict()
    from llm_fsm.secrets import mask_pending, mask_run

    line["context"], line["context_updates"] = mask(line["context"]), mask(line["context_updates"])
    if "corrections" in line:  # key -> {"from", "to"}: a secret key's values are masked whole
        line["corrections"] = mask(line["corrections"])
    line["pending"] = mask_pending(line["pending"], mask)
    line["tool_calls"] = [mask_run(run, mask) for run in line["tool_calls"]]
    sys.stdout.write(json_text(line) + "\n")  # the characters a terminal acts on as \u escapes: see cli.shown
    sys.stdout.flush()
