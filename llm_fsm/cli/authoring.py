"""Authoring commands: ``validate`` (static analysis), ``graph`` (Mermaid or DOT), ``schema`` and ``paths``.

They work on files alone and never import litellm, so they start fast and run offline. ``validate``
exits 1 when a file has errors (or warnings, with ``--strict``); ``graph`` exits 2 on a definition
that does not load; usage errors exit 2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llm_fsm.cli.main import app, complain, fail
from llm_fsm.cli.options import (
    HooksOption,
    check_readable,
    complete_definitions,
    load_definition,
    load_hooks,
    write_output,
)
from llm_fsm.errors import DefinitionError

if TYPE_CHECKING:
    from rich.text import Text

    from llm_fsm.authoring.analysis import Diagnostic


class ReportFormat(StrEnum):
    text = "text"
    json = "json"


class GraphFormat(StrEnum):
    mermaid = "mermaid"
    dot = "dot"


FilesArgument = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILE",
        help="Definition files to check, or folders: the *.json files in them (test files, *.test.json, left out).",
        show_default=False,
        autocompletion=complete_definitions,
    ),
]
DefinitionArgument = Annotated[
    Path,
    typer.Argument(
        metavar="DEFINITION", help="The definition JSON file.", show_default=False, autocompletion=complete_definitions
    ),
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of standard output.")
]


# ---------------------------------------------------------------- validate


@app.command()
def validate(
    files: FilesArgument,
    output_format: Annotated[ReportFormat, typer.Option("--format", "-f", help="Report format.")] = ReportFormat.text,
    strict: Annotated[
        bool, typer.Option("--strict", help="Unknown fields are errors, and any warning fails the check.")
    ] = False,
) -> None:
    """Check definition files: every load error and design warning, with file:line:column and a hint."""
    paths, tests = _definition_files(files)
    # a file that cannot be read is a usage error; what is in the files (or a folder without any) is the report
    check_readable([path for path in paths if not path.is_dir()])
    results = [(str(path), _analyze(path, strict)) for path in paths]
    if output_format is ReportFormat.json:
        diagnostics = [d.to_dict() for _, found in results for d in found]
        typer.echo(json.dumps(diagnostics, indent=2, ensure_ascii=False))
    else:
        _print_report(results, strict, tests)
    raise typer.Exit(1 if _failed([d for _, found in results for d in found], strict) else 0)


def _definition_files(paths: Sequence[Path]) -> tuple[list[Path], int]:
    """The files named, with each folder replaced by the ``*.json`` files in it (not in its subfolders,
    where scripts and test files live), and how many test files (``*.test.json``) were left out."""
    files: list[Path] = []
    tests = 0
    for path in paths:
        inside = sorted(path.glob("*.json")) if path.is_dir() else [path]
        definitions = [file for file in inside if not file.name.endswith(".test.json")]
        tests += len(inside) - len(definitions)
        files += definitions or [path]  # a folder without definitions is reported as one
    return files, tests


def _analyze(path: Path, strict: bool) -> list[Diagnostic]:
    from llm_fsm.authoring.analysis import Diagnostic, analyze

    if path.is_dir():
        message, hint = "no definition files (*.json) in this folder", "test files (*.test.json) are not definitions"
        return [Diagnostic("error", "no_definitions", "", None, None, message, hint, str(path))]
    try:
        return analyze(path, strict=strict)
    except Exception as exc:  # a bug in the analysis must not end the run with a traceback
        message = f"could not analyze the file: {type(exc).__name__}: {exc}"
        return [Diagnostic("error", "internal", "", None, None, message, "please report this", str(path))]


def _failed(diagnostics: Sequence[Diagnostic], strict: bool) -> bool:
    return any(d.severity == "error" for d in diagnostics) or (strict and bool(diagnostics))


def _print_report(results: Sequence[tuple[str, Sequence[Diagnostic]]], strict: bool, tests: int) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    for file, diagnostics in results:
        header = Text(file, style="bold")
        header.append("  ")
        header.append(_counts(diagnostics) if diagnostics else "ok", style=_style(diagnostics))
        console.print(header)
        for diagnostic in diagnostics:
            console.print(_line(diagnostic, file))
            if diagnostic.hint:
                console.print(Text(f"    hint: {diagnostic.hint}", style="dim"))
    every = [d for _, diagnostics in results for d in diagnostics]
    checked = sum(not Path(file).is_dir() for file, _ in results)
    summary = f"{checked} file{'s' if checked != 1 else ''} checked"
    if tests:
        summary += f" ({tests} test file{'s' if tests != 1 else ''} skipped)"
    summary += f": {_counts(every, zero=True)}"
    if strict and every and not any(d.severity == "error" for d in every):
        summary += " (--strict: warnings fail the check)"
    console.print(Text(summary, style=_style(every)))


def _line(diagnostic: Diagnostic, file: str) -> Text:
    from rich.text import Text

    where = diagnostic.file or file
    if diagnostic.line is not None:
        where += f":{diagnostic.line}:{diagnostic.column}"
    text = Text(f"  {where}: ")
    text.append(f"{diagnostic.severity}[{diagnostic.code}]", style=_style([diagnostic]))
    text.append(f" {diagnostic.path}: " if diagnostic.path else " ")
    text.append(diagnostic.message)
    return text


def _counts(diagnostics: Sequence[Diagnostic], zero: bool = False) -> str:
    errors = sum(d.severity == "error" for d in diagnostics)
    warnings = len(diagnostics) - errors
    parts = [(errors, "error"), (warnings, "warning")]
    return ", ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in parts if n or zero)


def _style(diagnostics: Sequence[Diagnostic]) -> str:
    if any(d.severity == "error" for d in diagnostics):
        return "bold red"
    return "yellow" if diagnostics else "green"


# ---------------------------------------------------------------- graph, schema and paths


@app.command()
def graph(
    definition: DefinitionArgument,
    output_format: Annotated[GraphFormat, typer.Option("--format", "-f", help="Diagram language.")] = (
        GraphFormat.mermaid
    ),
    output: OutputOption = None,
) -> None:
    """Draw the state graph as Mermaid (stateDiagram-v2) or Graphviz DOT text."""
    try:
        fsm = load_definition(definition)
    except (RecursionError, ValueError) as exc:  # JSON the loader cannot even parse
        fail(f"{definition}: invalid JSON: {exc}", 2)
    from llm_fsm.authoring.diagram import to_dot, to_mermaid

    _write(to_dot(fsm) if output_format is GraphFormat.dot else to_mermaid(fsm), output)


@app.command()
def schema(
    output: OutputOption = None,
    tests: Annotated[bool, typer.Option("--tests", help="The schema of test files (*.test.json) instead.")] = False,
) -> None:
    """Print the JSON Schema of definition files (for editors: set "$schema" in your file to its path)."""
    _write(schema_text(tests=tests), output)


def schema_text(*, tests: bool = False) -> str:
    """The JSON Schema as written to ``schema/fsm.schema.json`` (or ``fsm-test.schema.json``)."""
    if tests:
        from llm_fsm.testing.conversation_tests import json_schema as test_schema

        return json.dumps(test_schema(), indent=2, ensure_ascii=False) + "\n"
    from llm_fsm.definition.json_schema import json_schema

    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def _write(text: str, output: Path | None) -> None:
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_output(output, text)


@app.command()
def paths(
    definition: DefinitionArgument,
    write_tests: Annotated[
        Path | None, typer.Option("--write-tests", help="Write a test-file skeleton that walks the paths.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the simulated model's choices.")] = 0,
    hooks: HooksOption = None,
) -> None:
    """The shortest path to each terminal state (and through every state they miss).

    With --write-tests and --hooks, the handlers run while the paths are walked, and the test file
    names the same hooks."""
    from llm_fsm.authoring.paths import covering_paths
    from llm_fsm.testing.skeleton import PathNotFollowed, skeleton

    fsm = load_definition(definition)
    registry = load_hooks(hooks) if hooks else None
    for path in covering_paths(fsm):
        typer.echo(" → ".join(path))
    if write_tests is not None:
        folder = write_tests.parent or Path(".")
        spec = None if hooks is None else _hooks_from(hooks, folder)
        where = {"hooks_spec": spec, "schema": _test_schema_from(folder)}
        try:
            document = skeleton(fsm, _relative(definition, folder), seed=seed, hooks=registry, **where)
        except DefinitionError as exc:  # handlers or checks the hooks do not register
            for problem in exc.problems:
                complain(f"{definition}: {problem}")
            fail(f"nothing written: {f'{hooks} lacks them' if hooks else 'pass the hooks with --hooks MODULE:NAME'}", 2)
        except PathNotFollowed as exc:
            for reason in exc.reasons:
                complain(str(reason))
            fail(f"the simulated model cannot follow every path: nothing written to {write_tests}", 1)
        write_output(write_tests, json.dumps(document, indent=2, ensure_ascii=False) + "\n", make_folders=True)
        typer.echo(f"wrote {len(document['cases'])} case(s) to {write_tests}", err=True)


# The test-file schema of a checkout (the folder above the package); an installed package has none.
_TEST_SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "fsm-test.schema.json"


def _test_schema_from(folder: Path) -> str | None:
    """The ``"$schema"`` of a test file written in ``folder``: the checkout's test-file schema, relative
    to the folder, when there is one; else None (the file then names none rather than a wrong path)."""
    return _relative(_TEST_SCHEMA, folder) if _TEST_SCHEMA.is_file() else None


def _hooks_from(spec: str, folder: Path) -> str:
    """``spec`` as the test file in ``folder`` names it: a ``FILE.py`` relative to that folder."""
    where, _, name = spec.rpartition(":")
    return f"{_relative(Path(where), folder)}:{name}" if where.endswith(".py") else spec


def _relative(target: Path, start: Path | str) -> str:
    """``target`` as the test file will name it: relative to the folder the file is written in."""
    return os.path.relpath(target.resolve(), Path(start).resolve())
