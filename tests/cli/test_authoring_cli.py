"""The authoring commands: validate, graph, schema; the JSON Schema file; and that none imports litellm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli.authoring import complete_definitions, schema_text
from llm_fsm.definition.json_schema import json_schema
from tests.conftest import EXAMPLES, ROOT, SIGNUP

runner = CliRunner()
LLMFSM_FILES = sorted((ROOT / "tests" / "data" / "llmfsm").glob("*.json"))
SCHEMA_FILE = ROOT / "schema" / "fsm.schema.json"
DIAGNOSTIC_KEYS = ["severity", "code", "file", "path", "line", "column", "message", "hint"]


def write(tmp_path, name: str, definition: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(definition, indent=2) if not isinstance(definition, str) else definition)
    return str(path)


@pytest.fixture
def clean(tmp_path) -> str:
    return write(tmp_path, "clean.json", SIGNUP)


@pytest.fixture
def warned(tmp_path) -> str:
    states = {**SIGNUP["states"], "island": {"purpose": "Nobody comes here"}}
    return write(tmp_path, "warned.json", {**SIGNUP, "states": states})


@pytest.fixture
def broken(tmp_path) -> str:
    ask_email = SIGNUP["states"]["ask_email"]
    transitions = [ask_email["transitions"][0], {**ask_email["transitions"][1], "target_state": "ask_nme"}]
    states = {**SIGNUP["states"], "ask_email": {**ask_email, "transitions": transitions}}
    return write(tmp_path, "broken.json", {**SIGNUP, "states": states})


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


# ---------------------------------------------------------------- validate


def test_validate_a_clean_file(clean):
    result = invoke("validate", clean)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"{clean}  ok", "1 file checked: 0 errors, 0 warnings"]


def test_validate_reports_errors_with_position_code_path_and_hint(broken):
    result = invoke("validate", broken)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{broken}  1 error"
    assert lines[1].startswith(f"  {broken}:")
    assert "error[unknown_state] states.ask_email.transitions[1].target_state: unknown state 'ask_nme'" in lines[1]
    assert lines[2] == "    hint: did you mean 'ask_name'?"
    assert lines[-1] == "1 file checked: 1 error, 0 warnings"


def test_validate_names_the_length_a_string_breaks(tmp_path):
    path = write(tmp_path, "long.json", {**SIGNUP, "language": "x" * 10_000})
    result = invoke("validate", path)
    assert result.exit_code == 1
    assert "error[out_of_range] language: at most 64 characters are allowed, got 10000" in result.stdout


def test_warnings_pass_unless_strict(warned):
    result = invoke("validate", warned)
    assert result.exit_code == 0
    assert "warning[unreachable_state] states.island: state 'island' cannot be reached" in result.stdout
    strict = invoke("validate", "--strict", warned)
    assert strict.exit_code == 1 and "(--strict: warnings fail the check)" in strict.stdout


def test_strict_makes_unknown_fields_errors(tmp_path):
    path = write(tmp_path, "typo.json", {**SIGNUP, "persna": "x"})
    assert invoke("validate", path).exit_code == 0
    result = invoke("validate", "--strict", "--format", "json", path)
    assert result.exit_code == 1
    (found,) = json.loads(result.stdout)
    assert (found["severity"], found["code"], found["hint"]) == ("error", "unknown_field", "did you mean 'persona'?")


def test_validate_many_files_groups_by_file(clean, warned, broken):
    result = invoke("validate", clean, warned, broken)
    assert result.exit_code == 1
    headers = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert headers == [
        f"{clean}  ok",
        f"{warned}  1 warning",
        f"{broken}  1 error",
        "3 files checked: 1 error, 1 warning",
    ]


def test_validate_json_format(clean, warned, broken):
    result = invoke("validate", "--format", "json", clean, warned, broken)
    assert result.exit_code == 1
    found = json.loads(result.stdout)
    assert [list(d) for d in found] == [DIAGNOSTIC_KEYS, DIAGNOSTIC_KEYS]
    assert [(d["file"], d["severity"], d["code"]) for d in found] == [
        (warned, "warning", "unreachable_state"),
        (broken, "error", "unknown_state"),
    ]
    assert isinstance(found[1]["line"], int) and isinstance(found[1]["column"], int)
    assert json.loads(invoke("validate", "-f", "json", clean).stdout) == []


@pytest.mark.parametrize(
    ("content", "code"),
    [(b'{"name": ', "json"), (b"\xff\xfe{\x00}\x00", "encoding"), (b"[]", "type"), (b"{" * 50_000, "json")],
    ids=["truncated", "utf16", "not-an-object", "deep"],
)
def test_validate_never_shows_a_traceback(tmp_path, content, code):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = invoke("validate", "--format", "json", str(path))
    assert result.exit_code == 1
    assert [d["code"] for d in json.loads(result.stdout)] == [code]


def test_missing_files_are_usage_errors_and_a_folder_stands_for_its_definitions(tmp_path):
    result = invoke("validate", str(tmp_path / "missing.json"), str(tmp_path))
    assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.output
    assert result.stderr.splitlines() == [f"error: cannot read {tmp_path / 'missing.json'}: No such file or directory"]
    empty = invoke("validate", str(tmp_path))
    assert empty.exit_code == 1 and "no definition files (*.json) in this folder" in empty.stdout


@pytest.mark.parametrize("args", [["validate"], ["validate", "--format", "xml", "x.json"], ["validate", "--nope"]])
def test_usage_errors_exit_2(args):
    assert invoke(*args).exit_code == 2


def test_every_example_validates(tmp_path):
    result = invoke("validate", "--format", "json", *map(str, EXAMPLES))
    assert result.exit_code == 0
    assert {d["severity"] for d in json.loads(result.stdout)} <= {"warning"}


def test_llm_fsm_format_files_validate_with_ignored_field_warnings():
    result = invoke("validate", *map(str, LLMFSM_FILES))
    assert result.exit_code == 0
    assert "warning[ignored_field]" in result.stdout and "error[" not in result.stdout
    assert result.stdout.splitlines()[-1].startswith("2 files checked: 0 errors, ")


WORKFLOW_CYCLE = {
    "name": "w",
    "initial_state": "ask",
    "states": {
        "ask": {"transitions": [{"target_state": "fetch"}, {"target_state": "done"}]},
        "fetch": {"acts": True, "transitions": [{"target_state": "check", "automatic": True}]},
        "check": {"transitions": [{"target_state": "fetch", "automatic": True}]},
        "done": {},
    },
}


def test_validate_reports_a_cycle_of_automatic_moves_with_its_position_and_hint(tmp_path):
    path = write(tmp_path, "cycle.json", WORKFLOW_CYCLE)
    result = invoke("validate", path)
    assert result.exit_code == 1
    lines = Path(path).read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if '"target_state": "check"' in text) - 1
    assert f"{path}:{line}:" in result.stdout
    assert "error[automatic_cycle] states.fetch.transitions[0]: a cycle of automatic moves" in result.stdout
    assert "fetch → check → fetch" in result.stdout and "    hint: give one of these moves conditions" in result.stdout


def test_validate_reports_an_acting_state_with_no_way_out(tmp_path):
    states = {
        "ask": {"transitions": [{"target_state": "work"}, {"target_state": "done"}]},
        "work": {"acts": True, "transitions": [{"target_state": "work2"}]},
        "work2": {"acts": True, "transitions": [{"target_state": "work"}]},
        "done": {},
    }
    result = invoke("validate", "--format", "json", write(tmp_path, "w.json", {**WORKFLOW_CYCLE, "states": states}))
    assert result.exit_code == 1
    found = [(d["severity"], d["code"], d["path"]) for d in json.loads(result.stdout)]
    assert found == [
        ("error", "acts_no_way_out", "states.work.acts"),
        ("error", "acts_no_way_out", "states.work2.acts"),
    ]
    assert all(d["line"] is not None for d in json.loads(result.stdout))


def test_strict_fails_on_a_state_passed_through(tmp_path):
    states = {
        "ask": {"transitions": [{"target_state": "hub"}]},
        "hub": {"transitions": [{"target_state": "done", "automatic": True}]},
        "done": {},
    }
    path = write(tmp_path, "hub.json", {**WORKFLOW_CYCLE, "states": states})
    assert invoke("validate", path).exit_code == 0
    result = invoke("validate", "--strict", path)
    assert result.exit_code == 1 and "warning[state_passed_through] states.hub.transitions[0]" in result.stdout


def test_strict_fails_on_a_cycle_of_conditioned_automatic_moves_that_may_loop(tmp_path):
    has_x = [{"requires_context_keys": ["x"]}]
    end = {"target_state": "done"}
    states = {
        "ask": {"transitions": [{"target_state": "b"}]},
        "b": {"transitions": [{"target_state": "c", "automatic": True, "conditions": has_x}, end]},
        "c": {"transitions": [{"target_state": "b", "automatic": True, "conditions": has_x}, end]},
        "done": {},
    }
    path = write(tmp_path, "loop.json", {**WORKFLOW_CYCLE, "states": states})
    assert invoke("validate", path).exit_code == 0
    result = invoke("validate", "--strict", path)
    assert result.exit_code == 1 and "warning[automatic_cycle_may_loop] states.b.transitions[0]" in result.stdout
    assert "b → c → b" in result.stdout


def test_an_llm_fsm_threshold_validates_with_what_it_was_mapped_to():
    result = invoke("validate", str(ROOT / "tests" / "data" / "llm_fsm_format" / "v41_parcel_desk.json"))
    assert result.exit_code == 0
    assert "warning[mapped_field] states.ask_code.auto_transition_threshold" in result.stdout
    assert 'transitions[0] load as "automatic": true' in result.stdout


# ---------------------------------------------------------------- graph


def test_graph_mermaid_is_the_default(clean):
    result = invoke("graph", clean)
    assert result.exit_code == 0
    assert result.stdout.startswith('stateDiagram-v2\n    state "ask_name" as s0\n')
    assert "    s2 --> [*]\n" in result.stdout and "(p10) [has email#59; approved == true]" in result.stdout


def test_graph_dot_to_a_file(clean, tmp_path):
    out = tmp_path / "g.dot"
    result = invoke("graph", clean, "--format", "dot", "--output", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    text = out.read_text()
    assert text.startswith('digraph "signup" {') and '"done" [shape=doublecircle];' in text


def test_graph_of_an_invalid_definition_exits_2_with_the_problems(broken, tmp_path):
    result = invoke("graph", broken)
    assert result.exit_code == 2 and result.stdout == ""
    assert "unknown state 'ask_nme'" in result.stderr
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    assert invoke("graph", str(deep)).exit_code == 2


@pytest.mark.parametrize("args", [["--format", "svg"], ["--output", "/nonexistent-dir/x.mmd"]])
def test_graph_usage_errors_exit_2(clean, args):
    assert invoke("graph", clean, *args).exit_code == 2


# ---------------------------------------------------------------- schema


def test_schema_command_prints_the_schema(tmp_path):
    result = invoke("schema")
    assert result.exit_code == 0 and result.stdout == schema_text()
    assert json.loads(result.stdout) == json_schema()
    out = tmp_path / "s.json"
    assert invoke("schema", "--output", str(out)).exit_code == 0 and out.read_text() == schema_text()


def test_the_checked_in_schema_is_up_to_date():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "schema/fsm.schema.json is stale: run `llm-fsm schema --output schema/fsm.schema.json`"
    )


def test_the_schema_is_draft_2020_12_and_describes_every_field():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["$id"]
    models = [schema, *schema["$defs"].values()]
    undescribed = [
        name for model in models for name, field in model["properties"].items() if not field.get("description")
    ]
    assert undescribed == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_follow_the_schema_and_point_at_it(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    assert next(iter(data)) == "$schema" and data["$schema"] == "../schema/fsm.schema.json"
    assert (path.parent / data["$schema"]).resolve() == SCHEMA_FILE
    jsonschema.validate(data, json_schema(), cls=jsonschema.Draft202012Validator)


def test_the_schema_accepts_both_forms_of_states_and_llm_fsm_examples():
    validator = jsonschema.Draft202012Validator(json_schema())
    assert validator.is_valid(SIGNUP)
    listed = {**SIGNUP, "states": [{"id": sid, **state} for sid, state in SIGNUP["states"].items()]}
    assert validator.is_valid(listed)
    dialogue = [{"user": "Hi"}, {"role": "assistant", "content": "Hello"}, {"user": "a", "assistant": "b"}]
    assert validator.is_valid({**SIGNUP, "states": {"only": {"example_dialogue": dialogue}}})


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in SIGNUP.items() if k != "name"},
        {**SIGNUP, "states": {"bad id": {}}},
        {**SIGNUP, "states": [{"purpose": "no id"}]},
        {**SIGNUP, "states": {}},
        {**SIGNUP, "states": {"a": {"transitions": {"target_state": "b"}}}},
        {**SIGNUP, "states": {"a": {"transitions": [{"priority": 1}]}}},
        {**SIGNUP, "persna": "typo"},
    ],
    ids=["no-name", "bad-id", "list-without-id", "no-states", "transitions-not-a-list", "no-target", "unknown-field"],
)
def test_the_schema_rejects_broken_definitions(broken):
    assert not jsonschema.Draft202012Validator(json_schema()).is_valid(broken)


# ---------------------------------------------------------------- completion and startup


def test_completion_lists_json_files_and_folders(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.txt").write_text("")
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "c.json").write_text("{}")
    (tmp_path / ".hidden.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert complete_definitions("") == ["a.json", "defs/"]
    assert complete_definitions("a") == ["a.json"]
    assert complete_definitions("defs/") == ["defs/c.json"]
    assert complete_definitions("missing/") == []


PROBE = """
import sys
from typer.testing import CliRunner
from llm_fsm.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(result.exit_code, "litellm" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", "fsm_definitions/order_flow.json"],
        ["graph", "fsm_definitions/order_flow.json", "--format", "dot"],
        ["schema"],
    ],
    ids=["help", "validate", "graph", "schema"],
)
def test_authoring_commands_never_import_litellm(args):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True
    )
    assert done.stdout.split() == ["0", "False"], done.stderr
