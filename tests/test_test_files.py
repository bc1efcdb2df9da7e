"""``llm-fsm test`` and ``paths --write-tests`` on awkward input: bad expectations, unsatisfiable paths, hooks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.testing.conversation_tests import run_files
from tests.conftest import reply
from tests.test_chat import OPEN

runner = CliRunner()


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "signup.json").write_text(json.dumps(OPEN))
    return tmp_path


def write_steps(folder, *steps, name="signup.test.json"):
    path = folder / name
    path.write_text(
        json.dumps({"cases": [{"name": "case", "definition": "signup.json", "steps": list(steps)}]}, indent=1)
    )
    return path


def opening(**expect):
    return {"user": None, "reply": reply("ask_name", "Hi! Name?"), "expect": expect}


# -- expectations that cannot be checked, and typos in them -------------------------------------


@pytest.mark.parametrize("field", ["message", "error"])
def test_an_invalid_regex_fails_its_case_with_the_reason(folder, field):
    path = write_steps(folder, opening(**{field: "Name ("}))
    (outcome,) = run_files([path])
    assert not outcome.passed
    assert "/Name (/ is not a valid regular expression: missing ), unterminated subpattern" in str(outcome.steps)
    result = runner.invoke(app, ["test", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.stdout and "not a valid regular expression" in result.stdout


def test_a_typo_in_an_expectation_key_gets_a_did_you_mean_with_its_line_and_column(folder):
    path = write_steps(folder, opening(stat="ask_name"), {"user": "Ann", "expect": {"contxt": {"name": "Ann"}}})
    result = runner.invoke(app, ["test", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    lines = path.read_text().splitlines()
    stat = next(n for n, line in enumerate(lines, 1) if '"stat"' in line)
    contxt = next(n for n, line in enumerate(lines, 1) if '"contxt"' in line)
    assert f"{path}:{stat}:" in result.stderr and "did you mean 'state'?" in result.stderr
    assert f"{path}:{contxt}:" in result.stderr and "did you mean 'context'?" in result.stderr
    assert "unknown field 'stat'" in result.stderr


def test_a_test_file_that_does_not_load_is_called_an_invalid_test_file(folder):
    path = write_steps(folder, {"usr": "hi"})
    (outcome,) = run_files([path])
    assert outcome.error.startswith(f"invalid test file {path}") and "invalid definition" not in outcome.error
