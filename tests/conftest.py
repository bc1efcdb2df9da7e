"""Shared fixtures. No test reaches a real provider: only loopback connections are allowed."""

from __future__ import annotations

import copy
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from tests.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "fsm_definitions").glob("*.json"))
EXAMPLE_HOOKS = ROOT / "fsm_definitions" / "hooks"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear proxies (they would route 127.0.0.1 away) and fail any connection off this machine."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                pytest.fail(f"a test tried to reach {host}: tests must not call real providers")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)


def example_hooks(path: Path) -> llm_fsm.Hooks:
    """The hooks an example needs: ``fsm_definitions/hooks/<stem>.py:hooks`` when there is one (its tools),
    else empty ones."""
    module = EXAMPLE_HOOKS / f"{path.stem}.py"
    return llm_fsm.Hooks.load(f"{module}:hooks") if module.is_file() else llm_fsm.Hooks()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def changed_definition(data: dict[str, Any], **changes: Any) -> llm_fsm.FSMDefinition:
    """``data`` loaded with top-level fields changed (None: removed; ``state_<id>`` updates a state's)."""
    data = copy.deepcopy(data)
    for name, value in changes.items():
        if name.startswith("state_"):
            data["states"][name.removeprefix("state_")].update(value)
        elif value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return llm_fsm.load(data)


def reply(target: str, message: str, **update: Any) -> dict[str, Any]:
    return {"transition": {"target_state": target, "context_update": update}, "message": message, "reasoning": "r"}


SIGNUP = {
    "name": "signup",
    "description": "Collect a name and an email, then finish.",
    "initial_state": "ask_name",
    "persona": "A concise assistant.",
    "states": {
        "ask_name": {
            "purpose": "Ask for the user's name",
            "required_context_keys": ["name"],
            "transitions": [
                {
                    "target_state": "ask_email",
                    "description": "The name is known",
                    "conditions": [{"description": "has name", "requires_context_keys": ["name"]}],
                }
            ],
        },
        "ask_email": {
            "purpose": "Ask for the email",
            "required_context_keys": ["email"],
            "transitions": [
                {
                    "target_state": "done",
                    "description": "The email is known and approved",
                    "priority": 10,
                    "conditions": [
                        {"description": "has email", "requires_context_keys": ["email"]},
                        {"description": "approved by staff", "logic": {"==": [{"var": "approved"}, True]}},
                    ],
                },
                {"target_state": "ask_name", "description": "The user wants to change the name", "priority": 50},
            ],
        },
        "done": {"purpose": "Thank the user"},
    },
    "handler_only_keys": ["approved"],
}


@pytest.fixture
def signup() -> llm_fsm.FSMDefinition:
    return llm_fsm.load(json.loads(json.dumps(SIGNUP)))


def start_redis(*options: str) -> tuple[Any, int]:
    """A redis-server on 127.0.0.1 and a free port (extra ``options``, e.g. ``--requirepass``): the process and port."""
    import shutil
    import subprocess
    import time

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *options]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        process.kill()
        pytest.fail("redis-server did not start")
    return process, port


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on 127.0.0.1 and a free port, for this test session."""
    process, port = start_redis()
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server (the Debian package's binaries) on 127.0.0.1 and a free port, for this session."""
    from tests import postgres_server

    why = postgres_server.missing()
    if why:
        pytest.skip(why)
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")
    server = postgres_server.start()
    yield server.url
    server.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False): a bound against hanging."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
