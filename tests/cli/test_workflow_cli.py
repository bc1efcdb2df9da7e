"""Workflows in ``llm-fsm run`` and ``llm-fsm chat``: a line (or a display) per step of a run, a run killed
mid-way gone on with from the store, the run's step limit, and the prompt only where a state waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.store import open_store
from llm_fsm.testing import tool_calls
from tests.conftest import ROOT, reply

runner = CliRunner()

# research acts with a search tool whose result allows the automatic move to write; write and review act;
# review's check tool dies the first time it runs where the environment says so (a process killed mid-run)
WORKFLOW: dict[str, Any] = {
    "name": "article",
    "initial_state": "research",
    "tools": {
        "search": {
            "description": "search the web",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            "result_key": "sources",
        },
        "check": {"description": "check the draft's links", "parameters": {"type": "object", "properties": {}}},
    },
    "states": {
        "research": {
            "id": "research",
            "acts": True,
            "purpose": "gather sources",
            "tools": ["search"],
            "transitions": [
                {"target_state": "write", "automatic": True, "conditions": [{"requires_context_keys": ["sources"]}]}
            ],
        },
        "write": {
            "id": "write",
            "acts": True,
            "purpose": "write a draft",
            "required_context_keys": ["draft"],
            "transitions": [{"target_state": "review", "conditions": [{"requires_context_keys": ["draft"]}]}],
        },
        "review": {
            "id": "review",
            "acts": True,
            "purpose": "review the draft",
            "tools": ["check"],
            "transitions": [
                {"target_state": "write", "description": "needs work"},
                {"target_state": "done", "description": "good"},
            ],
        },
        "done": {"id": "done", "purpose": "finished"},
    },
}
TOOLS = """
import os
import llm_fsm

hooks = llm_fsm.Hooks()


@hooks.tool("search")
def search(q: str) -> list:
    return [f"source about {q}"]


@hooks.tool("check")
def check() -> str:
    marker = os.environ.get("DIE_ONCE")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)  # killed as it works: no finally, no save
    return "links fine"
"""
SEARCH = tool_calls(("search", {"q": "quantum"}))
DRAFT = reply("review", "Drafted.", draft="# Quantum")
GOOD = reply("done", "Looks good.")
CHECK = tool_calls("check")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, str]:
    definition = tmp_path / "article.json"
    definition.write_text(json.dumps(WORKFLOW))
    (tmp_path / "tools.py").write_text(TOOLS)
    return definition, f"{tmp_path / 'tools.py'}:hooks"


def script(tmp_path: Path, replies: list[dict[str, Any]], name: str = "replies.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def moves(steps: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str]]:
    return [(step.get("step"), step["previous_state"], step["state"]) for step in steps]


def test_run_prints_a_line_for_each_step_of_the_run_its_task_starts(files, tmp_path):
    definition, hooks = files
    args = ["run", str(definition), "--model", script(tmp_path, [SEARCH, DRAFT, CHECK, GOOD]), "--hooks", hooks]
    result = runner.invoke(app, [*args, "--input", "-"], input="quantum computing\n")
    assert result.exit_code == 0, result.output
    steps = lines(result.stdout)
    assert moves(steps) == [("act", "research", "write"), ("act", "write", "review"), ("act", "review", "done")]
    assert steps[0]["user"] == "quantum computing" and steps[0]["tool_calls"][0]["name"] == "search"
    assert [s["message"] for s in steps[1:]] == ["Drafted.", "Looks good."] and steps[-1]["ended"]
    assert all("steps" not in s for s in steps)  # each step on its line, not repeated in the last one


def test_run_with_no_input_starts_an_acting_initial_state_with_no_task(files, tmp_path):
    definition, hooks = files
    args = ["run", str(definition), "--model", script(tmp_path, [SEARCH, DRAFT, CHECK, GOOD]), "--hooks", hooks]
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 0, result.output
    steps = lines(result.stdout)
    assert len(steps) == 3 and steps[0]["user"] is None and steps[-1]["state"] == "done"


def test_an_automatic_move_is_a_step_of_its_own(files, tmp_path):
    """An automatic move the context allows once an acting state's turn ends: a line with no model call."""
    definition, hooks = files
    flow = json.loads(definition.read_text())
    flow["states"]["write"]["transitions"][0]["automatic"] = True
    definition.write_text(json.dumps(flow))
    drafted = reply("write", "Drafted.", draft="# Quantum")  # stays: the automatic move takes it on
    args = ["run", str(definition), "--model", script(tmp_path, [SEARCH, drafted, CHECK, GOOD]), "--hooks", hooks]
    result = runner.invoke(app, args, input="a task\n")
    assert result.exit_code == 0, result.output
    steps = lines(result.stdout)
    assert moves(steps) == [("act", "research", "write"), ("act", "write", "write"),
                            ("automatic", "write", "review"), ("act", "review", "done")]  # fmt: skip
    assert steps[2]["llm_calls"] == 0 and steps[2]["message"] == ""


def test_a_run_killed_mid_way_goes_on_from_the_store_without_its_finished_steps(files, tmp_path):
    definition, hooks = files
    store = f"sqlite://{tmp_path / 'store.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DIE_ONCE": str(tmp_path / "died")}
    base = [sys.executable, str(ROOT / "cli.py"), "run", str(definition), "--hooks", hooks, "--store", store]
    first = subprocess.run(
        [*base, "-c", "job", "--model", script(tmp_path, [SEARCH, DRAFT, CHECK])],
        input="quantum computing\n", capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert first.returncode == 9, first.stderr  # killed in review's check tool
    assert moves(lines(first.stdout)) == [("act", "research", "write"), ("act", "write", "review")]
    # no input: the stored run goes on with the steps left; a finished step run again would take a reply
    # this script does not have
    again = subprocess.run(
        [*base, "-c", "job", "--model", script(tmp_path, [CHECK, GOOD], "rest.json")],
        input="", capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    (step,) = lines(again.stdout)
    assert moves([step]) == [("act", "review", "done")] and step["tool_calls"][0]["result"] == "links fine"
    record = open_store(store).load("job")
    assert record is not None and record.snapshot.history_len == 3 and record.snapshot.state == "done"


def test_a_run_over_max_run_steps_stops_with_one_line_and_goes_on_from_the_store(files, tmp_path):
    definition, hooks = files
    flow = json.loads(definition.read_text())
    definition.write_text(json.dumps({**flow, "max_run_steps": 2}))
    store = f"sqlite://{tmp_path / 'store.db'}"
    needs_work = reply("write", "Needs sources cited.")
    replies = [SEARCH, DRAFT, CHECK, needs_work]
    args = ["run", str(definition), "--hooks", hooks, "--store", store, "-c", "loop"]
    result = runner.invoke(app, [*args, "--model", script(tmp_path, replies)], input="quantum computing\n")
    assert result.exit_code == 1
    assert moves(lines(result.stdout)) == [("act", "research", "write"), ("act", "write", "review"),
                                           ("act", "review", "write")]  # fmt: skip
    (error,) = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert error.startswith("error: the run took 2 steps on its own and stopped in state 'write'")
    assert "max_run_steps: 2" in error and "-c loop and no input" in error and "Traceback" not in result.output
    # the last step before the limit was saved too: going on starts at write, not review again
    rest = [reply("review", "Cited.", draft="# Quantum [1]"), CHECK, GOOD]
    again = runner.invoke(app, [*args, "--model", script(tmp_path, rest, "rest.json")], input="")
    assert again.exit_code == 0, again.output
    assert moves(lines(again.stdout)) == [("act", "write", "review"), ("act", "review", "done")]


def test_run_prints_the_same_lines_as_before_for_a_definition_that_is_no_workflow(tmp_path):
    definition = tmp_path / "ask.json"
    named = [{"target_state": "done", "description": "named"}]
    states = {"ask": {"id": "ask", "purpose": "ask a name", "transitions": named}, "done": {"id": "done"}}
    definition.write_text(json.dumps({"name": "ask", "initial_state": "ask", "states": states}))
    replies = [reply("ask", "Your name?"), reply("done", "Bye Ann.", name="Ann")]
    result = runner.invoke(app, ["run", str(definition), "--model", script(tmp_path, replies)], input="Ann\n")
    assert result.exit_code == 0, result.output
    turns = lines(result.stdout)
    assert [t["message"] for t in turns] == ["Your name?", "Bye Ann."]
    assert all("step" not in t and "steps" not in t for t in turns)


# -- chat ------------------------------------------------------------------------------------------

# research acts, then a person approves the outline (the state waits), then write acts and ends
APPROVAL: dict[str, Any] = {
    "name": "outline",
    "initial_state": "research",
    "tools": WORKFLOW["tools"],
    "states": {
        "research": {**WORKFLOW["states"]["research"], "transitions": [
            {"target_state": "approve", "automatic": True, "conditions": [{"requires_context_keys": ["sources"]}]}]},
        "approve": {"id": "approve", "purpose": "ask whether the outline is right", "opening": "Is it right?",
                    "transitions": [
            {"target_state": "write", "description": "approved"}]},
        "write": {"id": "write", "acts": True, "purpose": "write the article", "transitions": [
            {"target_state": "done", "description": "written"}]},
        "done": {"id": "done", "purpose": "finished"},
    },
}  # fmt: skip


def chat(tmp_path: Path, flow: dict[str, Any], replies: list[dict[str, Any]], text: str, *extra: str) -> Any:
    definition = tmp_path / "flow.json"
    definition.write_text(json.dumps(flow))
    (tmp_path / "tools.py").write_text(TOOLS)
    args = ["chat", str(definition), "--model", script(tmp_path, replies), "--hooks", f"{tmp_path / 'tools.py'}:hooks"]
    return runner.invoke(app, [*args, *extra], input=text, env={"COLUMNS": "200"})


def test_chat_asks_for_the_task_and_shows_each_step_with_the_prompt_only_where_a_state_waits(tmp_path):
    replies = [SEARCH, reply("write", "Good, writing it."), reply("done", "Written.")]
    result = chat(tmp_path, APPROVAL, replies, "quantum computing\nyes\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "The state research acts on its own: type its task" in out
    research, waiting, written = out.index("[research acts]"), out.index("Is it right?"), out.index("[write acts]")
    assert out.count("task>") == 1 and research < out.index('🔧 search({"q": "quantum"}) → ["source about quantum"]')
    assert "state research → approve · 1 LLM call" in out
    # the question is the approve state's opening, entered by the automatic move: the first prompt follows it
    assert out.index("you>") > waiting and out[research:waiting].count("you>") == 0
    assert "→ approve (automatic)" not in out  # the move came inside research's turn, right after its tool
    assert waiting < out.index("Good, writing it.") < written < out.index("Written.")
    assert out.index("Written.") < out.index("The conversation has ended.")
    assert "state write → done · 1 LLM call" in out
    assert out.count("you>") == 2  # where approve waits, and after the end (for commands)


def test_chat_starts_an_acting_initial_state_with_no_task_on_an_empty_line(tmp_path):
    result = chat(tmp_path, APPROVAL, [SEARCH], "\n")
    assert result.exit_code == 0, result.output
    assert "[research acts]" in result.stdout and "Is it right?" in result.stdout


def test_chat_marks_acting_turns_and_automatic_moves_in_order(tmp_path):
    flow = json.loads(json.dumps(WORKFLOW))
    flow["states"]["write"]["transitions"][0]["automatic"] = True
    drafted = reply("write", "Drafted.", draft="# Quantum")
    result = chat(tmp_path, flow, [SEARCH, drafted, CHECK, GOOD], "quantum\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    shown = ["[research acts]", "🔧 search", "[write acts]", "Drafted.", "→ review (automatic)", "[review acts]"]
    shown += ['🔧 check({}) → "links fine"', "Looks good.", "state review → done", "The conversation has ended."]
    assert [out.index(text) for text in shown] == sorted(out.index(text) for text in shown)
    assert "state write → review" not in out  # an automatic move has its marker, not a status line
    assert out.count("you>") == 1  # after the end only


def test_chat_says_in_one_line_where_a_run_stopped_at_max_run_steps(tmp_path):
    flow = {**WORKFLOW, "max_run_steps": 1}
    result = chat(tmp_path, flow, [SEARCH, DRAFT], "quantum\n")
    assert result.exit_code == 0, result.output
    assert "[write acts]" in result.stdout and "Drafted." in result.stdout
    assert "the run took 1 steps on its own and stopped in state 'review' (max_run_steps: 1)" in result.stderr
    assert "Traceback" not in result.output


def test_chat_goes_on_with_a_stored_run_that_stopped_before_its_end(tmp_path):
    store = f"sqlite://{tmp_path / 'store.db'}"
    flow = {**WORKFLOW, "max_run_steps": 1}
    stopped = chat(tmp_path, flow, [SEARCH, DRAFT], "quantum\n", "--store", store, "-c", "job")
    assert stopped.exit_code == 0 and "max_run_steps: 1" in stopped.stderr
    again = chat(tmp_path, flow, [CHECK, GOOD], "", "--store", store, "-c", "job")
    assert again.exit_code == 0, again.output
    out = again.stdout
    assert "(the run stopped in state review before its end: going on with it)" in out
    assert out.index("[review acts]") < out.index('🔧 check({}) → "links fine"') < out.index("Looks good.")
    assert "Drafted." not in out.split("going on with it")[1]  # write's step is not run again


def approving(flow: dict[str, Any]) -> dict[str, Any]:
    """``flow`` with review's check tool waiting for a person's approval."""
    flow = json.loads(json.dumps(flow))
    flow["tools"]["check"]["approval"] = "always"
    return flow


def test_chat_shows_the_steps_of_a_run_an_approval_resumes(tmp_path):
    result = chat(tmp_path, approving(WORKFLOW), [SEARCH, DRAFT, CHECK, GOOD], "quantum\ny\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    asked = out.index("⏸ approval needed: the tool check wants to run with {}")
    assert out.index("Drafted.") < asked < out.index('🔧 check({}) → "links fine"') < out.index("Looks good.")
    assert "[review acts]" in out[asked:]  # the run goes on in review, and says so
    assert "The conversation has ended." in out


def test_run_resumes_a_paused_workflow_and_prints_the_rest_of_its_steps(files, tmp_path):
    definition, hooks = files
    definition.write_text(json.dumps(approving(WORKFLOW)))
    store = f"sqlite://{tmp_path / 'store.db'}"
    args = ["run", str(definition), "--hooks", hooks, "--store", store, "-c", "job"]
    paused = runner.invoke(app, [*args, "--model", script(tmp_path, [SEARCH, DRAFT, CHECK])], input="quantum\n")
    assert paused.exit_code == 3, paused.output
    assert lines(paused.stdout)[-1]["pending"]["kind"] == "tool_approval"
    rest = [*args, "--model", script(tmp_path, [GOOD], "rest.json"), "--resume", '{"approved": true}']
    resumed = runner.invoke(app, rest, input="")
    assert resumed.exit_code == 0, resumed.output
    (step,) = lines(resumed.stdout)
    assert step["state"] == "done" and step["tool_calls"][0]["approval"] == "approved"
