"""``llm-fsm serve``: the HTTP API (:mod:`llm_fsm.server`) on uvicorn, for definitions given as files or folders."""

from __future__ import annotations

import dataclasses
import errno
import functools
import ipaddress
import os
import socket
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
import typer

from llm_fsm.cli.main import app, complain, fail
from llm_fsm.cli.options import (
    HistoryWindowOption,
    HooksOption,
    MaxCorrectionsOption,
    ModelOptions,
    StoreOption,
    check_readable,
    complete_definitions,
    connect_mcp,
    load_definition,
    load_hooks,
    with_model_options,
)
from llm_fsm.errors import DefinitionError, StoreError

if TYPE_CHECKING:
    import llm_fsm


class BusyPolicy(StrEnum):
    queue = "queue"
    reject = "reject"


DefinitionsArgument = Annotated[
    list[Path],
    typer.Argument(
        help="Definition files, or folders: the *.json files in them (*.test.json left out).",
        show_default=False,
        autocompletion=complete_definitions,
    ),
]
HostOption = Annotated[
    str, typer.Option("--host", envvar="LLM_FSM_HOST", help="Address to listen on (non-loopback needs tokens).")
]
PortOption = Annotated[int, typer.Option("--port", envvar="LLM_FSM_PORT", min=1, max=65535)]
TokensFileOption = Annotated[
    Path | None,
    typer.Option(
        "--tokens-file",
        envvar="LLM_FSM_TOKENS_FILE",
        help="Bearer tokens, one per line: TOKEN or NAME:TOKEN (one client each). Also: $LLM_FSM_SERVER_TOKENS.",
    ),
]
BusyOption = Annotated[
    BusyPolicy,
    typer.Option(
        "--busy",
        envvar="LLM_FSM_BUSY",
        help="A request on a conversation another turn holds: queue (wait up to --wait s, then 409) or reject "
        "(409 at once).",
    ),
]
QueueWaitOption = Annotated[
    float, typer.Option("--wait", min=0, help="Seconds a queued request waits for its conversation.")
]
MaxBodyOption = Annotated[int, typer.Option("--max-body", min=256, help="Largest request body in bytes (larger: 413).")]
CorsOriginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--cors-origin",
        callback=lambda values: [_origin(v) for v in values or ()],
        help="Allow this browser origin, e.g. https://app.example (CORS is off without one). Repeatable.",
    ),
]
UnmaskedOption = Annotated[bool, typer.Option("--show-secrets", help="Return secret-looking context values unmasked.")]
WorkersOption = Annotated[
    int,
    typer.Option(
        "--workers",
        envvar="LLM_FSM_WORKERS",
        min=1,
        help="Worker processes sharing the port (each a copy of the app). More than one needs a store they "
        "share: sqlite: on one host, redis:// or postgresql:// across hosts.",
    ),
]


@app.command()
@with_model_options()
def serve(
    ctx: typer.Context,
    definitions: DefinitionsArgument,
    model: ModelOptions,
    history_window: HistoryWindowOption = 6,
    max_corrections: MaxCorrectionsOption = 1,
    hooks: HooksOption = None,
    store: StoreOption = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    tokens_file: TokensFileOption = None,
    busy: BusyOption = BusyPolicy.queue,
    wait: QueueWaitOption = 30.0,
    max_body: MaxBodyOption = 64 * 1024,
    cors_origin: CorsOriginOption = None,
    show_secrets: UnmaskedOption = False,
    workers: WorkersOption = 1,
) -> None:
    """Serve definitions over HTTP: create conversations, send messages, stream turns (SSE), resume, delete.

    A web page at / (chat, graph, context, approvals), OpenAPI docs at /docs. Without tokens the server
    listens on the loopback interface only."""
    try:
        import uvicorn
    except ImportError:
        fail("serve needs FastAPI and uvicorn (uvicorn is missing): pip install 'llm-fsm-runtime[server]'", 2)
    # ctx.params holds every option by name, --model as its text: the settings take the ten as one ModelOptions
    named = {field.name: ctx.params[field.name] for field in dataclasses.fields(ServeSettings)}
    settings = ServeSettings(**named | {"model": model})
    application, tokens, names = build(settings, ctx)
    _check_address(host, port, tokens)
    auth = f"{len(tokens)} token(s)" if tokens else "no tokens: loopback only, no authentication"
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    served = f"serving {names} on http://{shown}:{port} ({auth}; busy: {busy.value}; page: /, docs: /docs"
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "info",
        "server_header": False,
        "log_config": log_config(),
    }
    if workers == 1:
        typer.echo(f"{served})", err=True)
        uvicorn.run(application, **options)
        return
    _hand_over(application, workers, settings)
    typer.echo(f"{served}; {workers} worker processes)", err=True)
    uvicorn.run(f"{__name__}:worker_app", factory=True, workers=workers, **options)


def _check_address(host: str, port: int, tokens: dict[str, str]) -> None:
    """Exit 2 when the server may not listen on ``host`` (no tokens, not loopback) or cannot listen there."""
    from llm_fsm.server.auth import TOKENS_VARIABLE

    if not tokens and not _loopback(host):
        fail(
            f"no tokens configured, so the server listens on the loopback interface only, not {host}: give "
            f"--tokens-file or set {TOKENS_VARIABLE}",
            2,
        )
    can_listen(host, port)


def _hand_over(application: Any, workers: int, settings: ServeSettings) -> None:
    """Before ``workers`` processes start: close what this process opened (each worker opens its own store
    and MCP servers), refuse a store they cannot share, and leave them the settings to build their apps from."""
    store_in_use = application.state.service.store
    store_in_use.close()
    for server in application.state.service.mcp_servers:
        server.close()
    if not store_in_use.shared:
        fail(
            f"--workers {workers} needs a store the worker processes share, and {store_in_use.url} keeps "
            "conversations inside one process: give --store sqlite:PATH (one host), redis://... or postgresql://...",
            2,
        )
    os.environ[SETTINGS_VARIABLE] = _settings_json().dump_json(settings).decode()


SETTINGS_VARIABLE = "LLM_FSM_SERVE_SETTINGS"


def can_listen(host: str, port: int) -> None:
    """Exit 2 with one line if uvicorn could not listen on ``host:port`` (taken, not this machine's address,
    a privileged port): uvicorn would log a traceback-like error and exit 3, after the banner."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn chooses
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "the port is already in use: choose another with --port" if taken else str(exc.strerror).lower()
            fail(f"cannot listen on {f'[{host}]' if ':' in host else host}:{port}: {why}", 2)


def log_config() -> dict[str, Any]:
    """uvicorn's logging, plus the runtime's own loggers (``llm_fsm``, warnings and up) on the same stderr: what
    the API tells a client only in kind (a provider's answer, a store failure, a handler's traceback) is here.
    Without it they would go nowhere: the package gives its logger a NullHandler, as a library should."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["llm_fsm"] = {"handlers": ["default"], "level": "WARNING", "propagate": False}
    return config


@dataclasses.dataclass
class ServeSettings:
    """Every option of ``serve`` that shapes the app (not where it listens): a worker process rebuilds it from them."""

    definitions: list[Path]
    model: ModelOptions
    history_window: int
    max_corrections: int
    hooks: str | None
    store: str | None
    tokens_file: Path | None
    busy: BusyPolicy
    wait: float
    max_body: int
    cors_origin: list[str] | None
    show_secrets: bool


def build(settings: ServeSettings, command: typer.Context | None = None) -> tuple[Any, dict[str, str], str]:
    """The app, its tokens and the names of the definitions it serves; exit 2 with ``error:`` lines if it cannot.

    The MCP servers it starts stop when the ``command`` ends, or else (a worker's app) at exit."""
    try:
        from llm_fsm.server import create_app
    except ImportError as exc:
        fail(f"serve needs FastAPI and uvicorn ({exc.name} is missing): pip install 'llm-fsm-runtime[server]'", 2)
    s = settings
    tokens = _tokens(s.tokens_file)
    registry = load_hooks(s.hooks)
    fsms: list[llm_fsm.FSMDefinition] = []
    servers = []
    for path in _definition_files(s.definitions):
        fsm = load_definition(path)
        servers += connect_mcp(fsm, path, registry, None, command)
        fsms.append(fsm)
    llm = s.model.client(definitions=fsms)  # astream streams whatever it is told: a message's reply comes whole
    from llm_fsm.llm import LiteLLMClient

    if isinstance(llm, LiteLLMClient):
        llm.litellm  # noqa: B018 (imports litellm now, seconds, before /health answers: not in a user's first turn)
    from llm_fsm.turn.prompt import PromptBuilder, PromptSettings

    builder = PromptBuilder(settings=PromptSettings(history_window=s.history_window))
    try:
        application = create_app(
            fsms,
            llm,
            hooks=registry,
            store=s.store,
            tokens=tokens,
            busy=s.busy.value,
            wait=s.wait,
            max_body=s.max_body,
            cors_origins=s.cors_origin or (),
            show_secrets=s.show_secrets,
            conversation_options={"max_corrections": s.max_corrections, "prompt": builder},
            mcp_servers=servers,
        )
    except DefinitionError as exc:
        for problem in exc.problems:
            complain(str(problem))
        raise typer.Exit(2) from None
    except (StoreError, ValueError) as exc:
        fail(str(exc), 2)
    return application, tokens, ", ".join(f.name for f in fsms)


def _tokens(tokens_file: Path | None) -> dict[str, str]:
    """The bearer tokens of ``--tokens-file``, else of $LLM_FSM_SERVER_TOKENS (exit 2 if they cannot be read)."""
    from llm_fsm.server.auth import TOKENS_VARIABLE, TokenError, tokens_from_file, tokens_from_text

    try:
        return tokens_from_file(tokens_file) if tokens_file else tokens_from_text(os.environ.get(TOKENS_VARIABLE, ""))
    except TokenError as exc:
        fail(str(exc), 2)


def worker_app() -> Any:
    """The app of one ``serve --workers N`` process (uvicorn calls it in each): as the command built it."""
    try:
        settings = _settings_json().validate_json(os.environ[SETTINGS_VARIABLE])
    except (KeyError, pydantic.ValidationError) as exc:
        raise RuntimeError(f"${SETTINGS_VARIABLE} does not hold the settings of llm-fsm serve: {exc}") from None
    return build(settings)[0]


@functools.cache
def _settings_json() -> pydantic.TypeAdapter[ServeSettings]:
    return pydantic.TypeAdapter(ServeSettings)


def _origin(value: str) -> str:
    """A browser origin: ``*``, or ``http(s)://host[:port]`` with nothing after."""
    from urllib.parse import urlsplit

    if value == "*":
        return value
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
        raise typer.BadParameter(f"{value!r} is not an origin: write scheme://host[:port], e.g. https://app.example")
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _definition_files(paths: list[Path]) -> list[Path]:
    """The files named, each folder replaced by its ``*.json`` files (not test files); exit 2 if one cannot be read."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.json") if not p.name.endswith(".test.json"))
            if not inside:
                fail(f"{path}: no definition files (*.json) in this folder", 2)
            files += inside
        else:
            files.append(path)
    check_readable(files)
    return files
