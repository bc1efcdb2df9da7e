"""The ``llm-fsm`` Typer application, its ``--version``, the console script, and how commands fail.

Commands never print a traceback: expected failures print one ``error:`` line per problem on
stderr and exit with 2 (usage or definition) or 1 (the model or provider failed). Click's own
usage errors (an option's bad value, a missing argument, an unknown option) are such lines too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

import llm_fsm

# The base of click's errors, found by name: recent typer vendors click (typer._click), older typer uses click.
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


@contextmanager
def _usage_errors() -> Iterator[None]:
    """Click's usage errors as one ``error:`` line naming the command, instead of its boxed usage text."""
    try:
        yield
    except _CLICK_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            raise  # not an error: the command's help, which typer shows as usual
        context = getattr(exc, "ctx", None)
        where = f"{context.command_path}: " if context is not None else ""
        fail(where + " ".join(exc.format_message().split()), exc.exit_code)  # type: ignore[attr-defined]  # a ClickException, found at run time


class _Commands(TyperGroup):
    """The app's command group: parsing its arguments and a command's goes through :func:`_usage_errors`."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _usage_errors():  # a command's (or a sub-group's) arguments are parsed here
            return super().invoke(ctx)


app = typer.Typer(
    name="llm-fsm",
    help="Run conversational state machines defined in JSON.",
    cls=_Commands,
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
