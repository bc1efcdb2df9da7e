"""The options commands share, their shell completion, and what commands build from them.

A definition (``load_definition``), a ``Hooks`` object (``--hooks``), the model (``--model``,
``--record``, ``--replay``), the conversation (``ConversationFactory``, and ``open_conversation`` for
``--store``/``--conversation``/``--wait``) and how displays mask secrets (``--show-secrets``).
Each exits with a one-line error when what was given cannot be used.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

import llm_fsm
from llm_fsm.cli.main import fail
from llm_fsm.errors import ConversationError, DefinitionError, FSMError, HooksLoadError, LLMError, StoreError
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LiteLLMClient, LLMClient

if TYPE_CHECKING:
    # The modules that build pydantic models or import Jinja load inside the commands that use them:
    # "llm-fsm --help" and the authoring commands never pay for what they do not run.
    from llm_fsm.conversation import Conversation
    from llm_fsm.engine import Snapshot
    from llm_fsm.store.base import Store
    from llm_fsm.store.stored import StoredConversation
    from llm_fsm.tools.mcp import MCPServer

SCRIPTED_PREFIX = "scripted:"
UNSTORED_ID = "terminal"  # the id of a conversation kept only while the command runs


def complete_definitions(incomplete: str) -> list[str]:
    """Shell completion: ``*.json`` files and folders in the current folder (or the one typed so far)."""
    folder, prefix = os.path.split(incomplete)
    try:
        entries = sorted(Path(folder or ".").iterdir())
    except OSError:
        return []
    names = []
    for entry in entries:
        if not entry.name.startswith(prefix) or (entry.name.startswith(".") and not prefix.startswith(".")):
            continue
        if entry.is_dir():
            names.append(os.path.join(folder, entry.name) + "/")
        elif entry.suffix == ".json":
            names.append(os.path.join(folder, entry.name))
    return names


def complete_states(ctx: typer.Context, args: list[str], incomplete: str) -> list[str]:
    """Shell completion: the state ids of the definition given earlier on the command line."""
    # While completing an option's value, click may leave the positional argument unparsed in args.
    path = ctx.params.get("definition") or next((a for a in ctx.args if a.endswith(".json")), None)
    if not path:
        return []
    from llm_fsm.loader import inspect

    report = inspect(path)
    states = report.definition.states if report.definition else {}
    return [state for state in states if state.startswith(incomplete)]


def non_empty(value: str | None) -> str | None:
    """An option's value, refused when empty: ``--store "$UNSET"`` must not quietly mean the default."""
    if value is not None and not value.strip():
        raise typer.BadParameter("the value is empty")
    return value


def http_url(value: str | None) -> str | None:
    """A provider's base URL: ``http://`` or ``https://`` and a host (anything else would fail on the first call)."""
    from urllib.parse import urlsplit

    if value is None:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number from 0 to 65535)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(f"{value!r} is not an http:// or https:// URL with a host")
    return value


DefinitionArgument = Annotated[
    Path,
    typer.Argument(help="The definition JSON file.", show_default=False, autocompletion=complete_definitions),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        envvar="LLM_FSM_MODEL",
        show_envvar=True,
        help=f"litellm model name (e.g. openai/gpt-4o-mini), or {SCRIPTED_PREFIX}FILE for scripted replies.",
    ),
]
ApiBaseOption = Annotated[
    str | None,
    typer.Option("--api-base", envvar="LLM_FSM_API_BASE", show_envvar=True, callback=http_url,
                 help="Provider base URL."),
]  # fmt: skip
ApiKeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="LLM_FSM_API_KEY", show_envvar=True, callback=non_empty, help="Provider API key."),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0.1, envvar="LLM_FSM_TIMEOUT", show_envvar=True,
                 help="Seconds to wait for each model call before it counts as failed."),
]  # fmt: skip
MaxRetriesOption = Annotated[
    int,
    typer.Option("--max-retries", min=0, envvar="LLM_FSM_MAX_RETRIES", show_envvar=True,
                 help="Retries of a model call after a timeout, connection error, 429 or 5xx."),
]  # fmt: skip
TemperatureOption = Annotated[
    float | None,
    typer.Option("--temperature", min=0.0, max=2.0, envvar="LLM_FSM_TEMPERATURE", show_envvar=True,
                 help="Sampling temperature (default: the provider's)."),
]  # fmt: skip


class ResponseFormat(StrEnum):
    auto = "auto"
    json_schema = "json_schema"
    json_object = "json_object"
    none = "none"


class ToolCalling(StrEnum):
    auto = "auto"
    native = "native"
    json = "json"


ResponseFormatOption = Annotated[
    ResponseFormat,
    typer.Option("--response-format", envvar="LLM_FSM_RESPONSE_FORMAT", show_envvar=True,
                 help="What the model is asked to answer in: auto (what litellm says it supports), json_schema "
                      "(the state's strict reply schema, e.g. for a local llama-server), json_object or none."),
]  # fmt: skip
MaxTokensOption = Annotated[
    int | None,
    typer.Option("--max-tokens", min=1, envvar="LLM_FSM_MAX_TOKENS", show_envvar=True,
                 help="Most tokens per reply (a reply cut there is refused, never committed)."),
]  # fmt: skip
ToolCallingOption = Annotated[
    ToolCalling,
    typer.Option("--tool-calling", envvar="LLM_FSM_TOOL_CALLING", show_envvar=True,
                 help="How the model calls tools: auto, native (function calling) or json (the JSON form)."),
]  # fmt: skip
GuidedOption = Annotated[
    bool,
    typer.Option("--guided", envvar="LLM_FSM_GUIDED", show_envvar=True,
                 help="Guided replies for small models: a reply schema made per turn (needs --response-format "
                      "json_schema on a server that enforces it, such as llama.cpp's)."),
]  # fmt: skip
HooksOption = Annotated[
    str | None,
    typer.Option(
        "--hooks",
        envvar="LLM_FSM_HOOKS",
        callback=non_empty,
        help="A Hooks object of handlers and checks: MODULE:NAME or FILE.py:NAME.",
    ),
]
MCPOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        help="An MCP server whose tools the states may list: a command ('python server.py') or a URL. Repeatable.",
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option("--store", envvar="LLM_FSM_STORE", callback=non_empty, help="Where conversations are kept: "
                 "sqlite:PATH.db (relative to this folder) or sqlite:///ABSOLUTE/PATH.db, file:DIR or file:///DIR, "
                 "redis://host:port/db, postgresql://user@host:port/db (default: SQLite under $LLM_FSM_HOME)."),
]  # fmt: skip
ConversationOption = Annotated[
    str | None, typer.Option("--conversation", "-c", help="Continue (or start) the stored conversation with this id.")
]
WaitOption = Annotated[
    float, typer.Option("--wait", min=0, help="Seconds to wait for a conversation another process is using.")
]
AllowChangedDefinitionOption = Annotated[
    bool,
    typer.Option("--allow-changed-definition", help="Continue a stored conversation even though the structure of "
                 "its definition changed since (states, transitions, conditions, keys)."),
]  # fmt: skip
StrictDefinitionOption = Annotated[
    bool,
    typer.Option("--strict-definition", help="Refuse to continue a stored conversation after any change to its "
                 "definition, an edit to a description, persona, purpose or instructions included."),
]  # fmt: skip
RecordOption = Annotated[
    Path | None, typer.Option("--record", help="Record every model call to this cassette file (JSON).")
]
ReplayOption = Annotated[
    Path | None, typer.Option("--replay", help="Answer from this cassette instead of a model (no network).")
]
ShowSecretsOption = Annotated[
    bool, typer.Option("--show-secrets", help="Show secret-looking context values (masked by default).")
]


def load_definition(path: Path) -> llm_fsm.FSMDefinition:
    """Load or exit 2, printing each problem (and each warning) as one line on stderr."""
    from llm_fsm.loader import DefinitionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DefinitionWarning)
        try:
            definition = llm_fsm.load(path)
        except DefinitionError as exc:
            for problem in exc.problems:
                typer.echo(f"error: {problem}", err=True)
            raise typer.Exit(2) from None
    for warning in caught:
        typer.echo(f"warning: {warning.message}", err=True)
    return definition


def check_readable(paths: list[Path]) -> None:
    """Exit 2 naming each path that cannot be opened as a file (missing, a folder, no permission)."""
    unreadable = []
    for path in paths:
        try:
            path.open("rb").close()
        except OSError as exc:
            unreadable.append(f"cannot read {path}: {exc.strerror or exc}")
    for message in unreadable:
        typer.echo(f"error: {message}", err=True)
    if unreadable:
        raise typer.Exit(2)


def check_writable(path: Path) -> None:
    """Exit 2 now when ``path`` could not be written later (a folder, under a file, no permission)."""
    folder = next((parent for parent in path.parents if parent.exists()), Path("."))  # the nearest that exists
    if path.is_dir():
        fail(f"cannot write {path}: it is a folder", 2)
    if not folder.is_dir():
        fail(f"cannot write {path}: {folder} is not a folder", 2)
    if not os.access(path if path.exists() else folder, os.W_OK):
        fail(f"cannot write {path}: permission denied", 2)


def write_output(path: Path, text: str, *, make_folders: bool = False) -> None:
    """Write a command's output file (and the folders it needs, if asked); exit 2 naming it when it cannot be."""
    try:
        if make_folders:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}", 2)


def check_definition_policy(allow_changed_definition: bool, strict_definition: bool) -> None:
    """A usage error (exit 2) when both options are given: one refuses every change, the other allows any."""
    if allow_changed_definition and strict_definition:
        fail(
            "--strict-definition (refuse any change to the definition) and --allow-changed-definition (continue "
            "whatever changed) contradict each other: give one of them",
            2,
        )


def load_hooks(spec: str | None) -> Hooks:
    """The ``Hooks`` object named by ``module:name`` or ``path/to/file.py:name`` (exit 2 if it cannot be)."""
    if not spec:
        return Hooks()
    try:
        return Hooks.load(spec)
    except HooksLoadError as exc:
        fail(str(exc), 2)


@dataclass(frozen=True)
class Provider:
    """How to reach the model: what ``--api-base``, ``--api-key``, ``--timeout``, ``--max-retries``,
    ``--temperature``, ``--response-format``, ``--max-tokens``, ``--tool-calling`` and ``--guided`` say."""

    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 2
    temperature: float | None = None
    response_format: str = "auto"
    max_tokens: int | None = None
    tool_calling: str = "auto"
    guided: bool = False


def make_client(
    model: str | None,
    provider: Provider,
    *,
    stream: bool = False,
    record: Path | None = None,
    replay: Path | None = None,
) -> LLMClient:
    """The model a command talks to: a cassette, scripted replies, or litellm; recorded if asked."""
    if replay is not None:
        from llm_fsm.testing.cassette import ReplayLLM

        try:
            return ReplayLLM(replay)
        except LLMError as exc:
            fail(str(exc), 2)
    client = _model(model, provider, stream)
    if record is not None:
        from llm_fsm.testing.cassette import RecordingLLM

        try:
            return RecordingLLM(client, record)  # writes the (empty) cassette now: a bad path fails here
        except LLMError as exc:
            fail(str(exc), 2)
    return client


def _model(model: str | None, provider: Provider, stream: bool) -> LLMClient:
    if not model:
        fail("no model configured: pass --model or set LLM_FSM_MODEL", 2)
    if model.startswith(SCRIPTED_PREFIX):
        from llm_fsm.testing.scripted import ScriptedLLM

        try:
            return ScriptedLLM.from_file(model[len(SCRIPTED_PREFIX) :])
        except LLMError as exc:
            fail(str(exc), 2)
    notify_retries()
    options: dict[str, Any]  # LiteLLMClient's keywords
    options = {key: str(value) if isinstance(value, StrEnum) else value for key, value in vars(provider).items()}
    if options["max_tokens"] is None:
        del options["max_tokens"]
    return LiteLLMClient(model, **options, stream=stream)


def notify_retries() -> None:
    """Show the client's retry notices on stderr, so a slow or failing provider is not silence."""
    import logging

    class Notes(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            typer.echo(f"note: {record.getMessage()}", err=True)  # the current stderr, even under CliRunner

    logger = logging.getLogger("llm_fsm.llm")
    if not any(type(h).__name__ == "Notes" for h in logger.handlers):
        logger.addHandler(Notes(logging.WARNING))


def connect_mcp(
    fsm: llm_fsm.FSMDefinition,
    definition: Path,
    hooks: Hooks,
    specs: list[str] | None,
    command: typer.Context | None = None,
) -> list[MCPServer]:
    """Start the definition's MCP servers and those of ``--mcp``, and register the tools the states
    list from them (exit 2, in one line, when one cannot be started or lacks a tool).

    Given the ``command``'s context, the servers stop when the command ends, not at interpreter exit:
    under CliRunner (the tests, an application embedding the CLI) that comes much later, and a
    server left running holds its process and thread meanwhile."""
    if not fsm.mcp_servers and not specs:
        return []
    from llm_fsm.tools.mcp import MCPError, MCPServer, connect

    try:
        servers = [MCPServer.from_spec(spec) for spec in specs or ()]
        started = connect(fsm, hooks, relative_to=definition.resolve().parent, servers=servers)
    except MCPError as exc:
        fail(str(exc), 2)
    if command is not None:
        for server in started:
            command.call_on_close(server.close)
    return started


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
        from llm_fsm.subflow_turns import changed_subflows

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
                typer.echo(f"error: {problem}", err=True)
        except FSMError as exc:
            typer.echo(f"error: {exc}", err=True)
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

    if store_url is None and conversation_id is None:  # kept for this run only, but its turns run the same way
        return open_store("memory:"), UNSTORED_ID
    store = open_store(store_url)
    if conversation_id is None:
        conversation_id = uuid.uuid4().hex[:12]
        typer.echo(f"conversation: {conversation_id} (continue it with --conversation {conversation_id})", err=True)
    return store, conversation_id


def masker(definition: llm_fsm.FSMDefinition, show_secrets: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How displays show a context: secret-looking values masked, unless --show-secrets."""
    return (lambda context: context) if show_secrets else definition.masked
