"""``llm-fsm edit FILE``: the browser editor of one definition file (:mod:`llm_fsm.editor`) on a local server.

Like ``jupyter``, it listens on 127.0.0.1 only, mints a token for the run and prints (and opens) the address
that carries it; the page edits that file and no other. The chat beside the graph talks to the definition as
edited, with ``--model simulated`` unless told otherwise: an author trying a half-drawn graph should not spend
a provider's tokens by surprise, so ``--model`` here reads no environment variable.
"""

from __future__ import annotations

import errno
import secrets
import socket
import threading
import webbrowser
from pathlib import Path
from typing import Annotated, Any

import typer

from llm_fsm.cli.main import app, fail
from llm_fsm.cli.options import (
    SIMULATED,
    HooksOption,
    ModelOptions,
    check_readable,
    complete_definitions,
    load_hooks,
    non_empty,
    with_model_options,
)

EditModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        callback=non_empty,
        help=f"The chat's model: {SIMULATED} (the default: walks the definition offline, no key), a litellm model "
        "name (e.g. openai/gpt-4o-mini), or scripted:FILE.",
    ),
]
FileArgument = Annotated[
    Path,
    typer.Argument(
        metavar="FILE", help="The definition file (a new one is created on save).", show_default=False,
        autocompletion=complete_definitions,
    ),
]  # fmt: skip
PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: a free one).")]
NoBrowserOption = Annotated[bool, typer.Option("--no-browser", help="Print the address only; do not open it.")]
HOST = "127.0.0.1"


@app.command()
@with_model_options(EditModelOption)
def edit(
    file: FileArgument,
    model: ModelOptions,
    port: PortOption = 0,
    no_browser: NoBrowserOption = False,
    hooks: HooksOption = None,
) -> None:
    """Edit a definition in the browser: a graph you draw, forms from the schema, live validation, a chat beside it.

    Serves on 127.0.0.1 with a one-time token in the address it prints (and opens); Ctrl+C stops it."""
    try:
        import uvicorn

        from llm_fsm.editor.app import create_editor_app
    except ImportError as exc:
        fail(f"edit needs FastAPI and uvicorn ({exc.name} is missing): pip install 'llm-fsm-runtime[server]'", 2)
    from llm_fsm.editor.document import EditedFile

    _check_file(file)
    registry = load_hooks(hooks) if hooks else None  # None: none given, so checks bind to none (see create_editor_app)
    chosen = ModelOptions(model.name or SIMULATED, model.provider)
    factory = _client_factory(chosen)
    listening = _listen(port)
    real_port = listening.getsockname()[1]
    token = secrets.token_urlsafe(32)
    application = create_editor_app(
        EditedFile(file), token, port=real_port, client_factory=factory, model=str(chosen.name), hooks=registry
    )
    url = f"http://{HOST}:{real_port}/?token={token}"
    typer.echo(f"Editing {file} at {url}")
    typer.echo("Ctrl+C stops the editor.", err=True)
    if not no_browser:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()  # a text browser would block
    from llm_fsm.cli.serve import log_config

    config = uvicorn.Config(
        application, log_level="warning", server_header=False, log_config=log_config(), lifespan="off"
    )
    try:
        uvicorn.Server(config).run(sockets=[listening])
    finally:
        listening.close()


def _check_file(file: Path) -> None:
    """Exit 2 in one line when ``file`` cannot be the file edited: a folder, in a folder that does not exist,
    or there and unreadable. A file that does not exist yet is a new definition."""
    if file.is_dir():
        fail(f"cannot edit {file}: it is a folder (give a definition file, e.g. {file / 'bot.json'})", 2)
    folder = file.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        fail(f"cannot edit {file}: the folder {folder} {why}", 2)
    if file.exists() or file.is_symlink():
        check_readable([file])


def _client_factory(model: ModelOptions) -> Any:
    """The chat's model for each definition tried, made as ``chat`` makes it (``--guided`` and ``--prompt-order``
    reach the simulated model too). The simulated model is made for each definition; another is checked now, so
    a bad ``scripted:FILE`` exits here in one line before the server starts, and is made anew on each start
    (scripted replies start again from the first)."""
    if not model.simulated:
        model.client()  # exits 2 in one line if these options cannot make a client
    return lambda definition: model.client(definitions=[definition])


def _listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` (0: a free port), or exit 2 saying why it cannot."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it each POST of the page waits out a 40 ms delayed ACK (Nagle),
    # which uvicorn avoids on the sockets it makes itself but not on one it is given.
    listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        listening.bind((HOST, port))
        listening.listen(128)  # connections wait in the backlog until uvicorn serves: the browser may be quicker
    except OSError as exc:
        listening.close()
        taken = exc.errno == errno.EADDRINUSE
        why = "the port is already in use: choose another with --port, or 0 for a free one" if taken else exc.strerror
        fail(f"cannot listen on {HOST}:{port}: {why}", 2)
    return listening
