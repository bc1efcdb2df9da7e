"""llm_fsm.tools.mcp against a real MCP server (tests/data/mcp_server.py) over stdio, streamable HTTP and SSE."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.errors import FSMError
from llm_fsm.tools import mcp
from llm_fsm.tools.mcp import Backoff, MCPError, MCPServer, MCPTool, MCPToolError, tool_result
from tests.conftest import wait_for

pytestmark = pytest.mark.slow  # every test here starts server processes

DATA = Path(__file__).resolve().parents[1] / "data"
SERVER = str(DATA / "mcp_server.py")
COMMAND = [sys.executable, SERVER]


def thread_alive(server: MCPServer) -> bool:
    """Whether the server's background thread is still running."""
    return any(t.name == f"mcp {server.name}" for t in threading.enumerate())


def process_gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped counts), waiting up to ``within`` seconds: the
    call's error comes when the pipe closes, which can be a moment before the process is gone."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:  # "pid (name) Z ...": exited, waiting to be reaped
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def overlapping(results: list[dict[str, Any]]) -> bool:
    """Whether every call started before any call ended: they ran at the same time on the server."""
    return max(r["started"] for r in results) < min(r["ended"] for r in results)


@pytest.fixture(scope="module")
def stdio() -> Iterator[MCPServer]:
    with MCPServer(COMMAND, env={"MCP_TEST_GREETING": "hello"}, name="orders") as server:
        yield server


def http_server(transport: str, port: int | None = None) -> Iterator[str]:
    """The test server as a subprocess on ``port`` (default: a free one); yields its URL once it accepts connections."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, f"--{transport}", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"the {transport} test server exited with {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the {transport} test server did not listen on port {port}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    yield from http_server("http")


# listing tools


def test_tools_carry_their_json_schemas(stdio: MCPServer) -> None:
    tools = {tool.name: tool for tool in stdio.tools()}
    assert {"lookup_order", "check_availability", "slow", "fail", "whoami"} <= set(tools)
    order = tools["lookup_order"]
    assert isinstance(order, MCPTool)
    assert order.description == "Look up an order by its id."
    assert order.parameters["type"] == "object"
    assert order.parameters["properties"]["order_id"]["type"] == "string"
    assert order.parameters["required"] == ["order_id"]
    availability = tools["check_availability"].parameters
    assert availability["properties"]["guests"]["type"] == "integer"
    assert sorted(availability["required"]) == ["date", "guests"]


# results


def test_sync_call_returns_structured_content(stdio: MCPServer) -> None:
    assert stdio.call("lookup_order", {"order_id": "A1"}) == {"order_id": "A1", "status": "shipped", "items": 2}


def test_text_results_become_json_data_or_text(stdio: MCPServer) -> None:
    assert stdio.call("check_availability", {"date": "2025-06-01", "guests": 2}) == {
        "date": "2025-06-01",
        "guests": 2,
        "available": True,
    }
    assert stdio.call("greet", {"name": "Ada"}) == "Hello, Ada!"
    assert stdio.call("two_lines", {}) == ["first", "second"]


def test_stdio_server_gets_the_env_it_was_given(stdio: MCPServer) -> None:
    assert stdio.call("whoami", {})["greeting"] == "hello"


def test_other_content_is_described_not_dumped() -> None:
    image = {"type": "image", "data": "A" * 400, "mimeType": "image/png"}
    assert tool_result({"content": [image]}) == {"type": "image", "mime_type": "image/png", "bytes": 300}
    assert tool_result({"content": []}) is None
    link = {"type": "resource_link", "uri": "file:///a.txt", "name": "a"}
    assert tool_result({"content": [{"type": "text", "text": "see"}, link]}) == [
        "see",
        {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
    ]


def test_async_call_from_a_callers_event_loop(stdio: MCPServer) -> None:
    async def main() -> Any:
        return await stdio.acall("lookup_order", {"order_id": "B2"})

    assert asyncio.run(main())["status"] == "processing"
    assert asyncio.run(main())["status"] == "processing"  # a second, different event loop


def test_concurrent_async_calls_overlap(stdio: MCPServer) -> None:
    async def main() -> list[Any]:
        ticks = 0

        async def tick() -> None:  # the caller's loop keeps running while the calls wait
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        results = await asyncio.gather(*(stdio.acall("slow", {"seconds": 0.3}) for _ in range(5)))
        ticker.cancel()
        assert ticks > 5
        return list(results)

    results = asyncio.run(main())
    assert len(results) == 5
    assert overlapping(results)


def test_concurrent_sync_calls_from_threads_overlap(stdio: MCPServer) -> None:
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(stdio.call("slow", {"seconds": 0.3}))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    assert overlapping(results)


# errors of one call: the session stays usable


def test_a_tool_error_raises_mcp_tool_error(stdio: MCPServer) -> None:
    with pytest.raises(MCPToolError, match="the kitchen is on fire") as caught:
        stdio.call("fail", {})
    assert "\n" not in str(caught.value)
    assert caught.value.tool == "fail"
    assert isinstance(caught.value, FSMError)
    with pytest.raises(MCPToolError, match="no order ZZ"):
        stdio.call("lookup_order", {"order_id": "ZZ"})
    assert stdio.call("lookup_order", {"order_id": "A1"})["status"] == "shipped"


def test_bad_arguments_are_a_tool_error(stdio: MCPServer) -> None:
    with pytest.raises(MCPToolError, match="lookup_order") as caught:
        stdio.call("lookup_order", {})
    assert "\n" not in str(caught.value)


def test_unknown_tool_suggests_the_closest_name(stdio: MCPServer) -> None:
    with pytest.raises(MCPToolError, match=r"has no tool 'lookup_ordr' \(did you mean 'lookup_order'\?\)"):
        stdio.call("lookup_ordr", {"order_id": "A1"})
    with pytest.raises(MCPToolError, match="has no tool 'zzz' .*it has .*whoami"):
        asyncio.run(stdio.acall("zzz", {}))


def test_a_call_that_times_out_leaves_the_session_usable(stdio: MCPServer) -> None:
    with pytest.raises(MCPToolError, match=r"the MCP tool 'slow' on 'orders' did not answer within 0.3s"):
        stdio.call("slow", {"seconds": 5}, timeout=0.3)

    async def main() -> None:
        with pytest.raises(MCPToolError, match="did not answer within 0.2s"):
            await stdio.acall("slow", {"seconds": 5}, timeout=0.2)

    asyncio.run(main())
    assert stdio.call("lookup_order", {"order_id": "A1"})["items"] == 2


def test_a_caller_cancelling_acall_leaves_the_session_usable(stdio: MCPServer) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stdio.acall("slow", {"seconds": 5}), 0.2)
        assert (await stdio.acall("greet", {"name": "again"})) == "Hello, again!"

    asyncio.run(main())


def test_server_stderr_is_captured_not_shown(capfd: pytest.CaptureFixture[str]) -> None:
    with MCPServer(COMMAND) as server:
        with pytest.raises(MCPToolError):
            server.call("fail", {})
        lines = server.stderr
    out, err = capfd.readouterr()
    assert "test server ready on stdio" in lines
    assert "test server ready" not in err and "kitchen" not in err


# errors of the connection


def test_a_command_that_does_not_exist() -> None:
    server = MCPServer(["no-such-mcp-server-command", "--flag"])
    with pytest.raises(MCPError) as caught:
        server.start()
    assert str(caught.value) == (
        "cannot start the MCP server 'no-such-mcp-server-command --flag': no such command 'no-such-mcp-server-command'"
    )
    assert not thread_alive(server)


def test_a_server_that_exits_during_start_names_its_last_stderr_line() -> None:
    server = MCPServer([*COMMAND, "--crash-on-start"])
    name = shlex.join([*COMMAND, "--crash-on-start"])
    message = f"the MCP server '{name}' exited before it was ready: fatal: the database is unreachable"
    with pytest.raises(MCPError) as caught:
        server.start()
    assert str(caught.value) == message
    assert not thread_alive(server)


def test_a_url_nobody_listens_on() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    server = MCPServer(url=url, timeout=10)
    with pytest.raises(MCPError, match=f"^cannot reach the MCP server at {url}: "):
        server.start()
    assert not thread_alive(server)


def test_a_server_that_dies_mid_call_fails_that_call_and_the_next_call_starts_it_again() -> None:
    server = MCPServer(COMMAND, name="doomed")
    pid = server.call("whoami", {})["pid"]
    with pytest.raises(MCPError, match="^the MCP server 'doomed' exited: crashing on purpose$"):
        server.call("crash", {})
    assert process_gone(pid)
    again = server.call("whoami", {}, timeout=60)["pid"]  # a new process, started by this call
    assert again != pid and server.down is None
    with pytest.raises(MCPError, match="exited: crashing on purpose"):
        asyncio.run(server.acall("crash", {}))
    assert asyncio.run(server.acall("whoami", {}))["pid"] not in (pid, again)
    server.close()
    assert not thread_alive(server)


def test_a_server_killed_mid_call_is_started_again() -> None:
    server = MCPServer(COMMAND, name="killed-mid-call")
    pid = server.call("whoami", {})["pid"]

    async def main() -> None:
        call = asyncio.ensure_future(server.acall("slow", {"seconds": 60}))
        while not server._inflight:  # the request is on its way
            await asyncio.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(MCPError, match="^the MCP server 'killed-mid-call' exited"):
            await call
        assert (await server.acall("whoami", {}))["pid"] != pid

    try:
        asyncio.run(main())
    finally:
        server.close()


def test_a_server_killed_between_calls_is_down_until_the_next_call_starts_it_again() -> None:
    server = MCPServer(COMMAND, name="killed-idle")
    pid = server.call("whoami", {})["pid"]
    assert server.down is None
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: server.down is not None)  # seen without a call: the child's stderr ended
    assert server.down is not None and server.down.startswith("the MCP server 'killed-idle' exited")
    assert not thread_alive(server)  # its session ended with it
    try:
        assert server.call("whoami", {})["pid"] != pid
        assert server.down is None
    finally:
        server.close()


def test_calls_that_arrive_while_a_server_restarts_wait_for_it() -> None:
    # Seen: a second caller during the restart failed at once with "is not running" (the new session
    # was not ready yet, and nothing said the server was still down); under serve, conversations share it.
    server = MCPServer(COMMAND, name="restarting", env={"MCP_TEST_START_DELAY": "1.5"}, timeout=60)
    try:
        pid = server.call("whoami", {})["pid"]
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: server.down is not None)
        pids: list[Any] = []

        def call() -> None:
            try:
                pids.append(server.call("whoami", {})["pid"])
            except MCPError as exc:  # the failure under test: kept, so the assertion below shows it
                pids.append(exc)

        first = threading.Thread(target=call)
        first.start()
        assert wait_for(lambda: server._restarting)  # the first caller is starting it again (1.5 s)
        assert server.down == "the MCP server 'restarting' is restarting"
        call()  # arrives mid-restart: waits for it, then goes to the new process
        first.join(60)
        assert len(pids) == 2 and not any(isinstance(p, MCPError) for p in pids), pids
        assert pids[0] == pids[1] != pid and server.down is None
    finally:
        server.close()


def test_restarts_back_off_while_a_server_cannot_come_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a backoff this loaded machine cannot outlast between two calls
    monkeypatch.setattr(mcp.server, "_RESTART_FIRST", 5.0)
    crash, starts = tmp_path / "crash", tmp_path / "starts"
    env = {"MCP_TEST_CRASH_IF": str(crash), "MCP_TEST_STARTS": str(starts)}
    server = MCPServer(COMMAND, env=env, name="flaky", timeout=20)
    pid = server.call("whoami", {})["pid"]
    crash.touch()
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: server.down is not None)
    with pytest.raises(MCPError, match="^the MCP server 'flaky' exited before it was ready: fatal: told to crash"):
        server.call("whoami", {})  # the first restart comes at once, and fails
    tried = len(starts.read_text().split())
    assert tried == 2
    with pytest.raises(MCPError, match=r"exited before it was ready: .*\(next restart attempt in \d\.\d s\)$"):
        server.call("whoami", {})  # within the backoff: no new process, a clear answer at once
    assert len(starts.read_text().split()) == tried
    crash.unlink()
    assert wait_for(lambda: server.revive() is None)  # the next attempt, after the backoff, succeeds
    assert server.call("whoami", {})["pid"] != pid
    server.close()


def test_backoff_doubles_from_one_second_to_thirty_and_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    backoff = Backoff()
    assert backoff.wait() == 0  # the first restart: at once
    waits = []
    for _ in range(8):
        backoff.attempted()
        waits.append(backoff.wait())
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30]
    now[0] += 29.5
    assert backoff.wait() == 0.5
    backoff.reset()
    assert backoff.wait() == 0


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    silent = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    server = MCPServer([sys.executable, "-c", silent, str(pid_file)], name="silent", timeout=1)
    with pytest.raises(MCPError, match="^the MCP server 'silent' did not answer within 1s$"):
        server.start()
    assert process_gone(int(pid_file.read_text()))
    assert not thread_alive(server)


def test_tool_lists_are_read_page_by_page() -> None:
    from mcp.types import ListToolsResult

    def page(name: str, cursor: str | None) -> Any:
        tool = {"name": name, "inputSchema": {"type": "object"}}
        return ListToolsResult.model_validate({"tools": [tool], "nextCursor": cursor})

    class Session:
        cursors: list[str | None] = []

        async def list_tools(self, *, params: Any = None) -> Any:
            cursor = params.cursor if params is not None else None
            self.cursors.append(cursor)
            return page("first", "p2") if cursor is None else page("second", None)

    server = MCPServer(["unused"])
    session = Session()
    asyncio.run(server._list_tools(session))
    assert session.cursors == [None, "p2"]
    assert [tool.name for tool in server._tools.values()] == ["first", "second"]


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` raise ImportError
    with pytest.raises(MCPError, match=r"pip install 'llm-fsm-runtime\[mcp\]'"):
        MCPServer(COMMAND).start()


# lifecycle


def test_close_leaves_no_child_process_and_no_thread() -> None:
    before = set(threading.enumerate())
    server = MCPServer(COMMAND, name="short-lived")
    server.start()
    server.start()  # idempotent
    pid = server.call("whoami", {})["pid"]
    assert not process_gone(pid, within=0)
    assert thread_alive(server)
    server.close()
    server.close()  # idempotent
    assert process_gone(pid)
    assert set(threading.enumerate()) <= before
    with pytest.raises(MCPError, match="was closed"):
        server.call("whoami", {})
    server.start()  # a closed server can be started again, with a new process
    second = server.call("whoami", {})["pid"]
    assert second != pid
    server.close()
    assert process_gone(second)
    assert set(threading.enumerate()) <= before


def test_close_ends_calls_in_flight() -> None:
    server = MCPServer(COMMAND)
    server.start()

    async def main() -> None:
        call = asyncio.ensure_future(server.acall("slow", {"seconds": 30}))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(server.close)
        with pytest.raises(MCPError, match="was closed"):
            await call

    asyncio.run(main())
    assert not thread_alive(server)


def test_an_unclosed_server_is_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    script = tmp_path / "forgetful.py"
    script.write_text(
        textwrap.dedent(f"""
            import sys
            from llm_fsm.tools.mcp import MCPServer
            server = MCPServer([sys.executable, {SERVER!r}])
            print(server.call("whoami", {{}})["pid"], flush=True)
        """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert process_gone(int(done.stdout))


def test_importing_the_module_does_not_import_the_sdk() -> None:
    code = "import sys, llm_fsm.tools.mcp; print('mcp' in sys.modules, 'anyio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


# specs


def test_from_spec_runs_a_command_relative_to_a_folder() -> None:
    spec = f"{shlex.quote(sys.executable)} mcp_server.py"
    with MCPServer.from_spec(spec, relative_to=DATA) as server:
        assert server.name == spec
        assert Path(server.call("whoami", {})["cwd"]) == DATA


def test_from_spec_reads_objects() -> None:
    server = MCPServer.from_spec(
        {"command": sys.executable, "args": ["mcp_server.py"], "env": {"MCP_TEST_GREETING": "hi"}, "name": "n"},
        relative_to=DATA / "mcp_server.py",  # a file stands for its folder
    )
    assert server.command == [sys.executable, "mcp_server.py"]
    assert (server.cwd, server.env, server.name) == (str(DATA), {"MCP_TEST_GREETING": "hi"}, "n")
    listed = MCPServer.from_spec({"command": ["a", "b c"], "cwd": "sub"}, relative_to=DATA)
    assert (listed.command, listed.cwd) == (["a", "b c"], str(DATA / "sub"))
    remote = MCPServer.from_spec({"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer x"}})
    assert (remote.url, remote.headers, remote.command) == (
        "https://example.test/mcp",
        {"Authorization": "Bearer x"},
        None,
    )
    assert MCPServer.from_spec("http://127.0.0.1:1/sse").url == "http://127.0.0.1:1/sse"


def test_from_spec_rejects_bad_specs() -> None:
    with pytest.raises(MCPError, match=r"unknown key 'comand' \(did you mean 'command'\?\)"):
        MCPServer.from_spec({"comand": "python server.py"})
    with pytest.raises(MCPError, match="not both"):
        MCPServer.from_spec({"command": "x", "url": "http://127.0.0.1:1/mcp"})
    with pytest.raises(MCPError, match="empty"):
        MCPServer.from_spec("  ")
    with pytest.raises(MCPError, match="invalid MCP server spec: timeout must be positive"):
        MCPServer.from_spec({"command": "x", "timeout": 0})
    with pytest.raises(ValueError, match="exactly one"):
        MCPServer()


# HTTP transports


def test_streamable_http(http_url: str) -> None:
    with MCPServer(url=http_url, headers={"X-Test": "1"}) as server:
        assert "lookup_order" in {tool.name for tool in server.tools()}
        assert server.call("lookup_order", {"order_id": "A1"})["status"] == "shipped"
        with pytest.raises(MCPToolError, match="kitchen"):
            server.call("fail", {})
        with pytest.raises(MCPToolError, match="did not answer within 0.3s"):
            server.call("slow", {"seconds": 5}, timeout=0.3)

        async def main() -> list[Any]:
            return list(await asyncio.gather(*(server.acall("slow", {"seconds": 0.3}) for _ in range(5))))

        assert overlapping(asyncio.run(main()))
    assert not thread_alive(server)


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_an_http_server_that_dies_is_connected_to_again_once_it_is_back(transport: str) -> None:
    port = free_port()
    first = http_server(transport, port)
    url = next(first)
    server = MCPServer(url=url, timeout=20)
    pid = server.call("whoami", {})["pid"]
    os.kill(pid, signal.SIGKILL)
    first.close()
    with pytest.raises(MCPError, match=f"^(lost the connection to|cannot reach) the MCP server at {url}"):
        server.call("whoami", {}, timeout=60)  # nobody listens: the call fails at once
    assert server.down is not None
    second = http_server(transport, port)  # the server is back, on the same address
    next(second)
    try:
        assert wait_for(lambda: server.revive() is None)  # a new session, within the backoff
        assert server.call("whoami", {})["pid"] != pid
    finally:
        server.close()
        second.close()
    assert not thread_alive(server)


def test_an_http_server_that_restarted_meanwhile_is_connected_to_again() -> None:
    port = free_port()
    first = http_server("http", port)
    url = next(first)
    server = MCPServer(url=url, timeout=20)
    pid = server.call("whoami", {})["pid"]
    first.close()
    second = http_server("http", port)
    next(second)
    try:  # it forgot our session (HTTP 404): that call fails, the next one opens a new session
        with pytest.raises(MCPError, match=f"^lost the connection to the MCP server at {url}: Session not found"):
            server.call("whoami", {})
        assert server.call("whoami", {})["pid"] != pid
    finally:
        server.close()
        second.close()


def test_sse() -> None:
    generator = http_server("sse")
    url = next(generator)
    try:
        with MCPServer.from_spec(url) as server:
            assert server.call("lookup_order", {"order_id": "B2"})["status"] == "processing"
            assert asyncio.run(server.acall("greet", {"name": "sse"})) == "Hello, sse!"
    finally:
        generator.close()
    assert not thread_alive(server)
