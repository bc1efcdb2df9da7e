"""``llm-fsm validate DIR``: every definition in a folder, test files left out, the count said."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from llm_fsm.cli import app
from tests.conftest import EXAMPLES, ROOT, SIGNUP

runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_a_folder_stands_for_the_definitions_in_it(tmp_path):
    (tmp_path / "b_signup.json").write_text(json.dumps(SIGNUP))
    island = {**SIGNUP, "states": {**SIGNUP["states"], "island": {"purpose": "Nobody comes here"}}}
    (tmp_path / "a_island.json").write_text(json.dumps(island))
    (tmp_path / "signup.test.json").write_text(json.dumps({"cases": []}))  # a test file, not a definition
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "replies.json").write_text(json.dumps({"replies": []}))  # subfolders are not searched
    result = invoke("validate", str(tmp_path))
    assert result.exit_code == 0
    headers = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert headers == [
        f"{tmp_path / 'a_island.json'}  1 warning",
        f"{tmp_path / 'b_signup.json'}  ok",
        "2 files checked (1 test file skipped): 0 errors, 1 warning",
    ]
    found = json.loads(invoke("validate", "--format", "json", str(tmp_path)).stdout)
    assert [(d["file"], d["code"]) for d in found] == [(str(tmp_path / "a_island.json"), "unreachable_state")]


def test_the_examples_folder_validates_clean():
    result = invoke("validate", str(ROOT / "fsm_definitions"))
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == f"{len(EXAMPLES)} files checked: 0 errors, 0 warnings"


def test_a_folder_without_definitions_is_an_error(tmp_path):
    (tmp_path / "only.test.json").write_text("{}")
    result = invoke("validate", str(tmp_path))
    assert result.exit_code == 1
    assert f"{tmp_path}: error[no_definitions] no definition files (*.json) in this folder" in result.stdout
    assert result.stdout.splitlines()[-1] == "0 files checked (1 test file skipped): 1 error, 0 warnings"
