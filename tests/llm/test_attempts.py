"""LiteLLMClient's attempts: numbered 1 to max_retries + 1, each retry's delay jittered once (the notice and the
sleep agree), and a call that succeeds at once leaves the global random state as it found it."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from llm_fsm.llm import LiteLLMClient, LLMRequest

REPLY = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="{}"), finish_reason="stop")])


def fake_client(completion: Any, **options: Any) -> LiteLLMClient:
    client = LiteLLMClient("openai/x", api_base="http://127.0.0.1:9/v1", response_format="none", **options)
    client._litellm = SimpleNamespace(completion=completion)  # type: ignore[assignment]
    return client


def test_the_attempts_are_numbered_from_one_to_max_retries_plus_one():
    client = fake_client(lambda **_: REPLY, max_retries=3)
    assert [attempt.number for attempt in client._attempts()] == [1, 2, 3, 4]
    assert [attempt.number for attempt in fake_client(lambda **_: REPLY, max_retries=0)._attempts()] == [1]


def test_a_delay_is_jittered_once_within_its_backoff():
    client = fake_client(lambda **_: REPLY, backoff=1.0, max_backoff=8.0)
    for attempt in client._attempts():
        first = attempt.delay
        assert attempt.delay == first  # the notice says the delay the sleep waits
        ceiling = min(8.0, 2.0 ** (attempt.number - 1))
        assert ceiling / 2 <= first <= ceiling


def test_a_call_that_succeeds_at_once_draws_no_random_number():
    client = fake_client(lambda **_: REPLY)
    random.seed(7)
    state = random.getstate()
    response = client.complete(LLMRequest([{"role": "user", "content": "hi"}]))
    assert response.text == "{}" and random.getstate() == state
