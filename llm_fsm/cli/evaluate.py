"""``llm-fsm eval``: a scorecard for a model on definitions whose course is known.

The figures and how courses are made: :mod:`llm_fsm.testing.scorecard`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from llm_fsm.cli.main import app, definition_warnings, fail
from llm_fsm.cli.options import (
    SCRIPTED,
    SCRIPTED_PREFIX,
    ModelOptions,
    check_writable,
    with_model_options,
    write_output,
)
from llm_fsm.cli.shown import as_text

if TYPE_CHECKING:
    from llm_fsm.testing.scorecard import Course, CourseScore

console = Console(highlight=False)
progress = Console(highlight=False, stderr=True)  # a line per course played: not the card, which goes to stdout

# eval's own --model: the simulated model follows no user, so it is not offered (and refused if given)
EvalModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", envvar="LLM_FSM_MODEL", show_envvar=True,
        help=f"litellm model name (e.g. openai/gpt-4o-mini), {SCRIPTED_PREFIX}FILE for scripted replies, or "
        f"{SCRIPTED} alone: each course's own scripts/NAME.json.",
    ),
]  # fmt: skip


def _check_arguments(paths: list[Path], model: ModelOptions, scripts: Path | None) -> None:
    """Exits (code 2) on paths that do not exist, a missing or simulated model, a bad --scripts folder,
    or a scripted model naming no file."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}", 2)
    if not model.name:
        fail("eval needs a model: --model NAME (or LLM_FSM_MODEL)", 2)
    if model.simulated:  # it follows no user: its score would measure nothing about a model
        fail("eval scores how a model follows the courses' users; the simulated model reads none: give a real one", 2)
    if scripts is not None and not scripts.is_dir():
        why = "not a folder (it holds NAME.txt and NAME.json)" if scripts.exists() else "no such folder"
        fail(f"--scripts {scripts}: {why}", 2)
    if model.name.rstrip(":") == SCRIPTED and model.name != SCRIPTED:
        fail(f"--model {model.name} names no file: {SCRIPTED_PREFIX}FILE, or {SCRIPTED} alone for each course's own", 2)


@app.command("eval")
@with_model_options(EvalModelOption)
def evaluate(
    paths: Annotated[
        list[Path], typer.Argument(help="Definitions, or folders of them (each needs scripts/NAME.txt and .json).")
    ],
    model: ModelOptions,
    scripts: Annotated[
        Path | None, typer.Option("--scripts", help="Folder of NAME.txt and NAME.json (default: scripts/ beside each).")
    ] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Play every course this many times (for variance).")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the scorecard as JSON here.")] = None,
) -> None:
    """Score a model: the turns that reach the state a scripted run reaches, valid first replies,
    calls, tokens and time per turn, refusals by kind. --model scripted (no file) plays each course with its
    own scripts/NAME.json: the whole folder checked offline, every turn reached."""
    from llm_fsm.testing.scorecard import as_json, run

    _check_arguments(paths, model, scripts)
    own = model.name == SCRIPTED  # bare: every course's own scripts/NAME.json
    courses = _courses(paths, scripts)
    if json_out is not None:
        check_writable(json_out)
        if not _a_scorecard(json_out):  # a definition, a script, replies: what the scorecard was made from
            fail(f"--json {json_out}: the file exists and is not a scorecard eval wrote: not replaced", 2)
    if own:  # each course played by its own scripted replies: the folder checked offline
        runs = run(courses, lambda each: each.scripted(), repeat=repeat, on_score=_progress)
    else:
        model.client()  # a bad model or option fails here, before any course starts
        runs = run(courses, lambda _: model.client(), repeat=repeat, on_score=_progress)
    if json_out is not None:  # first: the table may go to a pipe that closes (| head) before it is printed
        write_output(json_out, as_json(runs) + "\n", make_folders=True)
    _print(runs)
    failed = sum(t.error is not None for scores in runs for score in scores for t in score.turns)
    if failed:  # the card is printed, but a run the model could not finish is not a score
        fail(f"{failed} model call(s) failed: see 'stopped:' above", 1)


def _courses(paths: list[Path], scripts: Path | None) -> list[Course]:
    """The courses of the definitions ``paths`` name, or that their folders hold. In a folder, a JSON file with no
    course at all (a scorecard saved there, a settings file) is passed over with a note; every other problem is
    found, in every file, before eval stops on them (exit 2). Lines and replies a course never plays are noted."""
    from llm_fsm.errors import FSMError
    from llm_fsm.testing.scorecard import course

    # (file, found in a folder): a file named on the command line must be a course
    files = [(f, p.is_dir()) for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    files = [(f, found) for f, found in files if not f.name.endswith(".test.json")]
    once: dict[Path, tuple[Path, bool]] = {}  # each file once, where it first comes; named, it must be a course
    for file, found in files:
        first = once.setdefault(file.resolve(), (file, found))
        once[file.resolve()] = (first[0], first[1] and found)
    files = list(once.values())
    courses, problems = [], []
    with definition_warnings():  # course() loads the definition: its warnings as validate writes them
        for file, found in files:
            folder = scripts if scripts is not None else file.parent / "scripts"
            if found and not any((folder / f"{file.stem}.{ext}").is_file() for ext in ("txt", "json")):
                typer.echo(f"note: {file}: no course ({folder / file.stem}.txt and .json): passed over", err=True)
                continue
            try:
                courses.append(course(file, scripts))
            except FSMError as exc:
                problems.append(str(exc).strip())
    if problems:
        fail("\n".join(problems), 2)
    if not courses:
        fail(f"no courses in {', '.join(map(str, paths))} (each needs scripts/NAME.txt and NAME.json)", 2)
    for each in courses:  # what the author wrote that the course does not play
        last = each.expected[-1]
        if each.unplayed:
            why = f"the scripted run {'ended' if each.definition.states[last].terminal else 'paused'} in '{last}'"
            lines = f"{_numbers(each.unplayed)} of {each.name}.txt {'is' if len(each.unplayed) == 1 else 'are'}"
            typer.echo(f"note: {each.name}: {lines} never played ({why})", err=True)
        if each.unused_replies:
            replies = f"{each.unused_replies} {'reply' if each.unused_replies == 1 else 'replies'}"
            are = "is" if each.unused_replies == 1 else "are"
            typer.echo(f"note: {each.name}: the last {replies} of {each.name}.json {are} never used", err=True)
    return courses


def _numbers(numbers: tuple[int, ...]) -> str:
    """``(5, 6, 7, 9)`` as "lines 5-7, 9": a blank line between two is not one of them."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    spans = ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)
    return f"{'line' if len(numbers) == 1 else 'lines'} {spans}"


def _a_scorecard(path: Path) -> bool:
    """Whether ``--json`` may write ``path``: no file there (or a device, a FIFO: written to, never read), an
    empty one, or a scorecard an earlier run wrote (any other file may be what the courses are made of: a
    definition, its subflows, scripts, replies)."""
    import json

    from llm_fsm.named_files import read_bytes

    try:
        if not path.is_file() or path.stat().st_size == 0:
            return True
        data = json.loads(read_bytes(path, "scorecard"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("runs"), list) and "states" not in data


def _progress(number: int, score: CourseScore) -> None:
    """One line per course played: how many of its turns reached the scripted state, and why it stopped early."""
    reached = sum(t.reached for t in score.turns)
    failed = next((t.error for t in score.turns if t.error), None)
    note = f" (stopped: {failed})" if failed else ""
    if not failed and len(score.turns) < score.course_turns:
        stop = "paused" if score.paused else "ended"
        note = f" (the conversation {stop} in {score.end} after {len(score.turns)} turns)"
    progress.print(
        as_text(f"run {number}: {score.name}: {reached}/{score.course_turns} turns reached{note}", style="dim"),
        soft_wrap=True,  # one line, however long the reason: the terminal wraps it
    )


def _print(runs: list[list[CourseScore]]) -> None:
    from rich.table import Table

    from llm_fsm.testing.scorecard import summary

    table = Table("definition", "turns reached", "ended as expected", "valid 1st reply", "calls/turn",
                  "prompt tok/turn (cached)", "completion tok/turn", "s/turn", "refused (kind: count)",
                  "unusable messages (repeated/looping/copied/echoed)", "values overwritten")  # fmt: skip
    names = [score.name for score in runs[0]]
    for index, name in enumerate(names):
        table.add_row(as_text(name), *_cells([summary([scores[index]]) for scores in runs]))  # a str cell is markup
    table.add_row("[bold]all[/]", *_cells([summary(scores) for scores in runs]), end_section=True)
    table.caption = "valid 1st reply and the figures per turn: over the turns that called the model"
    out = console
    if not console.is_terminal:
        # piped or redirected: no terminal to fit, and rich's default of 80 columns cut every cell ("refu…",
        # "comp…"); at the table's natural width every cell is whole, and nothing wider is padded
        whole = console.measure(table, options=console.options.update_width(10_000)).maximum
        out = Console(highlight=False, width=whole)
    out.print(table)


def _cells(figures: list[dict[str, Any]]) -> list[str]:
    """The row's cells: means over the runs, with the range when there are several."""
    from llm_fsm.testing.scorecard import QUALITY

    first = figures[0]

    def mean(key: str) -> float:
        return sum(float(f[key]) for f in figures) / len(figures)

    def spread(key: str, fmt: str) -> str:
        low, high = min(float(f[key]) for f in figures), max(float(f[key]) for f in figures)
        return "" if len(figures) == 1 or low == high else f" ({format(low, fmt)}-{format(high, fmt)})"

    kinds: dict[str, float] = {}
    for f in figures:  # per run, like every other column
        for kind, count in dict(f["rejected"]).items():
            kinds[kind] = kinds.get(kind, 0) + count / len(figures)
    errors = sum(int(f["errors"]) for f in figures) / len(figures)
    if errors:
        kinds["model call failed"] = errors
    reached = f"{mean('reached'):.1f}/{first['course_turns']} ({100 * mean('reached_rate'):.0f}%)"
    return [
        reached + spread("reached_rate", ".0%"),
        f"{mean('finished'):.1f}/{first['courses']}",
        f"{100 * mean('first_valid_rate'):.0f}%",
        f"{mean('calls_per_turn'):.2f}",
        # and how many of them the provider's prompt cache served
        f"{mean('prompt_tokens_per_turn'):.0f} ({mean('cached_tokens_per_turn'):.0f} cached)",
        f"{mean('completion_tokens_per_turn'):.0f}",
        f"{mean('seconds_per_turn'):.2f}",
        ", ".join(f"{k}: {v:g}" for k, v in sorted(kinds.items())) or "-",
        # the model's messages a person could not use (llm_fsm.testing.message_quality)
        "/".join(f"{mean(key):g}" for key in QUALITY),
        f"{mean('overwritten_values'):g}",  # collected values the model changed where the script kept them
    ]
