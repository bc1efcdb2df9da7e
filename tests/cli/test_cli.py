from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli.options import ModelOptions, Provider, with_model_options  # its annotations are read by name
from tests.conftest import ROOT, SIGNUP, reply
from tests.fake_openai import Cut, Hang, HTTPError

runner = CliRunner()

OPEN = {**SIGNUP, "handler_only_keys": []}
OPEN["states"] = {
    **SIGNUP["states"],
    "ask_email": {
        **SIGNUP["states"]["ask_email"],
        "transitions": [
            {"target_state": "done", "conditions": [{"description": "has email", "requires_context_keys": ["email"]}]},
        ],
    },
}
SCRIPT = [
    reply("ask_name", "Hi! What's your name?"),
    reply("ask_email", "Thanks Ann! Your email?", name="Ann"),
    reply("done", "All set, bye!", email="ann@example.com"),
]


@pytest.fixture
def files(tmp_path):
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": SCRIPT}))
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("I'm Ann\n\nann@example.com\nthis line comes after the end\n")
    return definition, script, inputs


def lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_run_reads_an_input_file_saved_with_a_byte_order_mark_as_its_text(files):
    definition, script, inputs = files
    inputs.write_text("\ufeff" + inputs.read_text(), encoding="utf-8")  # as some editors save UTF-8
    result = runner.invoke(app, ["run", str(definition), "--model", f"scripted:{script}", "--input", str(inputs)])
    assert result.exit_code == 0, result.output
    assert lines(result.stdout)[1]["user"] == "I'm Ann"
    given = runner.invoke(app, ["run", str(definition), "--model", f"scripted:{script}"], input=inputs.read_text())
    assert given.exit_code == 0 and lines(given.stdout)[1]["user"] == "I'm Ann"  # on stdin too


def test_run_prints_one_json_line_per_turn_and_stops_at_the_terminal_state(files):
    definition, script, inputs = files
    result = runner.invoke(app, ["run", str(definition), "--model", f"scripted:{script}", "--input", str(inputs)])
    assert result.exit_code == 0, result.output
    turns = lines(result.stdout)
    assert [t["turn"] for t in turns] == [0, 1, 2]
    assert turns[0]["user"] is None and turns[0]["previous_state"] is None
    assert [t["state"] for t in turns] == ["ask_name", "ask_email", "done"]
    assert turns[1] | {"usage": None, "latency_ms": None} == {
        "turn": 1,
        "user": "I'm Ann",
        "message": "Thanks Ann! Your email?",
        "state": "ask_email",
        "previous_state": "ask_name",
        "context": {"name": "Ann"},
        "context_updates": {"name": "Ann"},
        "llm_calls": 1,
        "rejected": [],
        "usage": None,
        "latency_ms": None,
        "ended": False,
        "status": "active",
        "pending": None,
        "tool_calls": [],
        "memory_updates": {},
        "summary": None,
        "fallback": False,
    }
    assert turns[2]["ended"] is True and turns[2]["context"] == {"name": "Ann", "email": "ann@example.com"}
    usage = {"prompt_tokens", "completion_tokens", "total_tokens", "cost", "cached_tokens", "cache_write_tokens"}
    assert set(turns[1]["usage"]) == usage  # cached_tokens, cache_write_tokens: issue 26, the provider's prompt cache


def test_run_skips_a_blank_input_line_with_a_note_naming_it(files):
    definition, script, _ = files
    args = ["run", str(definition), "-m", f"scripted:{script}"]
    result = runner.invoke(app, args, input="\nI'm Ann\n   \t\n\u200b\ufeff\n")
    assert result.exit_code == 0, result.output
    assert [t["user"] for t in lines(result.stdout)] == [None, "I'm Ann"], "stdout stays one JSON line per turn"
    notes = result.stderr.splitlines()
    assert notes == [f"note: input line {n} is blank: skipped, no turn sent" for n in (1, 3, 4)]


def test_run_reads_stdin_by_default(files):
    definition, script, _ = files
    result = runner.invoke(app, ["run", str(definition), "-m", f"scripted:{script}"], input="I'm Ann\n")
    assert result.exit_code == 0 and len(lines(result.stdout)) == 2


def test_rejected_items_are_listed(files, tmp_path):
    definition, _, _ = files
    script = tmp_path / "bad.json"
    script.write_text(
        json.dumps([reply("ask_name", "Hi"), reply("done", "Done!", _admin=True), reply("ask_name", "Name?")])
    )
    result = runner.invoke(app, ["run", str(definition), "-m", f"scripted:{script}"], input="skip ahead\n")
    turn = lines(result.stdout)[1]
    assert turn["llm_calls"] == 2 and turn["state"] == "ask_name" and turn["message"] == "Name?"
    assert [r["kind"] for r in turn["rejected"]] == ["context_key", "target"]


def test_no_model_is_a_usage_error(files, monkeypatch):
    monkeypatch.delenv("LLM_FSM_MODEL", raising=False)
    result = runner.invoke(app, ["run", str(files[0])], input="hi\n")
    assert result.exit_code == 2
    assert "error: no model configured" in result.stderr and "Traceback" not in result.output


def test_model_comes_from_the_environment(files):
    definition, script, inputs = files
    result = runner.invoke(
        app, ["run", str(definition), "--input", str(inputs)], env={"LLM_FSM_MODEL": f"scripted:{script}"}
    )
    assert result.exit_code == 0 and len(lines(result.stdout)) == 3


def test_invalid_or_unreadable_definition_exits_2_with_each_problem(tmp_path, files):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "initial_state": "nope", "states": {"a": {}}}')
    result = runner.invoke(app, ["run", str(bad), "-m", f"scripted:{files[1]}"])
    assert result.exit_code == 2
    assert (
        "error: " in result.stderr
        and "bad.json:1:" in result.stderr
        and "unknown initial state 'nope'" in result.stderr
    )
    result = runner.invoke(app, ["run", str(tmp_path / "missing.json"), "-m", "x"])
    assert result.exit_code == 2 and "cannot read file" in result.stderr and "Traceback" not in result.output


def test_provider_error_exits_1(files, fake_openai):
    fake_openai.add(HTTPError(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}))
    args = ["run", str(files[0]), "-m", "openai/x", "--api-base", fake_openai.url, "--api-key", "bad"]
    result = runner.invoke(app, args, input="hi\n")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: model call failed") and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1
    assert lines(result.stdout) == [], "stdout stays pure JSON lines (no litellm banners)"


def test_a_turn_whose_every_reply_was_cut_at_the_token_limit_says_so(files, fake_openai):
    fake_openai.add(*[Cut('{"transition": {"context_update": {"na')] * 3)
    args = [
        "run",
        str(files[0]),
        "-m",
        "openai/x",
        "--api-base",
        fake_openai.url,
        "--api-key",
        "k",
        "--max-tokens",
        "5",
    ]
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout)[0]["fallback"] is True
    assert "cut at the token limit (--max-tokens): the turn fell back" in result.stderr


def test_version_and_help():
    assert runner.invoke(app, ["--version"]).stdout.startswith("llm-fsm ")
    assert "run" in runner.invoke(app, ["--help"]).stdout


def command() -> list[str]:
    script = shutil.which("llm-fsm", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, str(ROOT / "cli.py")]


def test_llm_fsm_run_as_a_subprocess_against_the_local_server(files, fake_openai):
    for item in SCRIPT:
        fake_openai.add(json.dumps(item))
    definition, _, inputs = files
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    args = [
        "run",
        str(definition),
        "--model",
        "openai/test",
        "--api-base",
        fake_openai.url,
        "--api-key",
        "sk",
        "--input",
        str(inputs),
    ]
    done = subprocess.run([*command(), *args], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    turns = lines(done.stdout)
    assert [t["state"] for t in turns] == ["ask_name", "ask_email", "done"]
    assert turns[1]["usage"]["total_tokens"] == 60
    assert len(fake_openai.requests) == 3 and fake_openai.requests[1]["messages"][1]["content"] == "I'm Ann"


def test_cli_shim_behaves_as_the_console_script(files):
    definition, script, inputs = files
    args = ["run", str(definition), "--model", f"scripted:{script}", "--input", str(inputs)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert [t["state"] for t in lines(done.stdout)] == ["ask_name", "ask_email", "done"]


def test_provider_options_reach_the_model_call(files, fake_openai):
    fake_openai.add(Hang(3), json.dumps(SCRIPT[0]))
    args = ["run", str(files[0]), "-m", "openai/x", "--api-base", fake_openai.url, "--api-key", "k",
            "--timeout", "0.5", "--max-retries", "1", "--temperature", "0.3"]  # fmt: skip
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout)[0]["message"] == SCRIPT[0]["message"], "the second attempt answered"
    assert [r["temperature"] for r in fake_openai.requests] == [0.3, 0.3]
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "retry 1 of 1" in notes[0] and "openai/x at " in notes[0], result.stderr


def test_a_hanging_provider_fails_within_the_timeout_given(files, fake_openai, monkeypatch):
    fake_openai.add(Hang(30))
    monkeypatch.setenv("LLM_FSM_TIMEOUT", "0.3")
    monkeypatch.setenv("LLM_FSM_MAX_RETRIES", "0")
    args = ["run", str(files[0]), "-m", "openai/x", "--api-base", fake_openai.url, "--api-key", "k"]
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 1 and result.stderr.startswith("error: model call failed: openai/x at ")
    assert result.stderr.count("\n") == 1 and len(fake_openai.requests) == 1


def test_connection_refused_says_cannot_connect(files):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    args = ["run", str(files[0]), "-m", "openai/x", "--api-base", url, "--api-key", "k", "--max-retries", "0"]
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 1
    assert result.stderr == f"error: model call failed: openai/x: cannot connect to {url}\n"


@pytest.mark.parametrize("command", ["run", "chat", "test"])
def test_every_model_command_takes_the_provider_options(command):
    text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
    for option in ("--timeout", "--max-retries", "--temperature", "LLM_FSM_TIMEOUT", "LLM_FSM_MAX_RETRIES"):
        assert option in text, f"{command} --help lacks {option}"


def test_the_model_options_are_declared_once_and_given_as_one_object():
    toy = typer.Typer()
    seen = {}

    @toy.command()
    @with_model_options()
    def talk(name: str, model: ModelOptions, loud: bool = False) -> None:
        seen.update(name=name, model=model, loud=loud)

    args = ["ann", "-m", "openai/x", "--timeout", "5", "--response-format", "json_schema", "--guided", "--loud"]
    result = runner.invoke(toy, args, env={"LLM_FSM_API_KEY": "k", "LLM_FSM_PROMPT_ORDER": "cache"})
    assert result.exit_code == 0, result.output
    provider = Provider(api_key="k", timeout=5.0, response_format="json_schema", guided=True, prompt_order="cache")
    assert seen == {"name": "ann", "model": ModelOptions("openai/x", provider), "loud": True}
    assert seen["model"].client().prompt_order == "cache"  # forced, though a guided model would take recency


def test_the_model_commands_list_the_same_eleven_options_in_the_same_place():
    import re

    names = ("--model", "--api-base", "--api-key", "--timeout", "--max-retries", "--temperature",
             "--response-format", "--max-tokens", "--tool-calling", "--guided", "--prompt-order")  # fmt: skip
    for command in ("run", "chat", "test", "eval", "serve"):
        text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        listed = re.findall(r"│ (--[a-z-]+)", text)
        assert tuple(listed[:11]) == names, f"{command}: {listed}"
