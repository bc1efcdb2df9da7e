"""``llm-fsm serve``: its options build the app the server runs (uvicorn.run is replaced, so nothing listens),
and it refuses what it cannot serve with one ``error:`` line; and a real ``llm-fsm serve`` process answers."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli import serve as serve_command
from tests.conftest import ROOT, SIGNUP

runner = CliRunner()
EXAMPLES = ROOT / "fsm_definitions"
TOKEN = "cli-token-0123456789abcdef"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``serve`` hands to uvicorn, instead of listening."""
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda application, **options: seen.update(app=application, **options))
    monkeypatch.setattr(serve_command, "can_listen", lambda host, port: None)  # nor does it probe the port
    monkeypatch.delenv("LLM_FSM_SERVER_TOKENS", raising=False)
    return seen


def serve(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["serve", *args], env=env)


def test_serve_builds_the_app_for_definitions_in_files_and_folders(served: dict[str, Any], tmp_path: Path):
    script = EXAMPLES / "scripts" / "form_filling.json"
    result = serve(
        str(EXAMPLES / "form_filling.json"), str(EXAMPLES), "--model", f"scripted:{script}",
        "--hooks", str(EXAMPLES / "hooks" / "restaurant_booking.py") + ":hooks",
        "--store", f"sqlite:{tmp_path / 'c.db'}", "--port", "8123", "--busy", "reject",
    )  # fmt: skip
    assert result.exit_code == 2, result.output  # two files give one definition twice
    assert "two definitions are named 'form_filling'" in result.output
    result = serve(
        str(EXAMPLES / "quiz.json"), str(EXAMPLES / "form_filling.json"),
        "--model", f"scripted:{script}", "--store", f"sqlite:{tmp_path / 'c.db'}", "--port", "8123",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert served["host"] == "127.0.0.1" and served["port"] == 8123
    assert "no tokens: loopback only" in result.output
    http = TestClient(served["app"])
    names = [d["name"] for d in http.get("/definitions").json()["definitions"]]
    assert sorted(names) == ["form_filling", "quiz"]
    created = http.post("/conversations", json={"definition": "form_filling"})
    assert created.status_code == 201 and created.json()["result"]["message"]


def test_serve_imports_litellm_before_it_listens(served: dict[str, Any]):
    """litellm takes seconds to import: at start, not in the first turn of the first user (while /health said ok)."""
    assert serve(str(EXAMPLES / "form_filling.json"), "-m", "openai/x", "--api-key", "k").exit_code == 0
    assert served["app"].state.service.llm._litellm is not None


def test_a_folder_serves_every_definition_in_it(served: dict[str, Any], tmp_path: Path):
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "signup.json").write_text(json.dumps(SIGNUP), encoding="utf-8")
    (folder / "signup.test.json").write_text("{}", encoding="utf-8")  # a test file: left out
    result = serve(str(folder), "--model", "scripted:" + str(EXAMPLES / "scripts" / "quiz.json"), "--store", "memory:")
    assert result.exit_code == 0, result.output
    assert [d["name"] for d in TestClient(served["app"]).get("/definitions").json()["definitions"]] == ["signup"]


def test_serve_refuses_what_it_cannot_serve(served: dict[str, Any], tmp_path: Path):
    model = ["--model", "scripted:" + str(EXAMPLES / "scripts" / "quiz.json"), "--store", "memory:"]
    quiz = str(EXAMPLES / "quiz.json")
    outside = serve(quiz, *model, "--host", "0.0.0.0")
    assert outside.exit_code == 2 and "no tokens configured" in outside.output and "0.0.0.0" in outside.output
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:short\n", encoding="utf-8")
    short = serve(quiz, *model, "--tokens-file", str(tokens))
    assert short.exit_code == 2 and f"{tokens}:1" in short.output and "shorter than 16" in short.output
    tools = serve(str(EXAMPLES / "restaurant_booking.json"), *model)  # its tools have no code without --hooks
    assert tools.exit_code == 2 and "error:" in tools.output and "check_availability" in tools.output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no definition files" in serve(str(empty), *model).output
    assert "no model configured" in serve(quiz, "--store", "memory:").output
    assert "Traceback" not in "".join(r.output for r in (outside, short, tools))
    assert served == {}  # nothing was served


def test_tokens_from_the_variable_allow_any_host(served: dict[str, Any]):
    model = ["--model", "scripted:" + str(EXAMPLES / "scripts" / "quiz.json"), "--store", "memory:"]
    result = serve(str(EXAMPLES / "quiz.json"), *model, "--host", "0.0.0.0", env={"LLM_FSM_SERVER_TOKENS": TOKEN})
    assert result.exit_code == 0, result.output
    assert "1 token(s)" in result.output
    http = TestClient(served["app"])
    assert http.get("/definitions").status_code == 401
    assert http.get("/definitions", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_an_ipv6_address_is_shown_as_a_url_writes_it(served: dict[str, Any]):
    model = ["--model", "scripted:" + str(EXAMPLES / "scripts" / "quiz.json"), "--store", "memory:"]
    result = serve(str(EXAMPLES / "quiz.json"), *model, "--host", "::1", "--port", "8123")
    assert result.exit_code == 0 and "on http://[::1]:8123 (" in result.output, result.output
    assert served["host"] == "::1"


def test_importing_llm_fsm_and_its_cli_loads_no_server_library():
    heavy = "('fastapi', 'starlette', 'uvicorn')"
    code = f"import sys, llm_fsm, llm_fsm.cli, llm_fsm.server; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
@contextlib.contextmanager
def serving(tmp_path: Path, script: Path) -> Iterator[tuple[str, list[str]]]:
    """A real ``llm-fsm serve`` process of form_filling on ``script`` and a free port: its base URL, and a list that
    holds its output (stdout and stderr) once it has stopped."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "llm-fsm"), "serve", str(EXAMPLES / "form_filling.json"),
        "--model", f"scripted:{script}", "--store", f"sqlite:{tmp_path / 'c.db'}", "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "LLM_FSM_HOME": str(tmp_path)}
    env.pop("LLM_FSM_SERVER_TOKENS", None)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output: list[str] = []
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(process, base)
        yield base, output
    finally:
        process.terminate()
        output.append(process.communicate(timeout=10)[0])


def wait_until_serving(process: subprocess.Popen[str], base: str, seconds: float = 30.0) -> None:
    """Until the ``llm-fsm serve`` process answers ``/health`` at ``base``; fails if it exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "llm-fsm serve did not start"
        time.sleep(0.1)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_2(tmp_path: Path, host: str):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as taken:
        try:
            taken.bind((host, 0))
        except OSError:
            pytest.skip(f"no {host} on this machine")
        taken.listen()
        port = taken.getsockname()[1]
        command = [
            sys.executable, str(ROOT / "cli.py"), "serve", str(EXAMPLES / "form_filling.json"),
            "--model", f"scripted:{EXAMPLES / 'scripts' / 'form_filling.json'}", "--host", host, "--port", str(port),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "LLM_FSM_SERVER_TOKENS"} | {"LLM_FSM_HOME": str(tmp_path)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    shown = f"[{host}]" if ":" in host else host
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: cannot listen on {shown}:{port}: the port is already in use: choose another with --port"
    ]


def test_a_real_serve_process_answers_over_http(tmp_path: Path):
    script = EXAMPLES / "scripts" / "form_filling.json"
    with serving(tmp_path, script) as (base, output):
        created = httpx.post(f"{base}/conversations", json={}).json()
        cid = created["id"]
        turn = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "I'm Maya"})
        assert turn.status_code == 200 and turn.json()["turn"] == 1
        assert httpx.get(f"{base}/conversations/{cid}").json()["turns"] == 1
        assert httpx.get(f"{base}/docs").status_code == 200
    assert "serving form_filling on http://127.0.0.1" in output[0]


def test_what_the_api_tells_only_in_kind_is_in_the_servers_log(tmp_path: Path):
    """The API says "the server's log has the provider's answer": the log of ``serve`` must have it."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([]))  # form_filling writes its own opening: the message finds no reply
    with serving(tmp_path, script) as (base, output):
        cid = httpx.post(f"{base}/conversations", json={}).json()["id"]
        failed = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "I'm Maya"})  # no reply left
        assert failed.status_code == 502 and "the server's log has" in failed.json()["error"]["message"]
    log = [line for line in output[0].splitlines() if "model call failed" in line]
    assert len(log) == 1 and log[0].startswith("WARNING:") and "no reply left" in log[0], output[0]


def test_the_serving_guide_example_works(served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import re
    import shlex

    guide = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    section = guide[guide.index("# Serving: `llm-fsm serve`") :]
    line = re.search(r"^llm-fsm (serve [^\n]+) &$", section, re.MULTILINE)
    assert line, "docs/serving.md shows a serve command"
    bodies = re.findall(r"-d '(\{[^']*\})'", section)
    monkeypatch.chdir(ROOT)
    args = [a.replace("sqlite:demo.db", f"sqlite:{tmp_path / 'demo.db'}") for a in shlex.split(line.group(1))]
    assert runner.invoke(app, args).exit_code == 0
    http = TestClient(served["app"])
    cid = http.post("/conversations", json=json.loads(bodies[0])).json()["id"]
    assert http.post(f"/conversations/{cid}/messages", json=json.loads(bodies[1])).json()["state"] == "collect_email"
    streamed = http.post(f"/conversations/{cid}/stream", json=json.loads(bodies[2]))
    assert "event: result" in streamed.text
    assert http.get(f"/conversations/{cid}").json()["turns"] == 2
    assert http.post(f"/conversations/{cid}/resume", json=json.loads(bodies[3])).status_code == 409  # not paused
    assert http.delete(f"/conversations/{cid}").status_code == 204
