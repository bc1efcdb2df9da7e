"""MCP tools in conversations: a definition's mcp_servers, --mcp, against the real test server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.cli import app
from llm_fsm.errors import DefinitionError
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from llm_fsm.tools.mcp import MCPError, MCPServer, connect
from tests.conftest import wait_for

pytestmark = pytest.mark.slow  # every test here starts an MCP server process

SERVER = Path(__file__).resolve().parents[1] / "data" / "mcp_server.py"


def shop(**top):
    return {
        "name": "shop",
        "initial_state": "help",
        "tools": {"lookup_order": {"description": "Find an order", "result_key": "order", "mcp_server": "orders"}},
        "states": {
            "help": {
                "purpose": "Answer questions about orders",
                "tools": ["lookup_order"],
                "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["order"]}]}],
            },
            "done": {"purpose": "Say goodbye"},
        },
        **top,
    }


SCRIPT = [reply("help", "Which order?"), tool_calls(("lookup_order", {"order_id": "A1"})), reply("done", "Shipped.")]


@pytest.fixture
def definition(tmp_path):
    (tmp_path / "mcp_server.py").write_text(SERVER.read_text())
    data = shop(mcp_servers={"orders": {"command": [sys.executable, "mcp_server.py"]}})
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(data))
    return path


def test_a_definitions_mcp_server_serves_its_tools_in_a_conversation(definition):
    fsm = llm_fsm.load(definition)
    hooks = Hooks()
    with pytest.raises(DefinitionError, match="or an MCP server that serves it"):
        llm_fsm.Conversation(fsm, ScriptedLLM(), hooks=hooks)
    servers = connect(fsm, hooks, relative_to=definition.parent)  # the server file sits next to the definition
    try:
        llm = ScriptedLLM(SCRIPT)
        conversation = llm_fsm.Conversation(fsm, llm, hooks=hooks)
        conversation.start()
        result = conversation.send("Where is A1?")
        assert result.state == "done" and conversation.context["order"]["status"] == "shipped"
        assert llm.requests[1].tools[0]["function"]["parameters"]["required"] == ["order_id"]  # the server's schema

        async def talk():
            other = llm_fsm.Conversation(fsm, ScriptedLLM(SCRIPT), hooks=hooks)
            await other.astart()
            return await other.asend("Where is A1?")

        assert asyncio.run(talk()).state == "done"
        failing = llm_fsm.Conversation(
            fsm,
            ScriptedLLM([*SCRIPT[:1], tool_calls(("lookup_order", {"order_id": "Z9"})), reply("help", "Not found.")]),
            hooks=hooks,
        )
        failing.start()
        missing = failing.send("Z9?")
        assert "no order Z9" in missing.tool_calls[0].error and missing.rejected[0].kind == "tool"
    finally:
        for server in servers:
            server.close()


def test_connect_says_which_tool_a_server_lacks(definition, tmp_path):
    data = shop(mcp_servers={"orders": {"command": [sys.executable, str(SERVER)]}})
    data["tools"] = {"lookup_ordr": {"mcp_server": "orders"}}
    data["states"]["help"]["tools"] = ["lookup_ordr"]
    fsm = llm_fsm.load(data)
    with pytest.raises(MCPError, match=r"has no tool 'lookup_ordr' \(did you mean 'lookup_order'\?\)"):
        connect(fsm, Hooks())


def test_run_and_chat_start_the_definitions_servers_and_those_of_mcp(definition, tmp_path):
    runner = CliRunner()
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    result = runner.invoke(app, ["run", str(definition), "-m", f"scripted:{script}"], input="Where is A1?\n")
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0, result.output
    assert turns[1]["tool_calls"][0]["result"]["status"] == "shipped" and turns[1]["state"] == "done"
    plain = tmp_path / "plain.json"
    data = shop()
    del data["tools"]["lookup_order"]["mcp_server"]
    plain.write_text(json.dumps(data))
    args = ["run", str(plain), "-m", f"scripted:{script}", "--mcp", f"{sys.executable} {SERVER}"]
    result = runner.invoke(app, args, input="Where is A1?\n")
    assert result.exit_code == 0, result.output
    broken = runner.invoke(app, ["run", str(plain), "-m", f"scripted:{script}", "--mcp", "no-such-command-xyz"])
    assert broken.exit_code == 2 and "cannot start the MCP server 'no-such-command-xyz'" in broken.stderr
    chat = runner.invoke(app, ["chat", str(definition), "-m", f"scripted:{script}"], input="Where is A1?\n")
    assert chat.exit_code == 0 and '🔧 lookup_order({"order_id": "A1"})' in chat.stdout, chat.output


def test_the_cli_stops_the_servers_it_started_when_the_command_ends(definition, tmp_path):
    before = {thread for thread in threading.enumerate() if thread.name.startswith("mcp ")}
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    result = CliRunner().invoke(app, ["run", str(definition), "-m", f"scripted:{script}"], input="Where is A1?\n")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[1])["tool_calls"][0]["result"]["status"] == "shipped"
    left = {thread for thread in threading.enumerate() if thread.name.startswith("mcp ")} - before
    assert not left  # not at interpreter exit: a test run (or an app embedding the CLI) goes on long after


# servers that die, calls that time out


def two_tools(**tools):
    """``shop`` whose help state offers ``lookup_order`` and the test server's ``tools``."""
    data = shop()
    del data["tools"]["lookup_order"]["mcp_server"]
    data["tools"].update(tools)
    data["states"]["help"]["tools"] = ["lookup_order", *tools]
    return llm_fsm.load(data)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_server_that_dies_in_a_turn_is_a_tool_rejection_and_the_next_turn_starts_it_again(driver):
    fsm = two_tools(crash={"description": "Crash the server"})
    hooks = Hooks()
    (server,) = connect(fsm, hooks, servers=[MCPServer([sys.executable, str(SERVER)], name="orders")])
    script = [
        reply("help", "Which order?"),
        tool_calls("crash"),
        reply("help", "Something broke; ask again?"),
        tool_calls(("lookup_order", {"order_id": "A1"})),
        reply("done", "Shipped."),
    ]
    conversation = llm_fsm.Conversation(fsm, ScriptedLLM(script), hooks=hooks)

    def send(text):
        return conversation.send(text) if driver == "sync" else asyncio.run(conversation.asend(text))

    try:
        conversation.start()
        broken = send("Where is A1?")  # the turn completes: the model reads the failure
        assert broken.state == "help" and broken.rejected[0].kind == "tool"
        assert "the MCP server 'orders' exited" in broken.tool_calls[0].error
        fixed = send("Again?")  # its call starts the server again
        assert fixed.state == "done" and fixed.tool_calls[0].result["status"] == "shipped"
        assert server.down is None
    finally:
        server.close()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_mcp_call_carries_its_idempotency_key_in_the_requests_meta(driver):
    fsm = two_tools(request_meta={"description": "What the server received"})
    hooks = Hooks()
    (server,) = connect(fsm, hooks, servers=[MCPServer([sys.executable, str(SERVER)], name="orders")])
    script = [reply("help", "Which order?"), tool_calls(("request_meta", {"note": "n"})), reply("help", "Seen.")]
    conversation = llm_fsm.Conversation(fsm, ScriptedLLM(script), hooks=hooks)
    try:
        conversation.start()
        result = conversation.send("?") if driver == "sync" else asyncio.run(conversation.asend("?"))
    finally:
        server.close()
    (run,) = result.tool_calls
    assert run.error is None and run.idempotency_key.startswith("llmfsm-")
    assert run.result == {"note": "n", "meta": {"idempotency_key": run.idempotency_key}}  # not among the arguments


def test_an_mcp_tool_with_its_own_idempotency_key_argument_gets_the_calls_key():
    # The runtime's keyword is named idempotency_key too: the tool's own argument must still reach the server.
    fsm = two_tools(charge={"description": "Charge"})
    hooks = Hooks()
    (server,) = connect(fsm, hooks, servers=[MCPServer([sys.executable, str(SERVER)], name="orders")])
    asked = tool_calls(("charge", {"amount": 5, "idempotency_key": "the-models-guess"}))
    conversation = llm_fsm.Conversation(fsm, ScriptedLLM([reply("help", "Which order?"), asked, reply("help", "ok")]),
                                        hooks=hooks)  # fmt: skip
    try:
        conversation.start()
        (run,) = conversation.send("charge 5").tool_calls
    finally:
        server.close()
    assert run.error is None and run.idempotency_key.startswith("llmfsm-")
    assert run.result == {"amount": 5, "idempotency_key": run.idempotency_key, "meta_key": run.idempotency_key}


def test_a_call_that_timed_out_is_cancelled_on_the_server_at_the_tools_timeout():
    fsm = two_tools(slow={"description": "Slow", "timeout": 1})
    hooks = Hooks()
    server = MCPServer([sys.executable, str(SERVER)], name="orders", timeout=120)  # its own limit: far away
    connect(fsm, hooks, servers=[server])
    script = [reply("help", "Which order?"), tool_calls(("slow", {"seconds": 600})), reply("help", "Too slow.")]
    conversation = llm_fsm.Conversation(fsm, ScriptedLLM(script), hooks=hooks)
    try:
        conversation.start()
        result = conversation.send("Where is A1?")  # the sync API: the call ran in a worker thread
        assert "timed out after 1 s" in result.tool_calls[0].error
        # the call was cancelled (the server was told), not left to run until the server's own 120 s
        assert wait_for(lambda: any(line.startswith("slow cancelled") for line in server.stderr), 60)
        assert not server._inflight
    finally:
        server.close()


def test_run_exits_when_its_turn_ends_after_a_call_that_timed_out(tmp_path):
    (tmp_path / "mcp_server.py").write_text(SERVER.read_text())
    data = shop(mcp_servers={"orders": {"command": [sys.executable, "mcp_server.py"]}})
    data["tools"] = {"slow": {"description": "Slow", "timeout": 1, "mcp_server": "orders"}}
    data["states"]["help"]["tools"] = ["slow"]
    (tmp_path / "slow.json").write_text(json.dumps(data))
    script = [reply("help", "Hi"), tool_calls(("slow", {"seconds": 600})), reply("help", "Too slow.")]
    (tmp_path / "replies.json").write_text(json.dumps(script))
    command = [sys.executable, "-c", "from llm_fsm.cli import entry_point; entry_point()", "run", "slow.json"]
    command += ["-m", "scripted:replies.json"]
    # before, the process waited out the server's 30 s call timeout after its last line: a bound below that
    done = subprocess.run(command, input="slow\n", capture_output=True, text=True, cwd=tmp_path, timeout=25)
    assert done.returncode == 0, done.stderr
    assert "timed out after 1 s" in json.loads(done.stdout.splitlines()[1])["rejected"][0]["reason"]
    assert "never retrieved" not in done.stderr


# serve's readiness


def test_ready_names_the_mcp_servers_that_are_down_and_brings_them_back(tmp_path):
    from fastapi.testclient import TestClient

    from llm_fsm.server import create_app

    crash = tmp_path / "crash"
    fsm = two_tools()
    hooks = Hooks()
    server = MCPServer([sys.executable, str(SERVER)], env={"MCP_TEST_CRASH_IF": str(crash)}, name="orders")
    connect(fsm, hooks, servers=[server])
    http = TestClient(create_app([fsm], ScriptedLLM(), hooks=hooks, store="memory:", mcp_servers=[server]))
    try:
        assert http.get("/ready").json() == {"status": "ready", "mcp_servers_down": []}
        crash.touch()  # it cannot come back yet
        os.kill(server.call("whoami", {})["pid"], signal.SIGKILL)
        assert wait_for(lambda: server.down is not None)
        down = http.get("/ready")
        assert (down.status_code, down.json()) == (503, {"status": "not ready", "mcp_servers_down": ["orders"]})
        assert http.get("/health").status_code == 200  # alive all the same: no restart of the process needed
        crash.unlink()
        assert wait_for(lambda: http.get("/ready").status_code == 200)  # the probe restarted it (backoff allowing)
        assert server.call("lookup_order", {"order_id": "A1"})["status"] == "shipped"
    finally:
        server.close()


def test_serve_reports_its_definitions_servers_in_ready_and_stops_them_at_the_end(tmp_path, monkeypatch):
    import uvicorn
    from fastapi.testclient import TestClient

    crash = tmp_path / "crash"
    (tmp_path / "mcp_server.py").write_text(SERVER.read_text())
    command = [sys.executable, "mcp_server.py"]
    data = shop(mcp_servers={"orders": {"command": command, "env": {"MCP_TEST_CRASH_IF": str(crash)}}})
    (tmp_path / "shop.json").write_text(json.dumps(data))
    (tmp_path / "replies.json").write_text("[]")
    seen = {}

    def serving(application, **options):  # instead of listening: what a probe sees while the server runs
        http = TestClient(application)
        (server,) = seen["servers"] = application.state.service.mcp_servers  # the one the command started
        seen["ready"] = http.get("/ready").json()
        crash.touch()
        os.kill(server.call("whoami", {})["pid"], signal.SIGKILL)
        assert wait_for(lambda: server.down is not None)
        seen["down"] = http.get("/ready").json()

    monkeypatch.setattr(uvicorn, "run", serving)
    monkeypatch.delenv("LLM_FSM_SERVER_TOKENS", raising=False)
    args = ["serve", str(tmp_path / "shop.json"), "-m", f"scripted:{tmp_path / 'replies.json'}", "--store", "memory:"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen["ready"] == {"status": "ready", "mcp_servers_down": []}
    assert seen["down"] == {"status": "not ready", "mcp_servers_down": ["orders"]}
    assert seen["servers"][0].down is None and "closed" in repr(seen["servers"][0])  # stopped with the command
