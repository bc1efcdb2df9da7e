"""``llm-fsm test`` and ``paths --write-tests`` on awkward input: bad expectations, unsatisfiable paths, hooks."""

from __future__ import annotations

import json
import operator

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


# -- paths --write-tests: paths the simulated model cannot follow, comparisons between keys -------


def booking(*conditions):
    """Collect two dates, then confirm when ``conditions`` hold."""
    return {
        "name": "booking",
        "description": "Book a stay.",
        "initial_state": "collect",
        "context_schema": {
            "check_in": {"type": "string", "format": "date"},
            "check_out": {"type": "string", "format": "date"},
        },
        "states": {
            "collect": {
                "purpose": "Ask for the dates of the stay",
                "required_context_keys": ["check_in", "check_out"],
                "transitions": [{"target_state": "done", "description": "Dates known", "conditions": list(conditions)}],
            },
            "done": {"purpose": "Confirm the booking"},
        },
    }


COMPARE = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
IN_ORDER = {"description": "dates in order", "logic": {"<": [{"var": "check_in"}, {"var": "check_out"}]}}


def test_paths_says_which_condition_on_which_path_it_could_not_satisfy_and_writes_nothing(tmp_path):
    never = {"description": "a day before itself", "logic": {"<": [{"var": "check_in"}, {"var": "check_in"}]}}
    definition = tmp_path / "booking.json"
    definition.write_text(json.dumps(booking(IN_ORDER, never)))
    out = tmp_path / "booking.test.json"
    result = runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "collect → done" in result.stderr and "condition 'a day before itself'" in result.stderr
    assert "'dates in order'" not in result.stderr and not out.exists()


def test_paths_writes_a_runnable_case_for_a_comparison_of_two_dates(tmp_path):
    definition = tmp_path / "booking.json"
    definition.write_text(json.dumps(booking(IN_ORDER)))
    out = tmp_path / "booking.test.json"
    result = runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (case,) = json.loads(out.read_text())["cases"]
    context = {k: v for step in case["steps"] for k, v in step["reply"]["transition"]["context_update"].items()}
    assert context["check_in"] < context["check_out"]
    assert runner.invoke(app, ["test", str(out)]).exit_code == 0


@pytest.mark.parametrize("comparison", ["<", "<=", ">", ">=", "==", "!="])
@pytest.mark.parametrize(
    ("schema", "sample"), [({"type": "integer", "minimum": 1}, 1), ({"type": "string", "format": "date"}, "2026-01-15")]
)
def test_the_simulated_model_satisfies_a_comparison_of_two_keys(comparison, schema, sample):
    from llm_fsm.loader import load
    from llm_fsm.testing.simulation import SimulatedLLM

    compared = {comparison: [{"var": "check_in"}, {"var": "check_out"}]}
    data = booking({"description": "compared", "requires_context_keys": ["check_in", "check_out"], "logic": compared})
    data["context_schema"] = {"check_in": schema, "check_out": schema}
    definition = load(data)
    llm = SimulatedLLM(definition)
    transition = definition.states["collect"].transitions[0]
    update = llm.satisfy("collect", transition, {"check_in": sample})
    assert update is not None
    context = {"check_in": sample, **update}
    assert COMPARE[comparison](context["check_in"], context["check_out"])
