"""The options commands share, their shell completion, and what commands build from them.

A definition (``load_definition``), a ``Hooks`` object (``--hooks``), MCP servers (``--mcp``) and the
model: ``--model`` and the nine options of :class:`Provider`, declared once and given to a command as one
:class:`ModelOptions` by :func:`with_model_options`, which makes the client (``--record``, ``--replay``):
litellm's, scripted replies (``scripted:FILE``) or the simulated model (``simulated``, no key, no network).
Each exits with a one-line error when what was given cannot be used. The conversation a command works
on is made in :mod:`llm_fsm.cli.conversation_factory`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

import llm_fsm
from llm_fsm.cli.main import complain, definition_warnings, fail
from llm_fsm.cli.shown import shown
from llm_fsm.errors import DefinitionError, HooksLoadError, LLMError
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LiteLLMClient, LLMClient
from llm_fsm.named_files import open_file

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.tools.mcp import MCPServer

SCRIPTED_PREFIX = "scripted:"
SCRIPTED = "scripted"  # bare, in eval: each course's own scripted replies
SIMULATED = "simulated"  # the model of llm_fsm.testing.simulation: valid replies along the graph, offline
# What the error for a missing --model offers: the offline walk, a hosted model, the local model server
NO_MODEL = (
    f"no model configured: pass --model {SIMULATED} (walks the definition offline, no key), a real model such as "
    "--model openai/gpt-4o-mini, or the local model server (--model openai/smollm2 --api-base URL of "
    "'scripts/local-model start'); or set LLM_FSM_MODEL"
)


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
    from llm_fsm.definition.loader import inspect

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
        help=f"litellm model name (e.g. openai/gpt-4o-mini), {SIMULATED} (walks the definition offline, no key), "
        f"or {SCRIPTED_PREFIX}FILE for scripted replies ({SCRIPTED} alone, in eval: each course's own).",
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


class PromptOrderChoice(StrEnum):
    auto = "auto"
    recency = "recency"
    cache = "cache"


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
                      "json_schema on a server that enforces it, such as llama.cpp's; scripted replies take it too)."),
]  # fmt: skip
PromptOrderOption = Annotated[
    PromptOrderChoice,
    typer.Option("--prompt-order", envvar="LLM_FSM_PROMPT_ORDER", show_envvar=True,
                 help="Where the prompt puts the reply rules: recency (after the current state, for small local "
                      "models), cache (first, with a map of the states, so a provider's prompt cache keeps most of "
                      "each prompt) or auto (cache where cached tokens cost at most a quarter of the price)."),
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
    str | None,
    typer.Option("--conversation", "-c", help="Continue (or start) the stored conversation with this id; an id "
                 "llm-fsm serve gave continues that conversation (CLIENT@ID: that client's)."),
]  # fmt: skip
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
HistoryWindowOption = Annotated[int, typer.Option(min=0, help="Exchanges of history shown to the model.")]
MaxCorrectionsOption = Annotated[int, typer.Option(min=0, help="Corrective calls after an invalid reply.")]
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
    """Load or exit 2, printing each problem (and each warning, as ``validate`` does) as one line on stderr."""
    with definition_warnings():
        try:
            return llm_fsm.load(path)
        except DefinitionError as exc:
            for problem in exc.problems:
                complain(str(problem))
            raise typer.Exit(2) from None


def check_readable(paths: list[Path], what: str = "definition") -> None:
    """Exit 2 naming each path that cannot be opened as a(n) ``what`` file (missing, a folder, no permission,
    a FIFO or a device, over the size limit: :func:`~llm_fsm.named_files.open_file`)."""
    unreadable = []
    for path in paths:
        try:
            open_file(path, what).close()
        except OSError as exc:
            unreadable.append(f"cannot read {path}: {exc.strerror or exc}")
    for message in unreadable:
        complain(message)
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
    ``--temperature``, ``--response-format``, ``--max-tokens``, ``--tool-calling``, ``--guided`` and
    ``--prompt-order`` say.
    These defaults are the options' defaults."""

    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 2
    temperature: float | None = None
    response_format: ResponseFormat = ResponseFormat.auto
    max_tokens: int | None = None
    tool_calling: ToolCalling = ToolCalling.auto
    guided: bool = False
    prompt_order: PromptOrderChoice = PromptOrderChoice.auto


# The option that sets each field of Provider, in the order --help lists them (after --model).
_PROVIDER_OPTIONS: dict[str, Any] = {
    "api_base": ApiBaseOption,
    "api_key": ApiKeyOption,
    "timeout": TimeoutOption,
    "max_retries": MaxRetriesOption,
    "temperature": TemperatureOption,
    "response_format": ResponseFormatOption,
    "max_tokens": MaxTokensOption,
    "tool_calling": ToolCallingOption,
    "guided": GuidedOption,
    "prompt_order": PromptOrderOption,
}


@dataclass(frozen=True)
class ModelOptions:
    """The model a command talks to (``--model``) and how to reach it (:class:`Provider`)."""

    name: str | None = None
    provider: Provider = Provider()

    @property
    def simulated(self) -> bool:
        """``--model simulated``: the simulated model of the command's definitions."""
        return self.name == SIMULATED

    def client(
        self,
        *,
        stream: bool = False,
        record: Path | None = None,
        replay: Path | None = None,
        definitions: Sequence[FSMDefinition] = (),
    ) -> LLMClient:
        """:func:`make_client` with these options."""
        return make_client(
            self.name, self.provider, stream=stream, record=record, replay=replay, definitions=definitions
        )


Command = TypeVar("Command", bound=Callable[..., Any])


def with_model_options(model_option: Any = ModelOption) -> Callable[[Command], Command]:
    """Declare ``--model`` and the ten :class:`Provider` options on a command, which receives them as one
    :class:`ModelOptions` in its parameter annotated so; ``model_option`` replaces the usual ``--model``.

    Typer reads a command's options from its signature, one parameter each, and cannot expand a dataclass
    into options. So the command declares one ``ModelOptions`` parameter, and this decorator shows typer a
    signature where the eleven options stand in its place (where each command's --help has always listed
    them); the call collects them back into the one object."""

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        parameters = list(signature.parameters.values())
        at, bundle = next((i, p.name) for i, p in enumerate(parameters) if p.annotation is ModelOptions)
        keyword = inspect.Parameter.KEYWORD_ONLY  # typer passes every value by name
        defaults = Provider()
        options = [inspect.Parameter("model", keyword, default=None, annotation=model_option)]
        options += [
            inspect.Parameter(name, keyword, default=getattr(defaults, name), annotation=option)
            for name, option in _PROVIDER_OPTIONS.items()
        ]
        after = [parameter.replace(kind=keyword) for parameter in parameters[at + 1 :]]
        shown = signature.replace(parameters=[*parameters[:at], *options, *after])

        @functools.wraps(command)
        def with_options(**given: Any) -> Any:
            provider = Provider(**{name: given.pop(name) for name in _PROVIDER_OPTIONS})
            given[bundle] = ModelOptions(given.pop("model"), provider)  # "model" may be the bundle's own name
            return command(**given)

        # What typer reads: inspect.signature stops at __signature__, typing.get_type_hints reads __annotations__
        # (the real objects, not the strings of "from __future__ import annotations").
        with_options.__signature__ = shown  # type: ignore[attr-defined]  # functions take it; typeshed omits it
        with_options.__annotations__ = {p.name: p.annotation for p in shown.parameters.values()}
        return with_options  # type: ignore[return-value]  # the same call, with the bundle given by typer

    return decorate


def make_client(
    model: str | None,
    provider: Provider,
    *,
    stream: bool = False,
    record: Path | None = None,
    replay: Path | None = None,
    definitions: Sequence[FSMDefinition] = (),
) -> LLMClient:
    """The model a command talks to: a cassette, scripted, simulated (``definitions``), litellm; recorded if asked."""
    if replay is not None:
        from llm_fsm.testing.cassette import ReplayLLM

        try:
            return ReplayLLM(replay)
        except LLMError as exc:
            fail(str(exc), 2)
    client = _model(model, provider, stream, definitions)
    if not isinstance(client, LiteLLMClient):
        # scripted or simulated replies: the prompts (and guided requests) a real model would get are made and tested
        if provider.prompt_order != "auto":
            client.prompt_order = str(provider.prompt_order)  # type: ignore[attr-defined]  # Scripted/SimulatedLLM's
        client.guided = provider.guided  # type: ignore[attr-defined]  # Conversation reads getattr(llm, "guided")
    if record is not None:
        from llm_fsm.testing.cassette import RecordingLLM

        try:
            return RecordingLLM(client, record)  # writes the (empty) cassette now: a bad path fails here
        except LLMError as exc:
            fail(str(exc), 2)
    return client


def _model(model: str | None, provider: Provider, stream: bool, definitions: Sequence[FSMDefinition]) -> LLMClient:
    if not model:
        fail(NO_MODEL, 2)
    if model == SIMULATED:
        # no litellm import: it answers in-process, as `llm-fsm test` has always made it (seed 0; the provider
        # options are about reaching a provider, and it has none). A command that has no definition cannot use it.
        from llm_fsm.testing.simulation import SimulatedLLM, SimulatedModels

        if not definitions:
            fail(f"--model {SIMULATED} walks a definition, and this command gives it none", 2)
        return SimulatedLLM(definitions[0]) if len(definitions) == 1 else SimulatedModels(definitions)
    if model.rstrip(":") == SCRIPTED:  # not a litellm name: the replies' file is missing
        fail(f"--model {SCRIPTED} needs its replies: {SCRIPTED_PREFIX}FILE (a JSON list of replies)", 2)
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
            typer.echo(f"note: {shown(record.getMessage())}", err=True)  # the current stderr, even under CliRunner

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
