"""``llm-fsm test``: run conversation tests (``*.test.json`` files), with coverage and JUnit reports."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from llm_fsm.cli.main import app, complain, definition_warnings, fail
from llm_fsm.cli.options import (
    HooksOption,
    ModelOptions,
    check_writable,
    non_empty,
    with_model_options,
    write_output,
)
from llm_fsm.cli.shown import as_text, in_markup

if TYPE_CHECKING:
    from collections.abc import Callable

    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.llm import LLMClient
    from llm_fsm.testing.conversation_tests import CaseOutcome

console = Console(highlight=False)


# test's own --model: no environment variable (a test run answers from its scripts unless asked), and "simulated"
TestModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", callback=non_empty,
        help="Answer unscripted steps with this model (litellm name, or 'simulated').",
    ),
]  # fmt: skip


@app.command()
@with_model_options(TestModelOption)
def test(
    paths: Annotated[list[Path], typer.Argument(help="Test files, or folders searched for *.test.json.")],
    model: ModelOptions,
    hooks: HooksOption = None,
    replay: Annotated[Path | None, typer.Option("--replay", help="Answer unscripted steps from this cassette.")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Run each case this many times (for real models).")] = 1,
    min_pass: Annotated[int | None, typer.Option("--min-pass", min=1, help="Runs of a case that must pass.")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write a JUnit XML report here.")] = None,
    show_coverage: Annotated[bool, typer.Option("--coverage", help="State and transition coverage.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Every step of every case, not only failures.")
    ] = False,
) -> None:
    """Run conversation tests; exit 0 only when every case passes.

    Handlers and checks come from the test file's "hooks" field, else from --hooks."""
    from llm_fsm.testing.conversation_tests import discover, failure_text, junit_xml, run_files

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}", 2)
    files = discover(paths)
    if not files:
        fail(f"no test files in {', '.join(map(str, paths))} (test files are named *.test.json)", 2)
    if min_pass is not None and min_pass > repeat:
        fail(f"--min-pass {min_pass} is more than --repeat {repeat}", 2)
    if hooks is not None and not _well_formed(hooks):  # loaded later, for the files that name no hooks
        fail(f"--hooks {hooks!r}: expected MODULE:NAME or FILE.py:NAME", 2)
    _check_test_files(files)
    if junit is not None:
        check_writable(junit)
    factory = _model_factory(model, replay)
    # --hooks is loaded only for the files that name no hooks of their own: if it cannot be, their cases fail
    with definition_warnings():  # the cases' definitions load in there: their warnings as validate writes them
        outcomes = run_files(files, factory, repeat=repeat, min_pass=min_pass, hooks=hooks)
    for outcome in outcomes:
        _print_outcome(outcome, failure_text(outcome) if not outcome.passed else None, verbose=verbose)
    failed = sum(not o.passed for o in outcomes)
    console.print(f"{len(outcomes) - failed} passed, {failed} failed")
    if show_coverage:
        _print_coverage(outcomes)
    if junit is not None:
        write_output(junit, junit_xml(outcomes))
    raise typer.Exit(1 if failed else 0)


def _print_outcome(outcome: CaseOutcome, failure: str | None, *, verbose: bool) -> None:
    """A case's line (PASS or FAIL, and its runs), its steps when it failed or ``verbose``, and ``failure``:
    why it failed (None when it passed)."""
    mark = "[green]PASS[/]" if outcome.passed else "[red]FAIL[/]"
    runs = f" ({outcome.passes}/{outcome.runs} runs)" if outcome.runs > 1 else ""
    console.print(f"{mark} {in_markup(outcome.file)}: {in_markup(outcome.name)}{runs}")
    if verbose or not outcome.passed:
        _print_steps(outcome)
    if failure is not None:
        console.print(as_text(f"     {failure}", style="red"))


def _well_formed(spec: str) -> bool:
    """``spec`` has the shape of MODULE:NAME or FILE.py:NAME (whether it loads is found out when it is needed)."""
    where, _, name = spec.rpartition(":")
    return bool(where) and name.isidentifier()


def _check_test_files(files: list[Path]) -> None:
    """Exit 2, before any case runs, printing each problem of the files that are not valid test files."""
    from llm_fsm.testing.conversation_tests import TestFileError, read

    problems = []
    for path in files:
        try:
            read(path)
        except TestFileError as exc:
            problems += exc.problems
    for problem in problems:
        complain(str(problem))
    if problems:
        raise typer.Exit(2)


def _print_steps(outcome: CaseOutcome) -> None:
    """One line per step: what the user said, where the conversation went, what the turn cost."""
    for step in outcome.steps:
        said = step.said(40)
        mark = "ok " if step.passed else "✗  "
        if step.result is None:
            console.print(as_text(f"     {mark}{step.index + 1}. {said}"))
            continue
        r = step.result
        move = f"{r.previous_state} → {r.state}" if r.transitioned else r.state
        cost = f"{r.llm_calls} call{'s' if r.llm_calls != 1 else ''}, {r.usage.total_tokens} tokens"
        console.print(as_text(f"     {mark}{step.index + 1}. {said}: {move} ({cost})", style="dim"))


def _model_factory(model: ModelOptions, replay: Path | None) -> Callable[[FSMDefinition], LLMClient] | None:
    """What answers the steps that carry no scripted reply (None: such steps fail)."""
    if replay is not None:
        cassette = model.client(replay=replay)
        return lambda definition: cassette
    if model.simulated:  # a fresh one per case, as each case starts a fresh conversation

        def simulated(definition: FSMDefinition) -> LLMClient:
            return model.client(definitions=[definition])

        return simulated
    if model.name:
        client = model.client()
        return lambda definition: client
    return None


def _print_coverage(outcomes: list[CaseOutcome]) -> None:
    from rich.table import Table

    from llm_fsm.testing.conversation_tests import coverage

    table = Table("definition", "states", "transitions", "states never reached")
    for row in coverage(outcomes):
        states = f"{len(row.covered_states)}/{len(row.states)} ({100 * len(row.covered_states) // len(row.states)}%)"
        edges = len(row.transitions) or 1
        transitions = (
            f"{len(row.covered_transitions)}/{len(row.transitions)} ({100 * len(row.covered_transitions) // edges}%)"
        )
        missing = ", ".join(sorted(row.states - row.covered_states)) or "-"
        table.add_row(as_text(row.definition.name), states, transitions, as_text(missing))  # a str cell is markup
    console.print(table)
