"""Issue 28 ("Also"): what ``llm-fsm eval`` (and the other commands loading a definition) print.

The table is whole when the output is not a terminal; a definition's load warnings read as ``validate``
writes them, once each; a course refused because a scripted reply writes a key the state may not write
names the key and the state."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from tests.conftest import ROOT

EXAMPLES = ROOT / "fsm_definitions"
runner = CliRunner()
HEADERS = ("definition", "turns reached", "ended as expected", "valid 1st reply", "calls/turn",
           "prompt tok/turn (cached)", "completion tok/turn", "s/turn", "refused (kind: count)")  # fmt: skip
# a quiz with a field the loader ignores: one warning, at a known place
WARNED = "unknown field 'bogus_field' is ignored"


def quiz_copy(tmp_path, *, bogus: bool = False, replies: list | None = None):
    """quiz.json with its scripts (and test file) in ``tmp_path``; ``bogus`` adds an ignored field, ``replies``
    replace the scripted ones."""
    definition = json.loads((EXAMPLES / "quiz.json").read_text())
    if bogus:
        definition["bogus_field"] = 1
    path = tmp_path / "quiz.json"
    path.write_text(json.dumps(definition, indent=2))
    (tmp_path / "scripts").mkdir()
    shutil.copy(EXAMPLES / "scripts" / "quiz.txt", tmp_path / "scripts" / "quiz.txt")
    script = json.loads((EXAMPLES / "scripts" / "quiz.json").read_text())
    if replies is not None:
        script["replies"] = replies
    (tmp_path / "scripts" / "quiz.json").write_text(json.dumps(script))
    (tmp_path / "tests").mkdir()
    shutil.copy(EXAMPLES / "tests" / "quiz.test.json", tmp_path / "tests" / "quiz.test.json")
    return path


def eval_quiz(path):
    # COLUMNS unset: a pipe's width is rich's default of 80
    return runner.invoke(app, ["eval", str(path), "-m", f"scripted:{path.parent / 'scripts' / 'quiz.json'}"],
                         env={"COLUMNS": None})  # fmt: skip


def test_eval_prints_the_whole_table_when_its_output_is_not_a_terminal(tmp_path):
    result = eval_quiz(quiz_copy(tmp_path))
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if "definition" in line)
    assert all(name in header for name in HEADERS), header  # every column named whole, on one line
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ quiz") or line.startswith("│ all")]
    assert len(rows) == 2 and all("5.0/5 (100%)" in row and "(0 cached)" in row for row in rows), rows


def test_eval_prints_a_definitions_warnings_as_validate_does_once_each(tmp_path):
    path = quiz_copy(tmp_path, bogus=True)
    result = runner.invoke(
        app, ["eval", str(path), str(path), "-m", f"scripted:{tmp_path / 'scripts' / 'quiz.json'}", "--repeat", "2"]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("run ")]
    # the file given twice is played once a run
    assert [line for line in result.stderr.splitlines() if line.startswith("run ")] == [
        "run 1: quiz: 5/5 turns reached", "run 2: quiz: 5/5 turns reached"
    ]  # fmt: skip
    validate = runner.invoke(app, ["validate", str(path)])
    shown = next(line.strip() for line in validate.stdout.splitlines() if WARNED in line)
    assert lines == [shown], result.stderr  # the file given twice, the runs repeated: said once
    assert shown.startswith(f"{path}:") and f"warning[unknown_field] bogus_field: {WARNED}" in shown
    assert "DefinitionWarning" not in result.stderr and ".py:" not in result.stderr


@pytest.mark.parametrize("command", ["run", "chat", "test", "test --coverage", "eval"])
def test_every_command_prints_load_warnings_in_validates_form(tmp_path, command):
    path = quiz_copy(tmp_path, bogus=True)
    args = {
        "run": ["run", str(path), "-m", "simulated"],
        "chat": ["chat", str(path), "-m", "simulated"],
        "test": ["test", str(tmp_path / "tests"), "-m", "simulated"],
        "test --coverage": ["test", str(tmp_path / "tests"), "-m", "simulated", "--coverage"],
        "eval": ["eval", str(path), "-m", f"scripted:{tmp_path / 'scripts' / 'quiz.json'}"],
    }[command]
    result = runner.invoke(app, args, input="", env={"LLM_FSM_HOME": str(tmp_path / "home")})
    warned = [line for line in result.stderr.splitlines() if WARNED in line]
    assert len(warned) == 1, result.stderr
    assert warned[0].startswith(f"{path}:") and "warning[unknown_field] bogus_field:" in warned[0], warned
    assert "DefinitionWarning" not in result.stderr, result.stderr


def test_a_course_whose_scripted_reply_writes_a_key_the_state_may_not_names_the_key_and_the_state(tmp_path):
    replies = json.loads((EXAMPLES / "scripts" / "quiz.json").read_text())["replies"]
    replies[0]["transition"]["context_update"]["q2_answer"] = "Mars"  # intro writes only `ready`
    result = eval_quiz(quiz_copy(tmp_path, replies=replies))
    assert result.exit_code == 2 and "Traceback" not in result.output
    message = " ".join(result.stderr.split())
    assert "the scripted reply to line 1 of quiz.txt" in message
    assert "'q2_answer'" in message and "state 'intro'" in message and "writable: _extra, ready" in message
    assert "would expect the wrong states" not in message
