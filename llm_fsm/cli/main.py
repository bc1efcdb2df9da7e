"""The ``llm-fsm`` Typer application, its ``--version``, the console script, and how commands fail and warn.

Commands never print a traceback: expected failures print one ``error:`` line per problem on
stderr and exit with 2 (usage or definition) or 1 (the model or provider failed). Click's own
usage errors (an option's bad value, a missing argument, an unknown option) are such lines too.
A definition's warnings are lines as ``validate`` writes them (:func:`definition_warnings`).
SIGTERM ends a command as an exception does (exit 143), so that what it was doing is cleaned up.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

import llm_fsm
from llm_fsm.cli.shown import shown

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
    context_settings={"help_option_names": ["-h", "--help"]},  # -h, as people type it
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


def complain(message: str) -> None:
    """One ``error:`` line on stderr. Its text is :func:`~llm_fsm.cli.shown.shown`: a message may quote
    what a model, a user or a file wrote, control characters and all."""
    typer.echo(f"error: {shown(message)}", err=True)


def fail(message: str, code: int) -> NoReturn:
    """:func:`complain`, then exit with ``code``."""
    complain(message)
    raise typer.Exit(code)


@contextmanager
def definition_warnings() -> Iterator[None]:
    """Print each ``DefinitionWarning`` issued inside on stderr as one line, as ``llm-fsm validate`` does
    (``file:line:col: warning[code] path: message (hint: ...)``), once each however often the file loads;
    other warnings go where they went.

    Left to Python, a warning reads ``.../scorecard.py:80: DefinitionWarning: ...`` with our source line under
    it, and only the first time in a process; the commands that load definitions inside the library (``eval``'s
    courses, ``test``'s cases) load them in here."""
    from llm_fsm.definition.loader import DefinitionWarning

    printed: set[str] = set()
    with warnings.catch_warnings():  # restores the filters and showwarning when it ends
        warnings.simplefilter("always", DefinitionWarning)  # ours to show once: not Python's once per location
        others = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if not isinstance(message, DefinitionWarning):
                others(message, category, *args, **kwargs)
                return
            line = _warning_line(message)
            if line not in printed:
                printed.add(line)
                typer.echo(shown(line), err=True)

        warnings.showwarning = show
        yield


def _warning_line(warning: Warning) -> str:
    """A definition's warning as ``validate`` writes it (its code and hint: the warning's problem has them)."""
    problem = getattr(warning, "problem", None)
    if problem is None:
        return f"warning: {warning}"
    from llm_fsm.authoring.analysis import Diagnostic

    p = problem
    return str(Diagnostic("warning", p.code, p.path, p.line, p.column, p.message, p.hint, p.source))


def entry_point() -> None:
    """The console script: ``llm-fsm``."""
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    _exit_on_sigterm()
    app()


def _exit_on_sigterm() -> None:
    """Make SIGTERM (what ``kill``, systemd and docker send) raise ``SystemExit(143)``, unless something else
    handles it already.

    Killed by the signal's default action, a command would run no ``finally`` block: a save stopped between
    writing its temporary file and renaming it would leave the file, MCP servers would not be told to stop.
    As an exception, the command unwinds as on Ctrl-C. A second SIGTERM, while it unwinds, ends it at once."""

    def stop(number: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + number)

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, stop)
