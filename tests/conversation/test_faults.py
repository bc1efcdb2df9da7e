"""Provider faults over real HTTP against the local server (``tests/fake_openai.py``), through
``LiteLLMClient``, each driving a ``Conversation`` on the ``signup`` definition.

For every fault: the number of attempts is bounded (counted on the server, or on the socket for a
closed port), the turn either succeeds after a retry or raises a typed :class:`LLMError` whose message
is one readable line, and a failed turn leaves ``conv.snapshot()`` exactly as it was. Each case runs
through ``send``, ``asend``, ``stream`` and ``astream`` where it makes sense, and the streaming faults
also through ``send``/``asend`` with a ``stream=True`` client.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

import llm_fsm
from llm_fsm.errors import LLMAuthError, LLMError, LLMUnavailableError
from llm_fsm.streaming import MessageDelta
from tests.conftest import reply
from tests.fake_openai import Disconnect, FakeOpenAI, Hang, HTTPError, NoChoices, RawBody, Truncated

OPENING = json.dumps(reply("ask_name", "Hi! What's your name?"))
ANSWER = json.dumps(reply("ask_email", "Thanks Ann! What is your email address, please?", name="Ann"))
MAX_RETRIES = 2
ATTEMPTS = MAX_RETRIES + 1

MODES = ("send", "asend", "stream", "astream")
STREAMED = ("stream", "astream", "send+stream_client", "asend+stream_client")


def client(url: str, **options: Any) -> llm_fsm.LiteLLMClient:
    settings = {
        "api_key": "sk-test",
        "timeout": 5.0,
        "max_retries": MAX_RETRIES,
        "backoff": 0.01,
        "response_format": "none",
    }
    return llm_fsm.LiteLLMClient("openai/test-model", api_base=url, **(settings | options))


def opened(signup: llm_fsm.FSMDefinition, server: FakeOpenAI, mode: str, **options: Any) -> llm_fsm.Conversation:
    """A conversation on ``server`` that has had its opening turn (one request)."""
    server.add(OPENING)
    conversation = llm_fsm.Conversation(signup, client(server.url, stream=mode.endswith("stream_client"), **options))
    conversation.start()
    return conversation


def turn(conversation: llm_fsm.Conversation, mode: str, text: str = "I'm Ann") -> llm_fsm.TurnResult:
    """One user turn through ``mode``; returns the turn's result (the last event of a stream)."""
    if mode.startswith("send"):
        return conversation.send(text)
    if mode.startswith("asend"):
        return asyncio.run(conversation.asend(text))
    if mode == "stream":
        events = list(conversation.stream(text))
    else:

        async def collect() -> list[Any]:
            return [event async for event in conversation.astream(text)]

        events = asyncio.run(collect())
    assert isinstance(events[-1], llm_fsm.TurnResult)
    return events[-1]


def failed_turn(
    conversation: llm_fsm.Conversation, mode: str, server: FakeOpenAI | None, expected: type[LLMError]
) -> tuple[LLMError, int]:
    """Run a turn that must fail with ``expected``; check the snapshot and the message; return the error
    and the number of requests the server saw for it."""
    before = conversation.snapshot()
    seen = len(server.requests) if server else 0
    with pytest.raises(LLMError) as info:
        turn(conversation, mode)
    error = info.value
    assert isinstance(error, expected), f"{type(error).__name__}: {error}"
    assert conversation.snapshot() == before, "a failed turn changed the conversation"
    assert conversation.snapshot().model_dump_json() == before.model_dump_json()
    assert_one_line(error)
    return error, (len(server.requests) - seen if server else 0)


def assert_one_line(error: BaseException) -> None:
    message = str(error)
    assert message.strip(), f"{type(error).__name__} with an empty message"
    assert "\n" not in message and "\r" not in message, f"not one line: {message!r}"
    assert "Traceback" not in message and 'File "' not in message, f"traceback text: {message!r}"
    assert len(message) <= 400, f"{len(message)} characters: {message!r}"


def recovers(conversation: llm_fsm.Conversation, mode: str, server: FakeOpenAI) -> None:
    """After a failed turn the conversation takes the same turn normally."""
    server.queue.clear()
    server.add(ANSWER)
    result = turn(conversation, mode)
    assert (result.state, result.context_updates) == ("ask_email", {"name": "Ann"})


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port  # nothing listens on it any more: connecting is refused


# ---------------------------------------------------------------- retried, then success


@pytest.mark.parametrize("mode", MODES)
def test_429_then_success(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(HTTPError(429, {"error": {"message": "Rate limit reached"}}), ANSWER)
    seen = len(fake_openai.requests)
    result = turn(conversation, mode)
    assert len(fake_openai.requests) - seen == 2, "one retry, no hidden retries underneath"
    assert (result.state, result.llm_calls, result.context["name"]) == ("ask_email", 1, "Ann")
    assert result.message == json.loads(ANSWER)["message"]


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_then_success(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode, timeout=0.3)
    fake_openai.add(Hang(2.0), ANSWER)  # the retry is served while the first hangs
    seen, started = len(fake_openai.requests), time.monotonic()
    result = turn(conversation, mode)
    assert len(fake_openai.requests) - seen == 2 and result.state == "ask_email"
    assert time.monotonic() - started < 1.5, "the client gave up on the hung request at its timeout"


@pytest.mark.parametrize("mode", STREAMED)
def test_a_stream_cut_before_its_first_token_is_retried(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(Truncated(ANSWER, fraction=0.0, chunked=True), ANSWER)
    seen = len(fake_openai.requests)
    result = turn(conversation, mode)
    assert len(fake_openai.requests) - seen == 2 and result.state == "ask_email"
    assert result.message == json.loads(ANSWER)["message"]


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("mode", MODES)
def test_500_until_retries_run_out(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(*[HTTPError(500)] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMUnavailableError)
    assert requests == error.attempts == ATTEMPTS and error.status_code == 500
    recovers(conversation, mode, fake_openai)


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_on_every_attempt(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode, timeout=0.3, max_retries=1)
    fake_openai.add(Hang(2.0), Hang(2.0))
    started = time.monotonic()
    error, requests = failed_turn(conversation, mode, fake_openai, LLMUnavailableError)
    assert requests == error.attempts == 2
    assert time.monotonic() - started < 1.9, "each attempt stopped at the client timeout, not the server's hang"
    assert str(error) == f"openai/test-model at {fake_openai.url}: no answer within the timeout of 0.3 s"


@pytest.mark.parametrize("mode", MODES)
def test_connection_refused(fake_openai, signup, mode, closed_port, monkeypatch):
    conversation = opened(signup, fake_openai, mode)
    conversation.llm = client(f"http://127.0.0.1:{closed_port}/v1")
    connects = []
    connect = socket.socket.connect  # the conftest's loopback guard

    def counting(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[1] == closed_port:
            connects.append(address)
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counting)
    error, _ = failed_turn(conversation, mode, None, LLMUnavailableError)
    assert error.attempts == ATTEMPTS and len(connects) == ATTEMPTS, connects
    assert str(error) == f"openai/test-model: cannot connect to http://127.0.0.1:{closed_port}/v1"


@pytest.mark.parametrize("mode", MODES)
def test_401_is_never_retried(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    body = {"error": {"message": "Incorrect API key provided: sk-proj-A1b2C3d4E5", "type": "invalid_request_error"}}
    fake_openai.add(HTTPError(401, body), ANSWER)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMAuthError)
    assert requests == error.attempts == 1 and error.status_code == 401
    assert str(error).startswith(f"openai/test-model at {fake_openai.url}: "), "names the model and the base URL"
    assert "A1b2C3d4E5" not in str(error) and "Incorrect API key provided: ***" in str(error), "never the key"


@pytest.mark.parametrize("mode", MODES)
def test_the_server_closing_the_connection_without_a_response(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(*[Disconnect()] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMUnavailableError)
    assert requests == error.attempts == ATTEMPTS


@pytest.mark.parametrize("mode", ["send", "asend"])
def test_a_completion_body_cut_short(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(*[Truncated(ANSWER, fraction=0.5)] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMUnavailableError)
    assert requests == error.attempts == ATTEMPTS


@pytest.mark.parametrize("mode", STREAMED)
def test_a_stream_cut_mid_way_at_the_http_level(fake_openai, signup, mode):
    """Chunked transfer, closed without its last chunk, after text has started: raised, not retried."""
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(Truncated(ANSWER, fraction=0.6, chunked=True), ANSWER)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMUnavailableError)
    assert requests == error.attempts == 1, "text had started: no retry"
    recovers(conversation, mode, fake_openai)


@pytest.mark.parametrize("mode", STREAMED)
def test_an_sse_stream_cut_mid_way(fake_openai, signup, mode):
    """The body ends cleanly but the SSE stream stops mid-message: no finish_reason, no usage, no [DONE].

    Without a finish reason the text is not used: the turn fails (retried while nothing was shown).
    """
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(*[Truncated(ANSWER, fraction=0.6)] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMError)
    assert 1 <= requests == error.attempts <= ATTEMPTS


@pytest.mark.parametrize("mode", MODES)
def test_a_non_json_body_with_status_200(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    page = RawBody(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
    fake_openai.add(*[page] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMError)
    assert 1 <= requests == error.attempts <= ATTEMPTS


@pytest.mark.parametrize("mode", MODES)
def test_an_empty_choices_list(fake_openai, signup, mode):
    conversation = opened(signup, fake_openai, mode)
    fake_openai.add(*[NoChoices()] * 10)
    error, requests = failed_turn(conversation, mode, fake_openai, LLMError)
    assert 1 <= requests == error.attempts <= ATTEMPTS


# ---------------------------------------------------------------- the opening turn, and streamed text


@pytest.mark.parametrize("mode", ["start", "astart"])
def test_a_failed_opening_changes_nothing(fake_openai, signup, mode):
    conversation = llm_fsm.Conversation(signup, client(fake_openai.url))
    before = conversation.snapshot()
    fake_openai.add(*[HTTPError(503)] * 10)
    with pytest.raises(LLMUnavailableError) as info:
        conversation.start() if mode == "start" else asyncio.run(conversation.astart())
    assert conversation.snapshot() == before and len(fake_openai.requests) == info.value.attempts == ATTEMPTS
    assert_one_line(info.value)


def test_text_shown_before_a_cut_stream_is_not_kept(fake_openai, signup):
    """The deltas already yielded when the stream breaks are not in the history: the turn did not happen."""
    conversation = opened(signup, fake_openai, "stream")
    fake_openai.add(Truncated(ANSWER, fraction=0.9, chunked=True))
    before = conversation.snapshot()
    shown = []
    with pytest.raises(LLMUnavailableError):
        for event in conversation.stream("I'm Ann"):
            if isinstance(event, MessageDelta):
                shown.append(event.text)
    assert shown, "part of the message was streamed before the cut"
    assert conversation.snapshot() == before and conversation.history == before.history
