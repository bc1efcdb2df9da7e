"""Conversation test files, the simulated model, record/replay cassettes, paths, and the pytest plugin."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.authoring.paths import covering_paths
from llm_fsm.cli import app
from llm_fsm.testing import CassetteMismatch, RecordingLLM, ReplayLLM, ScriptedLLM, SimulatedLLM
from llm_fsm.testing.conversation_tests import coverage, json_schema, junit_xml, run_files
from llm_fsm.testing.skeleton import skeleton
from tests.cli.test_chat import OPEN
from tests.conftest import EXAMPLES, ROOT, example_hooks, reply

runner = CliRunner()


@pytest.fixture
def definition_file(tmp_path):
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(OPEN))
    return path


def write_cases(tmp_path, *cases, name="signup.test.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"cases": list(cases)}))
    return path


def case(*steps, **fields):
    return {"name": fields.pop("name", "case"), "definition": "signup.json", "steps": list(steps), **fields}


GREET = {"user": None, "reply": reply("ask_name", "Hi! Name?"), "expect": {"state": "ask_name", "message": "Name\\?"}}
NAME = {
    "user": "Ann",
    "reply": reply("ask_email", "Email, Ann?", name="Ann"),
    "expect": {"state": "ask_email", "context": {"name": "Ann"}},
}


def test_a_passing_case_and_every_kind_of_expectation(definition_file, tmp_path):
    rejected_then_ok = {
        "user": "skip it",
        "replies": [reply("done", "Done!", _x=1), reply("ask_email", "Your email first.")],
        "expect": {
            "state": "ask_email",
            "rejected": [{"kind": "condition", "target_state": "done"}, {"kind": "context_key", "reason": "internal"}],
            "max_llm_calls": 2,
            "max_tokens": 100000,
            "status": "active",
        },
    }
    path = write_cases(tmp_path, case(GREET, NAME, rejected_then_ok))
    (outcome,) = run_files([path])
    assert outcome.passed, [s.failures for s in outcome.steps]
    assert outcome.states == {"ask_name", "ask_email"} and outcome.transitions == {("ask_name", "ask_email")}


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"state": "done"}, "state: expected 'done', got 'ask_email'"),
        ({"context": {"name": "Bob"}}, 'context: \'name\' is "Ann", expected "Bob"'),
        ({"context": {"age": 3}}, "context: 'age' missing"),
        ({"message": "^Bye"}, "message: /^Bye/ does not match"),
        ({"rejected": 1}, "rejected: 0 item(s), expected 1"),
        ({"max_llm_calls": 0}, "llm calls: 1 > 0"),
        ({"max_tokens": 1}, "tokens:"),
        ({"status": "ended"}, "status: expected 'ended', got 'active'"),
        ({"error": "boom"}, "expected an error matching /boom/"),
    ],
)
def test_each_expectation_can_fail_with_a_clear_message(definition_file, tmp_path, expect, message):
    step = {**NAME, "expect": expect}
    (outcome,) = run_files([write_cases(tmp_path, case(GREET, step))])
    assert not outcome.passed and message in outcome.steps[-1].failures[0]


def test_unused_or_missing_scripted_replies_fail(definition_file, tmp_path):
    extra = {"user": "Ann", "replies": [NAME["reply"], reply("ask_email", "unused")], "expect": NAME["expect"]}
    (outcome,) = run_files([write_cases(tmp_path, case(GREET, extra))])
    assert "1 scripted reply not used" in outcome.steps[-1].failures
    unscripted = {"user": "Ann", "expect": {"state": "ask_email"}}
    (outcome,) = run_files([write_cases(tmp_path, case(GREET, unscripted))])
    assert "no scripted reply and no model was given" in outcome.steps[-1].failures[0]


def test_unscripted_steps_are_answered_by_the_given_model(definition_file, tmp_path):
    unscripted = {"user": "Ann", "expect": {"state": "ask_email"}}
    path = write_cases(tmp_path, case({"user": None}, unscripted))
    (outcome,) = run_files([path], lambda d: SimulatedLLM(d))
    assert outcome.passed, outcome.steps


def test_repeat_and_min_pass_for_flaky_models(definition_file, tmp_path):
    path = write_cases(
        tmp_path,
        case({"user": None, "expect": {"state": "ask_name"}}, {"user": "Ann", "expect": {"state": "ask_email"}}),
    )
    answers = itertools.cycle(
        [reply("ask_name", "Hi"), reply("ask_email", "ok", name="Ann"), reply("ask_name", "Hi"), reply("ask_name", "?")]
    )

    class Flaky:
        def complete(self, request):
            return ScriptedLLM([next(answers)]).complete(request)

        async def acomplete(self, request):
            return self.complete(request)

    (outcome,) = run_files([path], lambda d: Flaky(), repeat=4, min_pass=2)
    assert (outcome.runs, outcome.passes, outcome.passed) == (4, 2, True)
    (outcome,) = run_files([path], lambda d: Flaky(), repeat=4, min_pass=3)
    assert not outcome.passed and "passed 2 of 4 runs, 3 needed" in outcome.error


def test_coverage_and_junit(definition_file, tmp_path):
    path = write_cases(
        tmp_path, case(GREET, NAME, name="ok"), case(GREET, {**NAME, "expect": {"state": "done"}}, name="bad")
    )
    outcomes = run_files([path])
    (row,) = coverage(outcomes)
    assert row.covered_states == {"ask_name", "ask_email"} and len(row.states) == 3
    assert row.covered_transitions == {("ask_name", "ask_email")} and len(row.transitions) == 3
    tree = ET.fromstring(junit_xml(outcomes))
    suite = tree.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failure = tree.find(".//testcase[@name='bad']/failure")
    assert "state: expected 'done'" in failure.get("message")


def test_invalid_test_files_are_reported(tmp_path):
    bad = tmp_path / "bad.test.json"
    bad.write_text('{"cases": [{"name": "x", "definition": "nope.json", "steps": [{"usr": "hi"}]}]}')
    (outcome,) = run_files([bad])
    assert not outcome.passed and "cases[0].steps[0].usr" in outcome.error
    bad.write_text('{"cases": [{"name": "x", "definition": "nope.json", "steps": [{"user": "hi"}]}]}')
    (outcome,) = run_files([bad])
    assert "cannot read file" in outcome.error


def test_cli_test_command(definition_file, tmp_path):
    write_cases(tmp_path, case(GREET, NAME, name="good one"))
    junit = tmp_path / "out.xml"
    result = runner.invoke(app, ["test", str(tmp_path), "--junit", str(junit), "--coverage"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and "1 passed, 0 failed" in result.stdout and "2/3 (66%)" in result.stdout
    verbose = runner.invoke(app, ["test", str(tmp_path), "-v"], env={"COLUMNS": "200"})
    assert (
        "ok 1. (opening): ask_name (1 call" in verbose.stdout and "ok 2. 'Ann': ask_name → ask_email" in verbose.stdout
    )
    assert ET.parse(junit).getroot().tag == "testsuites"
    write_cases(tmp_path, case(GREET, {**NAME, "expect": {"state": "done"}}, name="bad one"), name="bad.test.json")
    result = runner.invoke(app, ["test", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "FAIL" in result.stdout and "state: expected 'done'" in result.stdout
    assert runner.invoke(app, ["test", str(tmp_path / "empty_dir_that_is_missing")]).exit_code == 2
    simulated = write_cases(
        tmp_path, case({"user": None}, {"user": "Ann", "expect": {"state": "ask_email"}}), name="sim.test.json"
    )
    assert runner.invoke(app, ["test", str(simulated), "--model", "simulated"]).exit_code == 0


# -- record and replay ------------------------------------------------------------------------


def test_record_then_replay_with_no_model(definition_file, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")]))
    cassette = tmp_path / "c.json"
    recorded = runner.invoke(
        app, ["run", str(definition_file), "-m", f"scripted:{script}", "--record", str(cassette)], input="Ann\n"
    )
    assert recorded.exit_code == 0
    data = json.loads(cassette.read_text())
    assert len(data["interactions"]) == 2 and data["interactions"][1]["messages"][-1]["content"] == "Ann"
    replayed = runner.invoke(app, ["run", str(definition_file), "--replay", str(cassette)], input="Ann\n")
    assert replayed.exit_code == 0
    strip = [{k: v for k, v in json.loads(line).items() if k != "latency_ms"} for line in recorded.stdout.splitlines()]
    again = [{k: v for k, v in json.loads(line).items() if k != "latency_ms"} for line in replayed.stdout.splitlines()]
    assert strip == again
    path = write_cases(tmp_path, case({"user": None}, {"user": "Ann", "expect": {"state": "ask_email"}}))
    assert runner.invoke(app, ["test", str(path), "--replay", str(cassette)]).exit_code == 0


def test_a_changed_prompt_is_shown_as_a_diff(definition_file, tmp_path):
    cassette = tmp_path / "c.json"
    recorder = RecordingLLM(ScriptedLLM([reply("ask_name", "Hi")]), cassette)
    llm_fsm.Conversation(llm_fsm.load(definition_file), recorder).start()
    changed = json.loads(definition_file.read_text())
    changed["states"]["ask_name"]["purpose"] = "Ask for the user's FULL name"
    with pytest.raises(CassetteMismatch) as info:
        llm_fsm.Conversation(llm_fsm.load(changed), ReplayLLM(cassette)).start()
    assert (
        "-[system] <purpose>Ask for the user&#x27;s name</purpose>" in info.value.diff
        or "-[system] <purpose>Ask for the user's name</purpose>" in info.value.diff
    )
    assert "+[system] <purpose>Ask for the user's FULL name</purpose>" in info.value.diff
    result = runner.invoke(app, ["run", str(definition_file), "--replay", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "cannot read the cassette" in result.stderr


def test_chat_records_a_cassette(definition_file, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")]))
    cassette = tmp_path / "chat.json"
    result = runner.invoke(
        app, ["chat", str(definition_file), "-m", f"scripted:{script}", "--record", str(cassette)], input="Ann\n"
    )
    assert result.exit_code == 0 and len(json.loads(cassette.read_text())["interactions"]) == 2


# -- simulation and paths ---------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_simulated_model_walks_every_example_without_a_rejection(path):
    definition = llm_fsm.load(path)
    for seed in range(4):
        conversation = llm_fsm.Conversation(definition, SimulatedLLM(definition, seed=seed), hooks=example_hooks(path))
        results = [conversation.start()]
        while not conversation.ended and len(results) < 40:
            results.append(conversation.send("go on"))
        # a tool may answer "no such invoice" to the values it is given: that is its answer, not a refused move
        assert conversation.ended and all(r.kind == "tool" for result in results for r in result.rejected)


def test_the_simulated_model_follows_a_path_and_respects_the_schema():
    definition = llm_fsm.load(ROOT / "fsm_definitions" / "form_filling.json")
    path = ["collect_name", "collect_email", "collect_age", "confirm", "correct", "confirm", "done"]
    conversation = llm_fsm.Conversation(definition, SimulatedLLM(definition, path=path))
    conversation.start()
    visited = [conversation.state]
    while not conversation.ended:
        visited.append(conversation.send("next").state)
    assert visited == path
    assert "@" in conversation.context["email"] and 13 <= conversation.context["age"] <= 120


def test_paths_command_and_skeletons_cover_every_state(tmp_path):
    # not restaurant_booking: its moves past date_time need check_availability, and SimulatedLLM calls no tools
    definition = ROOT / "fsm_definitions" / "order_flow.json"
    out = tmp_path / "tests" / "order.test.json"
    result = runner.invoke(app, ["paths", str(definition), "--write-tests", str(out)])
    assert result.exit_code == 0 and "select_product → cancelled" in result.stdout
    outcomes = run_files([out])
    assert outcomes and all(o.passed for o in outcomes)
    (row,) = coverage(outcomes)
    assert row.covered_states == row.states
    assert len(covering_paths(llm_fsm.load(definition))) == len(outcomes)


def test_every_example_has_a_test_file_that_passes_with_full_state_coverage():
    result = runner.invoke(app, ["test", str(ROOT / "fsm_definitions"), "--coverage"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    files = {p.name for p in (ROOT / "fsm_definitions" / "tests").glob("*.test.json")}
    assert files == {f"{p.stem}.test.json" for p in EXAMPLES}
    outcomes = run_files(sorted((ROOT / "fsm_definitions" / "tests").glob("*.test.json")))
    for row in coverage(outcomes):
        assert row.covered_states == row.states, row.definition


def test_test_files_have_a_schema_and_match_it():
    checked_in = json.loads((ROOT / "schema" / "fsm-test.schema.json").read_text())
    assert checked_in == json_schema(), "regenerate: llm-fsm schema --tests --output schema/fsm-test.schema.json"
    for path in (ROOT / "fsm_definitions" / "tests").glob("*.test.json"):
        document = json.loads(path.read_text())
        assert document["$schema"] == "../../schema/fsm-test.schema.json"
        jsonschema.validate(document, checked_in)
    assert skeleton(llm_fsm.load(ROOT / "fsm_definitions" / "quiz.json"), "../quiz.json")["cases"]


# -- the pytest plugin ------------------------------------------------------------------------


def test_the_pytest_plugin_fixtures(tmp_path, definition_file):
    write_cases(tmp_path, case(GREET, NAME, name="good"))
    write_cases(
        tmp_path / "failing", case(GREET, {**NAME, "expect": {"state": "done"}}, name="bad"), name="x.test.json"
    ) if (tmp_path / "failing").mkdir() is None else None
    (tmp_path / "failing" / "signup.json").write_text(json.dumps(OPEN))
    (tmp_path / "test_user.py").write_text(
        "from tests_helpers import reply\n"
        "def test_scripted(fsm_conversation):\n"
        f"    conversation, llm = fsm_conversation({str(definition_file)!r}, [reply('ask_name', 'Hi')])\n"
        "    assert conversation.start().message == 'Hi' and llm.calls == 1\n"
        "def test_files(fsm_test_files):\n"
        f"    assert len(fsm_test_files({str(tmp_path / 'signup.test.json')!r})) == 1\n"
        "def test_failing_files(fsm_test_files):\n"
        f"    fsm_test_files({str(tmp_path / 'failing')!r})\n"
    )
    (tmp_path / "tests_helpers.py").write_text("from llm_fsm.testing import reply\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_user.py")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "1 failed, 2 passed" in done.stdout, done.stdout + done.stderr
    assert "1 of 1 conversation test(s) failed" in done.stdout and "state: expected 'done'" in done.stdout


@pytest.mark.parametrize(
    "pattern",
    [r"^([01]\d|2[0-3]):[0-5]\d$", r"^INV-\d{5}$", r"^[A-Z]{2}-\d+$", r"^\w+@\w+\.com$", r"(x|y)z?", r"^a{3,}$"],
)
def test_the_simulated_model_writes_strings_a_schemas_pattern_matches(pattern):
    import re

    from llm_fsm.testing.simulation import schema_value

    value = schema_value({"type": "string", "pattern": pattern}, "field")
    assert re.search(pattern, value), value
