"""``llm-fsm paths --write-tests`` on workflows: the placeholder results of tools without code satisfy the automatic
moves the paths take on them (or the error names the tool), judge verdicts are scripted in order, a step expects the
calls of its whole run, and a path left is explained by the move taken and the condition that failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from llm_fsm.cli import app
from tests.conftest import ROOT

runner = CliRunner()
EXAMPLES = ROOT / "fsm_definitions"


def write_tests(definition: Path, out: Path) -> Any:
    return runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)], env={"COLUMNS": "300"})


def test_research_report_without_hooks_gets_a_placeholder_search_result_the_move_takes_and_the_file_passes(tmp_path):
    out = tmp_path / "research_report.test.json"
    result = write_tests(EXAMPLES / "research_report.json", out)
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["tools"]["search_sources"]["result"]["results"]  # what `has_context: sources.results` needs
    (case,) = written["cases"]
    (_, run) = case["steps"]
    assert {"pass": True, "reason": "simulated"} in run["replies"]  # review's judge call, in order
    assert run["expect"]["max_llm_calls"] == len(run["replies"])  # the calls of the whole run
    checked = runner.invoke(app, ["test", str(out)])
    assert checked.exit_code == 0 and "1 passed, 0 failed" in checked.output, checked.output


def test_a_placeholder_that_cannot_make_the_automatic_move_hold_is_named_with_the_way_out(tmp_path):
    definition = {
        "name": "search", "initial_state": "ask", "max_run_steps": 3,
        "context_schema": {"found": {"type": "string"}},
        "tools": {"search": {"description": "Search.", "result_key": "found",
                             "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
        "states": {
            "ask": {"id": "ask", "purpose": "Ask what to search.", "transitions": [{"target_state": "look"}]},
            "look": {"id": "look", "purpose": "Search.", "acts": True, "tools": ["search"], "transitions": [
                {"target_state": "done", "automatic": True,
                 "conditions": [{"description": "many found", "logic": {">": [{"var": "found"}, 3]}}]},
                {"target_state": "ask", "priority": 200}]},
            "done": {"id": "done", "purpose": "Say what was found."},
        },
    }  # fmt: skip
    path = tmp_path / "search.json"
    path.write_text(json.dumps(definition))
    result = write_tests(path, tmp_path / "search.test.json")
    assert result.exit_code == 1, result.output
    assert "path ask → look → done: stopped in look" in result.stderr
    assert "tool 'search' has no code, and its placeholder result (stored as 'found')" in result.stderr
    assert "automatic move to 'done' hold: give the tool's code with --hooks" in result.stderr


def test_a_path_left_names_the_move_taken_and_the_condition_of_the_move_the_path_wanted(tmp_path):
    result = write_tests(EXAMPLES / "insurance_claim.json", tmp_path / "claim.test.json")
    assert result.exit_code == 1, result.output
    assert (
        "left the path for not_verified: the move identity → not_verified was taken (it has no conditions); "
        "identity → incident: condition 'identity confirmed' does not hold"
    ) in result.stderr
