"""``llm-fsm edit FILE``: a real server in a child process, and the one-line errors of a FILE it cannot edit."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
ADDRESS = re.compile(r"^Editing (?P<file>.+) at (?P<url>http://127\.0\.0\.1:(?P<port>\d+)/\?token=(?P<token>[\w-]+))$")


def address(output: str) -> re.Match[str]:
    """The address line ``edit`` printed first."""
    match = ADDRESS.match(output.splitlines()[0])
    assert match is not None, output
    return match


def start_editor(*args: str, cwd: Path) -> tuple[subprocess.Popen[str], re.Match[str]]:
    """``llm-fsm edit ARGS`` in a child process, and the address line it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FSM_HOME": str(cwd / "home")}
    code = "from llm_fsm.cli import entry_point; entry_point()"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "edit", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    match = ADDRESS.match(line)
    if match is None:
        child.kill()
        _, err = child.communicate(timeout=10)
        pytest.fail(f"no address printed: {line!r}; stderr: {err}")
    return child, match


def stop(child: subprocess.Popen[str]) -> int:
    child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=15)
    finally:
        if child.poll() is None:
            child.kill()


def test_edit_serves_the_file_at_the_address_it_prints(tmp_path: Path) -> None:
    path = tmp_path / "order_flow.json"
    shutil.copy(ROOT / "fsm_definitions" / "order_flow.json", path)
    child, printed = start_editor("order_flow.json", "--no-browser", "--port", "0", cwd=tmp_path)
    try:
        assert printed["file"] == "order_flow.json" and int(printed["port"]) > 0 and len(printed["token"]) >= 40
        with httpx.Client(timeout=10) as client:
            page = client.get(printed["url"], follow_redirects=True)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            answer = client.get(f"http://127.0.0.1:{printed['port']}/api/file")
            assert answer.status_code == 200
            opened = answer.json()
            assert opened["path"] == "order_flow.json" and opened["value"]["name"] == "order_flow"
            assert opened["model"] == "simulated"
            started = client.post(f"http://127.0.0.1:{printed['port']}/api/chat/start", json={"value": opened["value"]})
            assert started.status_code == 200 and started.json()["state"] == "select_product"
        with httpx.Client(timeout=10) as stranger:  # no cookie
            assert stranger.get(f"http://127.0.0.1:{printed['port']}/api/file").status_code == 401
            wrong = stranger.get(f"http://127.0.0.1:{printed['port']}/?token=wrong")
            assert wrong.status_code == 403 and "Brewline" not in wrong.text
    finally:
        code = stop(child)
    assert code in (0, 143), child.stderr.read() if child.stderr else ""
    assert path.read_bytes() == (ROOT / "fsm_definitions" / "order_flow.json").read_bytes()


def test_edit_of_a_new_file_creates_it_on_save(tmp_path: Path) -> None:
    child, printed = start_editor(str(tmp_path / "new.json"), "--no-browser", cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{printed['port']}"
        with httpx.Client(timeout=10) as client:
            client.get(printed["url"])
            opened = client.get(f"{base}/api/file").json()
            assert opened["exists"] is False and opened["value"] is None
            value = {"name": "x", "description": "d", "initial_state": "a", "states": {"a": {"purpose": "p"}}}
            saved = client.post(f"{base}/api/save", json={"value": value, "sha": opened["sha"]})
            assert saved.status_code == 200, saved.text
    finally:
        stop(child)
    assert (tmp_path / "new.json").is_file()


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """uvicorn's server replaced by one that returns at once, recording the app and sockets it was given."""
    ran: list[Any] = []

    def run(self: uvicorn.Server, sockets: Any = None) -> None:
        ran.append((self.config.app, sockets))

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return ran


def test_the_browser_opens_the_address_unless_told_not_to(
    tmp_path: Path, no_server: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def browse(url: str, *args: Any, **kwargs: Any) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr("webbrowser.open", browse)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["edit", "bot.json"])
    assert result.exit_code == 0, result.output
    url = address(result.stdout)["url"]
    deadline = time.monotonic() + 5
    while not opened and time.monotonic() < deadline:
        time.sleep(0.01)
    assert opened == [url] and len(no_server) == 1
    opened.clear()
    assert runner.invoke(app, ["edit", "bot.json", "--no-browser"]).exit_code == 0
    time.sleep(0.1)
    assert opened == []


def test_each_run_mints_a_new_token(tmp_path: Path, no_server: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tokens = {address(runner.invoke(app, ["edit", "bot.json", "--no-browser"]).stdout)["token"] for _ in range(3)}
    assert len(tokens) == 3


def bad_file(tmp_path: Path, kind: str) -> Path:
    if kind == "folder":
        (tmp_path / "folder").mkdir()
        return tmp_path / "folder"
    if kind == "missing folder":
        return tmp_path / "nosuch" / "bot.json"
    if kind == "under a file":
        (tmp_path / "file.txt").write_text("x")
        return tmp_path / "file.txt" / "bot.json"
    path = tmp_path / "locked.json"
    path.write_text("{}")
    path.chmod(0)
    return path


@pytest.mark.parametrize("kind", ["folder", "missing folder", "under a file", "unreadable"])
def test_a_file_it_cannot_edit_is_one_error_line_and_exit_2(tmp_path: Path, no_server: list[Any], kind: str) -> None:
    path = bad_file(tmp_path, kind)
    if kind == "unreadable" and os.access(path, os.R_OK):
        pytest.skip("this user can read a file whose mode is 000 (root)")
    result = runner.invoke(app, ["edit", str(path), "--no-browser"])
    lines = (result.stdout + result.stderr).splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert str(path) in lines[0] and "Traceback" not in result.output
    assert no_server == []


def test_a_port_in_use_is_one_error_line(tmp_path: Path, no_server: list[Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["edit", str(tmp_path / "bot.json"), "--no-browser", "--port", str(port)])
    assert result.exit_code == 2 and result.stderr.startswith("error: cannot listen on 127.0.0.1:")
    assert "already in use" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("model", ["", "scripted", "scripted:nosuch.json"])
def test_a_model_it_cannot_make_is_one_error_line(tmp_path: Path, no_server: list[Any], model: str) -> None:
    result = runner.invoke(app, ["edit", str(tmp_path / "bot.json"), "--no-browser", "--model", model])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error:")
    assert no_server == []


def test_bad_hooks_are_one_error_line(tmp_path: Path, no_server: list[Any]) -> None:
    result = runner.invoke(app, ["edit", str(tmp_path / "bot.json"), "--no-browser", "--hooks", "nosuch_mod:hooks"])
    assert result.exit_code == 2 and "nosuch_mod" in result.stderr and no_server == []


def test_the_hooks_and_model_reach_the_app(tmp_path: Path, no_server: list[Any]) -> None:
    (tmp_path / "my_hooks.py").write_text(
        "from llm_fsm import Hooks\nhooks = Hooks()\n@hooks.check('polite')\ndef polite(*, message): return True\n"
    )
    script = tmp_path / "replies.json"
    script.write_text("[]")
    hooks = f"{tmp_path / 'my_hooks.py'}:hooks"
    result = runner.invoke(
        app, ["edit", str(tmp_path / "bot.json"), "--no-browser", "--hooks", hooks, "--model", f"scripted:{script}"]
    )
    assert result.exit_code == 0, result.output
    editing = no_server[0][0].state.editing
    assert editing.model == f"scripted:{script}" and "polite" in editing.hooks.checks
    assert editing.bound_hooks is editing.hooks  # given hooks: checks bind the definition to them


def test_without_hooks_checks_bind_to_none(tmp_path: Path, no_server: list[Any]) -> None:
    result = runner.invoke(app, ["edit", str(tmp_path / "bot.json"), "--no-browser"])
    assert result.exit_code == 0, result.output
    editing = no_server[0][0].state.editing
    assert editing.bound_hooks is None and editing.hooks.checks == {}


def test_importing_the_cli_loads_no_server() -> None:
    code = "import sys, llm_fsm.cli; print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_the_simulated_model_takes_the_provider_options_chat_gives_it(tmp_path: Path, no_server: list[Any]) -> None:
    result = runner.invoke(
        app, ["edit", str(tmp_path / "bot.json"), "--no-browser", "--guided", "--prompt-order", "cache"]
    )
    assert result.exit_code == 0, result.output
    editing = no_server[0][0].state.editing

    definition = llm_fsm.load(ROOT / "fsm_definitions" / "quiz.json")
    made = editing.tryit.client_factory(definition)
    assert type(made).__name__ == "SimulatedLLM" and made.definition is definition
    assert made.guided is True and made.prompt_order == "cache"


def test_the_socket_sends_at_once_so_a_check_does_not_wait_for_a_delayed_ack() -> None:
    # uvicorn sets TCP_NODELAY only on sockets it makes; each connection accepted on this one inherits it
    from llm_fsm.cli.edit import _listen

    listening = _listen(0)
    try:
        assert listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert listening.getsockname()[0] == "127.0.0.1"
    finally:
        listening.close()
