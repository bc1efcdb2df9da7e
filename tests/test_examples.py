"""Every example definition loads cleanly and a scripted conversation drives it to a terminal state."""

from __future__ import annotations

import json
import re
import shlex
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.testing import ScriptedLLM
from tests.conftest import EXAMPLE_HOOKS, EXAMPLES, ROOT, example_hooks


def script_for(path: Path) -> tuple[dict, list[str]]:
    scripts = path.parent / "scripts"
    script = json.loads((scripts / f"{path.stem}.json").read_text(encoding="utf-8"))
    lines = [line for line in (scripts / f"{path.stem}.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    return script, lines


def test_there_are_at_least_six_examples():
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_loads_strictly_without_warnings(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        definition = llm_fsm.load(path, strict=True)
    assert any(state.terminal for state in definition.states.values())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_scripted_conversation_reaches_a_terminal_state(path):
    definition = llm_fsm.load(path)
    script, lines = script_for(path)
    llm = ScriptedLLM(script["replies"])
    conversation = llm_fsm.Conversation(definition, llm, hooks=example_hooks(path))
    sent = [conversation.start(), *(conversation.send(line) for line in lines)]
    # in a workflow, send returns a run's last step with the steps before it in .steps: count every step
    results = [step for result in sent for step in (*result.steps, result)]
    expect = script["expect"]
    runs = [run for result in results for run in result.tool_calls]
    assert bool(runs) == bool(definition.tools), "an example with tools shows them in its script"
    assert all(run.ok for run in runs) and not any(result.paused for result in results)
    assert conversation.ended and conversation.state == expect["final_state"]
    summaries = sum(1 for result in results if result.summary is not None)  # a summary call is not a reply's
    assert llm.remaining == 0 and llm.calls == expect["llm_calls"] == sum(r.llm_calls for r in results) + summaries
    for key, value in expect.get("context", {}).items():
        assert conversation.context[key] == value
    for result in results:  # a message is never paired with a state the conversation did not enter
        assert result.state == conversation.history[result.turn if result.user else 0].state or result.user is None
    assert all(not k.startswith("_") or k == "_extra" for k in conversation.context)
    for request in llm.requests:  # keys only code may set are never offered to the model
        for key in definition.handler_only_keys:
            assert f"<key>{key}</key>" not in request.messages[0]["content"]


def test_examples_with_tools_have_a_hooks_module_that_registers_them():
    with_tools = [path for path in EXAMPLES if llm_fsm.load(path).tools]
    assert {path.stem for path in EXAMPLE_HOOKS.glob("*.py")} == {path.stem for path in with_tools}
    assert len(with_tools) >= 2
    tools = []
    for path in with_tools:
        hooks = example_hooks(path)
        assert set(hooks.tools) == set(llm_fsm.load(path).tools)
        tools += hooks.tools.values()
    assert all(tool.description for tool in tools)  # their docstrings
    assert any(tool.is_async for tool in tools) and not all(tool.is_async for tool in tools)


def test_the_tools_guide_runs_the_examples_with_tools_offline(monkeypatch):
    monkeypatch.chdir(ROOT)
    guide = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    commands = re.findall(r"^llm-fsm (run \S+ --hooks \S+ --model scripted:\S+ --input \S+)$", guide, re.MULTILINE)
    assert commands, "docs/tools.md shows how to run an example with tools"
    for command in commands:
        result = CliRunner().invoke(app, shlex.split(command), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        turns = [json.loads(line) for line in result.stdout.splitlines()]
        assert turns[-1]["ended"] is True and any(turn["tool_calls"] for turn in turns)
        assert all(call["error"] is None for turn in turns for call in turn["tool_calls"])
        without = re.sub(r" --hooks \S+", "", command)
        refused = CliRunner().invoke(app, shlex.split(without))
        assert refused.exit_code == 2 and "which is not registered" in refused.stderr  # no tools' code, no run


def test_readme_example_command_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(pip install[^\n]*&& (llm-fsm run [^\n]+))\n```", readme)
    assert command, "the README opens with an install-and-run command"
    args = shlex.split(command.group(2))[1:]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert turns[-1]["ended"] is True and turns[0]["user"] is None


def test_the_readme_runs_the_workflow_examples_offline(monkeypatch):
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Workflows", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(?:echo (\"[^\"]+\") \| )?llm-fsm (run \S+ --hooks \S+ --model scripted:\S+ --input \S+)$",
                          section, re.MULTILINE)  # fmt: skip
    assert {shlex.split(run)[1] for _, run in commands} == {
        "fsm_definitions/research_report.json", "fsm_definitions/support_triage_bot.json"
    }  # fmt: skip
    for echoed, command in commands:
        typed = shlex.split(echoed)[0] + "\n" if echoed else None
        result = CliRunner().invoke(app, shlex.split(command), input=typed, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        # one line per step, or per turn with the run's earlier steps in "steps": every step either way
        steps = [step for line in lines for step in (*line.get("steps", ()), line)]
        assert lines[-1]["ended"] is True
        assert {"act", "automatic"} <= {step.get("step", "turn") for step in steps}
        calls = [call for step in steps for call in step["tool_calls"]]
        assert calls and all(call["error"] is None for call in calls)
