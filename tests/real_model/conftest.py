"""A real model in the loop: SmolLM2-135M-Instruct served by llama.cpp's llama-server on 127.0.0.1.

The server is provisioned (once per machine: a download and a ~10 minute build) and started once per session
through ``scripts/local-model``, under an instance name of its own, and stopped at the end. Tests talk to it
through ``LiteLLMClient`` exactly as a user would. A recording proxy in front of it (``recorded``) shows what
litellm put on the wire, for the tests that check a request (``response_format``, ``max_tokens``).

This folder is left out of the normal test command (``norecursedirs`` in pyproject.toml): run it with
``python -m pytest tests/real_model``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.definition.texts import runtime_text
from tests.conftest import ROOT, wait_for

SCRIPT = ROOT / "scripts" / "local-model"
MODEL = "openai/smollm2"
# Twice the longest reply seen from the examples (about 100 tokens); a small model may also loop until the limit,
# which this keeps short (a reply cut there is rejected as truncated and retried once with twice the budget).
MAX_TOKENS = 192
PROVISION_TIMEOUT = 45 * 60  # a first build on a busy 2-core machine
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


@dataclass
class LocalModel:
    """A running llama-server: ``base_url`` ends in ``/v1``."""

    name: str
    base_url: str
    port: int
    pid: int
    log: Path
    start_seconds: float


def local_model_command(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def start_server(name: str, *extra: str) -> LocalModel:
    started = local_model_command("start", "--name", name, "--json", *extra)
    if started.returncode != 0:
        pytest.fail(f"scripts/local-model start: {started.stderr.strip().splitlines()[-1]}", pytrace=False)
    state = json.loads(started.stdout)
    return LocalModel(name, state["base_url"], state["port"], state["pid"], Path(state["log"]), state["start_seconds"])


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModel]:
    """The session's server: provisioned if needed (seconds when the cache is there), started, stopped."""
    provisioned = local_model_command("provision", timeout=PROVISION_TIMEOUT)
    if provisioned.returncode != 0:
        lines = provisioned.stderr.strip().splitlines() or ["no output"]
        pytest.fail(f"scripts/local-model provision: {lines[-1]}", pytrace=False)
    server = start_server(f"pytest-{os.getpid()}")
    try:
        yield server
    finally:
        local_model_command("stop", "--name", server.name)


@pytest.fixture(scope="session")
def small_context_model(local_model: LocalModel) -> Iterator[LocalModel]:
    """A second server whose context (256 tokens) is smaller than any example's prompt (after provisioning)."""
    server = start_server(f"pytest-{os.getpid()}-small", "--ctx-size", "256")
    try:
        yield server
    finally:
        local_model_command("stop", "--name", server.name)


@pytest.fixture
def make_client(local_model: LocalModel) -> Callable[..., llm_fsm.LiteLLMClient]:
    """``LiteLLMClient`` for the local server, as a user would write it; keyword arguments override.

    ``response_format="json_schema"``: litellm does not know ``openai/smollm2``, so ``"auto"`` would only ask
    for JSON mode; llama-server enforces a strict schema (a grammar), and that is what we want tested.
    """

    def make(**options: Any) -> llm_fsm.LiteLLMClient:
        settings: dict[str, Any] = {
            "api_base": local_model.base_url,
            "api_key": "none",
            "temperature": 0,
            "seed": 7,
            "timeout": 120,
            "max_retries": 0,
            "response_format": "json_schema",
            "max_tokens": MAX_TOKENS,
            "quiet": True,
        }
        return llm_fsm.LiteLLMClient(MODEL, **(settings | options))

    return make


# -- a recording proxy: what litellm sent -------------------------------------------------------------------


@dataclass
class Recorder:
    """Forwards every request to the server unchanged (responses streamed through) and keeps its JSON body."""

    upstream_port: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)  # each response's body (SSE text when streamed)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def wait(self, count: int) -> None:
        """Until ``count`` responses are recorded (the client may have its answer before the proxy's thread ends)."""
        assert wait_for(lambda: len(self.bodies) >= count, 30), f"{len(self.bodies)} responses of {count}"

    def replies(self) -> list[dict[str, Any]]:
        """The JSON responses (of requests that were not streamed)."""
        return [json.loads(body) for body in self.bodies if body.lstrip().startswith("{")]

    def start(self) -> Recorder:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    recorder.requests.append(json.loads(body))
                except ValueError:
                    recorder.requests.append({"_raw": body.decode("utf-8", "replace")})
                upstream = http.client.HTTPConnection("127.0.0.1", recorder.upstream_port, timeout=300)
                headers = {"Content-Type": "application/json", "Authorization": self.headers.get("Authorization", "")}
                upstream.request("POST", self.path, body=body, headers=headers)
                response = upstream.getresponse()
                recorder.statuses.append(response.status)
                self.send_response(response.status)
                for name in ("Content-Type",):
                    if response.getheader(name):
                        self.send_header(name, response.getheader(name))
                self.send_header("Connection", "close")  # the body ends when the connection does (HTTP/1.0)
                self.end_headers()
                received = bytearray()
                try:
                    while chunk := response.read1(65536):  # as it arrives: SSE events stay separate
                        received += chunk
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client hung up: hang up upstream too
                    pass
                finally:
                    upstream.close()
                    recorder.bodies.append(received.decode("utf-8", "replace"))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="session")
def recording_proxy(local_model: LocalModel) -> Iterator[Recorder]:
    recorder = Recorder(local_model.port).start()
    yield recorder
    recorder.stop()


@pytest.fixture
def recorded(recording_proxy: Recorder) -> Recorder:
    """The proxy, with nothing recorded yet: point a client at ``recorded.base_url``."""
    recording_proxy.requests.clear()
    recording_proxy.statuses.clear()
    recording_proxy.bodies.clear()
    return recording_proxy


# -- what a real model must never break --------------------------------------------------------------------


def check_turn(
    definition: llm_fsm.FSMDefinition,
    conversation: llm_fsm.Conversation,
    before: llm_fsm.Snapshot,
    result: llm_fsm.TurnResult,
) -> None:
    """The conversation's invariants after one turn, whatever the model wrote.

    The state is a state of the definition, and the one the result and the history name; a move is a declared
    transition whose conditions hold; the model wrote only keys the state lets it write; when every reply was
    refused the conversation stayed and said the fallback message (a message never describes a state the
    conversation is not in), and nothing of a refused reply was committed.
    """
    state = result.state
    assert state in definition.states
    assert state == conversation.state and conversation.history[-1].state == state
    assert conversation.history[-1].assistant == result.message and result.message.strip()
    assert len(conversation.history) == len(before.history) + 1
    assert 1 <= result.llm_calls <= 8
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    previous = before.state
    if state != previous:  # the state's own transitions or a global one, "$return" going where it came from
        back_to = definition.return_target(previous, before.came_from)
        moves = [t for t in definition.moves(previous, back_to) if t.target_state == state]
        assert moves, f"{previous} → {state} is not a declared transition"
        assert any(unmet_condition(t, conversation.context) is None for t in moves), f"{previous} → {state}"
    writable = model_writable_keys(definition, previous)
    provenance = conversation.provenance
    for key in result.context_updates:
        if provenance.get(key, {}).get("by") == "llm":
            assert key in writable, f"the model wrote {key!r}, which {previous} does not let it write"
    assert not any(k.startswith("_") and k != "_extra" for k in result.context_updates)
    assert not set(result.context_updates) & set(definition.handler_only_keys)
    refused_keys = {r.key for r in result.rejected if r.kind == "context_key" and r.key}
    assert not refused_keys & set(result.context_updates)
    if result.fallback:  # every reply refused: stayed, kept only what was valid, said the fallback message
        said = "step_failed" if definition.states[previous].acts else "fallback"  # an acting state's says it failed
        assert state == previous and result.message == runtime_text(definition, said)  # in its language
        assert result.rejected


def check_step(
    definition: llm_fsm.FSMDefinition,
    conversation: llm_fsm.Conversation,
    before: llm_fsm.Snapshot,
    result: llm_fsm.TurnResult,
) -> None:
    """:func:`check_turn`'s invariants for one step of a run (a workflow): a move the runtime took on its own made
    no call and was a declared automatic move whose conditions hold; a turn whose tools fulfilled one ended
    there, with nothing more said."""
    if result.step == "automatic":
        assert result.llm_calls == 0 and result.state == conversation.state
        back_to = definition.return_target(before.state, before.came_from)
        moves = [t for t in definition.moves(before.state, back_to) if t.target_state == result.state]
        assert any(t.automatic and unmet_condition(t, conversation.context) is None for t in moves)
        return
    if result.message or not result.tool_calls:  # else a tool's result took an automatic move: nothing was said
        check_turn(definition, conversation, before, result)


def generating(port: int) -> bool:
    """Whether llama-server is working on a request (its ``/slots`` endpoint)."""
    with DIRECT.open(f"http://127.0.0.1:{port}/slots", timeout=10) as response:
        return any(slot.get("is_processing") for slot in json.load(response))


def unchanged(conversation: llm_fsm.Conversation, before: llm_fsm.Snapshot) -> bool:
    return conversation.snapshot().model_dump() == before.model_dump()


# -- figures for the terminal: what the model did, and how fast the server was ----------------------------


@dataclass
class Scorecard:
    """The example turns of this session, summed up per example at the end (not asserted: facts to read)."""

    rows: dict[str, list[llm_fsm.TurnResult]] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)
    start_seconds: float = 0.0

    def add(self, example: str, result: llm_fsm.TurnResult) -> None:
        self.rows.setdefault(example, []).append(result)

    def lines(self) -> list[str]:
        header = "example              turns  moved  first reply accepted  calls  completion tokens  seconds"
        lines = [header]
        for example, results in self.rows.items():
            moved = sum(r.state != (r.previous_state or r.state) for r in results)
            accepted = sum(not any(x.attempt == 1 and x.kind in RETRIED for x in r.rejected) for r in results)
            calls = sum(r.llm_calls for r in results)
            tokens = sum(r.usage.completion_tokens for r in results)
            seconds = sum(r.latency for r in results)
            figures = f"{len(results):>5}  {moved:>5}  {accepted:>20}  {calls:>5}  {tokens:>17}  {seconds:>7.1f}"
            lines.append(f"{example:<20} {figures}")
        lines.append("(turns include the opening; moved: turns that changed state)")
        return lines + [f"server ready {self.start_seconds:.1f} s after start"] + server_speed(self.logs)


RETRIED = {"format", "truncated", "target", "condition", "context_value", "check"}  # kinds that refuse a reply


TIMING = re.compile(r"(prompt eval|(?<!prompt )eval) time = +([\d.]+) ms / +(\d+) tokens")


def server_speed(logs: list[Path]) -> list[str]:
    """Prompt and generation speed over every request of the session (llama-server logs its timings)."""
    totals = {"prompt eval": [0.0, 0], "eval": [0.0, 0]}
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for name, milliseconds, tokens in TIMING.findall(text):
            totals[name][0] += float(milliseconds)
            totals[name][1] += int(tokens)
    lines = []
    for name, label in (("prompt eval", "prompt processed"), ("eval", "tokens generated")):
        milliseconds, tokens = totals[name]
        if milliseconds:
            seconds = milliseconds / 1000
            lines.append(
                f"server, whole session: {label}: {tokens} in {seconds:.1f} s ({tokens / seconds:.0f} tokens/s)"
            )
    return lines


SCORECARD = Scorecard()


@pytest.fixture(scope="session")
def scorecard(local_model: LocalModel) -> Scorecard:
    SCORECARD.logs.append(local_model.log)
    SCORECARD.start_seconds = local_model.start_seconds
    return SCORECARD


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SCORECARD.rows:
        terminalreporter.section("real model: the examples' turns")
        for line in SCORECARD.lines():
            terminalreporter.write_line(line)


def model_opens(path: str | Path) -> llm_fsm.FSMDefinition:
    """The example at ``path`` with the model writing its opening: the examples write their own (a state's
    ``opening``, no model call), and this suite is about what the model writes, the opening included."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    for state in data["states"].values():
        state.pop("opening", None)
        subflow = state.get("subflow")
        if isinstance(subflow, dict) and isinstance(subflow.get("definition"), str):
            # loaded from a dict, a relative path would be read from the working directory, not the file's
            subflow["definition"] = str(Path(path).parent / subflow["definition"])
    return llm_fsm.load(data)
