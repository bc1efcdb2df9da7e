"""``--model simulated`` wherever a command names a model: a definition walked offline, with no key and no litellm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli import serve as serve_command
from tests.conftest import ROOT

runner = CliRunner()
EXAMPLES = ROOT / "fsm_definitions"
FORM = str(EXAMPLES / "form_filling.json")
ANSWERS = "Maya Chen\nmaya@example.com\n42\n"


def turns(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_chat_walks_form_filling_with_the_simulated_model():
    args = ["chat", FORM, "--model", "simulated", "--store", "memory:"]
    result = runner.invoke(app, args, input=ANSWERS + "/state\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "form_filling · simulated" in out
    assert "state collect_name → collect_email · collected name · 1 LLM call" in out
    assert "state collect_age → confirm · collected age" in out
    assert "error" not in result.output.lower()


def test_chat_from_piped_stdin_needs_no_litellm():
    """The newcomer's first command, as a process: it walks the definition, and litellm is never imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("LLM_FSM_MODEL", None)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "cli.py"), "chat", FORM, "--model", "simulated",
         "--store", "memory:"],
        input=ANSWERS, capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "collect_email → collect_age" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "llm_fsm.cli.chat" in imported and not any(name.split(".")[0] == "litellm" for name in imported)


def test_run_produces_turns_the_same_each_time():
    args = ["run", FORM, "--model", "simulated", "--store", "memory:"]
    first = runner.invoke(app, args, input=ANSWERS)
    assert first.exit_code == 0, first.output
    lines = turns(first.stdout)
    assert [t["state"] for t in lines] == ["collect_name", "collect_email", "collect_age", "confirm"]
    assert all(t["llm_calls"] == 1 and not t["rejected"] for t in lines[1:])
    again = runner.invoke(app, args, input=ANSWERS)  # seed 0, as `llm-fsm test` makes it: deterministic
    assert [(t["state"], t["context"]) for t in turns(again.stdout)] == [(t["state"], t["context"]) for t in lines]


def test_no_model_names_the_simulated_a_real_and_the_local_model(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("LLM_FSM_MODEL", raising=False)
    result = runner.invoke(app, ["run", FORM], input="hi\n")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    error = result.stderr
    assert error.startswith("error: no model configured")
    assert "--model simulated" in error and "--model openai/gpt-4o-mini" in error
    assert "local model server" in error and "scripts/local-model start" in error


def test_eval_refuses_the_simulated_model_in_one_line():
    result = runner.invoke(app, ["eval", str(EXAMPLES / "quiz.json"), "-m", "simulated"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "the simulated model" in result.stderr and "give a real one" in result.stderr


def test_serve_talks_to_each_definition_with_its_simulated_model(monkeypatch: pytest.MonkeyPatch):
    import uvicorn
    from fastapi.testclient import TestClient

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda application, **options: seen.update(app=application))
    monkeypatch.setattr(serve_command, "can_listen", lambda host, port: None)
    monkeypatch.delenv("LLM_FSM_SERVER_TOKENS", raising=False)
    args = ["serve", str(EXAMPLES / "quiz.json"), FORM, "--model", "simulated", "--store", "memory:"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    http = TestClient(seen["app"])
    cid = http.post("/conversations", json={"definition": "form_filling"}).json()["id"]
    turn = http.post(f"/conversations/{cid}/messages", json={"message": "Maya Chen"})
    assert turn.status_code == 200, turn.text
    assert turn.json()["state"] == "collect_email"
    quiz = json.loads((EXAMPLES / "quiz.json").read_text())
    cid = http.post("/conversations", json={"definition": "quiz"}).json()["id"]
    turn = http.post(f"/conversations/{cid}/messages", json={"message": "ready"})  # the quiz's own model answers
    assert turn.status_code == 200 and turn.json()["state"] in quiz["states"] and not turn.json()["rejected"]


def test_a_simulated_model_that_keeps_little_forgets_old_requests_but_walks_the_same():
    # serve --model simulated runs for long: its models keep only recent requests and replies
    import llm_fsm
    from llm_fsm.testing.simulation import SimulatedLLM

    definition = llm_fsm.load(EXAMPLES / "small_talk.json")
    walks = []
    for keep in (None, 2):
        llm = SimulatedLLM(definition, seed=3, keep=keep)
        conversation = llm_fsm.Conversation(definition, llm)
        conversation.start()
        states = [conversation.send(f"line {i}").state for i in range(12) if not conversation.ended]
        walks.append((states, llm.calls))
        assert keep is None or len(llm.requests) <= 2 * keep and len(llm.replies) == len(llm.requests)
    assert walks[0] == walks[1] and walks[0][1] >= 2
