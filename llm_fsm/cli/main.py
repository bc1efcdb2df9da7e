"""The ``llm-fsm`` Typer application, its ``--version``, the console script, and how commands fail.

Commands never print a traceback: expected failures print one ``error:`` line per problem on
stderr and exit with 2 (usage or definition) or 1 (the model or provider failed).
"""

from __future__ import annotations

import os
from typing import Annotated, NoReturn

import typer

import llm_fsm

app = typer.Typer(
    name="llm-fsm",
    help="Run conversational state machines defined in JSON.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"llm-fsm {llm_fsm.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Run conversational state machines defined in JSON."""


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def entry_point() -> None:
    """The console script: ``llm-fsm``."""
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    app()
