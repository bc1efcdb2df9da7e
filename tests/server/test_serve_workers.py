"""``llm-fsm serve --workers N``: several processes on one port share conversations through the store.

In-process tests check what the command hands uvicorn and that each worker's app is the one the command
built; the slow ones run two real worker processes on Redis and on PostgreSQL and send them concurrent
turns of one conversation."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli.serve import SETTINGS_VARIABLE, worker_app
from tests.conftest import reply
from tests.postgres_server import free_port
from tests.store.test_store import CHAT, url_for

runner = CliRunner()
TOKEN = "workers-token-0123456789abcdef"


@pytest.fixture
def definition(tmp_path: Path) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT), encoding="utf-8")
    return path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``serve`` hands to uvicorn, instead of listening; the settings variable is restored afterwards."""
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda application, **options: seen.update(app=application, **options))
    monkeypatch.delenv("LLM_FSM_SERVER_TOKENS", raising=False)
    monkeypatch.delenv(SETTINGS_VARIABLE, raising=False)
    return seen


def scripted(tmp_path: Path, replies: int) -> str:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([reply("chat", f"reply {n}") for n in range(replies)]), encoding="utf-8")
    return f"scripted:{script}"


def test_several_workers_refuse_a_store_that_lives_in_one_process(served, definition, tmp_path):
    result = runner.invoke(app, ["serve", str(definition), "--model", scripted(tmp_path, 1), "--store", "memory:",
                                 "--workers", "2"])  # fmt: skip
    assert result.exit_code == 2 and "app" not in served
    assert "error: --workers 2 needs a store the worker processes share, and memory: keeps" in result.output
    assert "redis://... or postgresql://..." in result.output


def test_each_worker_builds_the_app_the_command_built(served, definition, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_FSM_SERVER_TOKENS", TOKEN)
    store = f"sqlite:{tmp_path / 'c.db'}"
    args = ["serve", str(definition), "--model", scripted(tmp_path, 2), "--store", store, "--workers", "3",
            "--host", "0.0.0.0", "--busy", "reject", "--max-body", "300"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (served["app"], served["factory"], served["workers"]) == ("llm_fsm.cli.serve:worker_app", True, 3)
    assert served["host"] == "0.0.0.0" and "3 worker processes" in result.output
    first, second = TestClient(worker_app()), TestClient(worker_app())  # two workers' apps, one store
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert first.post("/conversations", json={}).status_code == 401, "the tokens are the command's"
    created = first.post("/conversations", json={}, headers=auth).json()
    turn = second.post(f"/conversations/{created['id']}/messages", json={"message": "hi"}, headers=auth)
    assert turn.status_code == 200 and turn.json()["turn"] == 1, "the other worker continues the conversation"
    too_long = second.post(f"/conversations/{created['id']}/messages", json={"message": "x" * 400}, headers=auth)
    assert too_long.status_code == 413, "the body limit is the command's"


def test_a_worker_without_the_commands_settings_says_so(monkeypatch):
    monkeypatch.setenv(SETTINGS_VARIABLE, "{not json")
    with pytest.raises(RuntimeError, match=f"\\${SETTINGS_VARIABLE} does not hold the settings of llm-fsm serve"):
        worker_app()


# -- real worker processes ------------------------------------------------------------------------------


def start_workers(
    definition: Path, model_url: str, store: str, busy: str, tmp_path: Path, *, extra: list[str] | None = None
) -> tuple[Any, str]:
    """``llm-fsm serve`` with 2 workers (``extra`` options after the others, e.g. ``--workers 1``), in a process
    group of its own; the process and its base URL, once it answers."""
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "llm-fsm"), "serve", str(definition), "--model", "openai/x",
        "--api-base", model_url, "--api-key", "k", "--store", store, "--port", str(port), "--workers", "2",
        "--busy", busy, "--wait", "60", "--max-retries", "0", *(extra or []),
    ]  # fmt: skip
    env = {**os.environ, "LLM_FSM_HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("LLM_FSM_SERVER_TOKENS", None)
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"llm-fsm serve --workers 2 did not start:\n{(tmp_path / 'serve.log').read_text()}")
        time.sleep(0.1)


async def concurrent_turns(base: str, cid: str, n: int) -> list[tuple[str, int]]:
    """``n`` messages on one conversation at once, each on a connection of its own (any worker may take it)."""

    async def one(k: int) -> tuple[str, int]:
        async with httpx.AsyncClient(timeout=120) as client:
            response = await client.post(f"{base}/conversations/{cid}/messages", json={"message": f"m{k}"})
            return f"m{k}", response.status_code

    return await asyncio.gather(*(one(k) for k in range(n)))


@pytest.mark.slow
@pytest.mark.parametrize("kind, busy", [("postgres", "queue"), ("redis", "reject")])
def test_two_worker_processes_serialise_the_turns_of_one_conversation(
    kind, busy, definition, tmp_path, request, fake_openai
):
    fake_openai.default = json.dumps(reply("chat", "ok"))
    fake_openai.delay = 0.2  # each model call holds the conversation for a while
    process, base = start_workers(definition, fake_openai.url, url_for(kind, tmp_path, request), busy, tmp_path)
    try:
        cid = httpx.post(f"{base}/conversations", json={}, timeout=60).json()["id"]
        httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "warm-up"}, timeout=60)  # litellm loaded
        outcomes = asyncio.run(concurrent_turns(base, cid, 8))
        conversation = httpx.get(f"{base}/conversations/{cid}").json()
    finally:
        process.terminate()
        process.wait(timeout=30)
    log = (tmp_path / "serve.log").read_text()
    assert len(set(re.findall(r"Started server process \[(\d+)\]", log))) == 2, log
    statuses = {status for _, status in outcomes}
    saved = [e["user"] for e in conversation["history"]][2:]  # after the opening turn and the warm-up
    answered = [message for message, status in outcomes if status == 200]
    if busy == "queue":
        assert statuses == {200}, outcomes
    else:
        assert statuses == {200, 409} and answered, outcomes  # refused at once while another turn held it
    assert sorted(saved) == sorted(answered), "every answered turn saved once, no refused one saved"
    assert conversation["turns"] == len(answered) + 1 and conversation["version"] == len(answered) + 2


@pytest.mark.slow
def test_workers_killed_mid_turn_are_replaced_and_the_conversation_goes_on(definition, tmp_path, request, fake_openai):
    import signal

    fake_openai.default = json.dumps(reply("chat", "ok"))
    fake_openai.delay = 1.0  # the turn is still waiting for the model when its worker dies
    store = url_for("postgres", tmp_path, request)
    process, base = start_workers(definition, fake_openai.url, store, "queue", tmp_path)
    try:
        cid = httpx.post(f"{base}/conversations", json={}, timeout=60).json()["id"]
        workers = [
            int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", (tmp_path / "serve.log").read_text())
        ]

        async def killed_turn() -> BaseException | int:
            async with httpx.AsyncClient(timeout=60) as client:
                pending = asyncio.ensure_future(
                    client.post(f"{base}/conversations/{cid}/messages", json={"message": "lost"})
                )
                await asyncio.sleep(0.5)
                for pid in workers:
                    os.kill(pid, signal.SIGKILL)
                try:
                    return (await pending).status_code
                except httpx.HTTPError as exc:
                    return exc

        outcome = asyncio.run(killed_turn())
        deadline = time.monotonic() + 60
        while True:  # the supervisor starts new workers
            try:
                after = httpx.post(f"{base}/conversations/{cid}/messages", json={"message": "after"}, timeout=60)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "no worker came back"
                time.sleep(0.2)
        history = [e["user"] for e in httpx.get(f"{base}/conversations/{cid}").json()["history"]]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert isinstance(outcome, httpx.HTTPError), f"the killed turn was answered: {outcome}"
    assert after.status_code == 200, after.text  # within the lease the killed turn's lock held (5 s), then free
    assert history == [None, "after"], "the killed turn left nothing behind"
