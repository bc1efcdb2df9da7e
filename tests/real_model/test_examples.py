"""Every example, opened and driven a few turns by a real small model, keeps the conversation's invariants.

What a 135M-parameter model can be relied on to do is not much: reply in the shape the grammar forces. So these
tests assert what must hold whatever it writes (see ``check_turn``), not where the conversation goes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import llm_fsm
from tests.conftest import EXAMPLES, example_hooks
from tests.real_model.conftest import check_turn, model_opens

pytestmark = pytest.mark.real_model

TURNS = 2  # after the opening; each turn is one call (two when a reply is refused) of a few seconds


def script_lines(path: Path) -> list[str]:
    text = (path.parent / "scripts" / f"{path.stem}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_opening_and_turns_keep_the_invariants(path, make_client, scorecard):
    definition = model_opens(path)
    conversation = llm_fsm.Conversation(definition, make_client(), hooks=example_hooks(path))
    before = conversation.snapshot()
    result = conversation.start()
    check_turn(definition, conversation, before, result)
    assert result.previous_state is None and result.user is None
    scorecard.add(path.stem, result)
    for line in script_lines(path)[:TURNS]:
        if conversation.ended or conversation.paused:
            break
        before = conversation.snapshot()
        result = conversation.send(line)
        check_turn(definition, conversation, before, result)
        assert result.user == line and result.previous_state == before.state
        for run in result.tool_calls:  # a tool the model called ran through the state's own list
            assert run.name in definition.states[before.state].tools
        if result.paused:  # a tool call that needs a person's approval: the turn stopped before it ran
            assert conversation.pending is not None and conversation.pending.kind == "tool_approval"
        scorecard.add(path.stem, result)


def test_the_async_api_against_the_real_server(make_client):
    definition = model_opens(Path(EXAMPLES[0]).parent / "small_talk.json")
    conversation = llm_fsm.Conversation(definition, make_client())

    async def two_turns() -> None:
        before = conversation.snapshot()
        check_turn(definition, conversation, before, await conversation.astart())
        before = conversation.snapshot()
        check_turn(definition, conversation, before, await conversation.asend("Hi! I'm doing well, thanks."))

    asyncio.run(two_turns())
