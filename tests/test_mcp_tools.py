"""MCP tools in conversations: a definition's mcp_servers, --mcp, against the real test server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.cli import app
from llm_fsm.errors import DefinitionError
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from llm_fsm.tools.mcp import MCPError, connect

pytestmark = pytest.mark.slow  # every test here starts an MCP server process

SERVER = Path(__file__).resolve().parent / "data" / "mcp_server.py"


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
