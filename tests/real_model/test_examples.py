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
from tests.real_model.conftest import check_step, check_turn, model_opens

pytestmark = pytest.mark.real_model

TURNS = 2  # after the opening; each turn is one call (two when a reply is refused) of a few seconds


def script_lines(path: Path) -> list[str]:
    text = (path.parent / "scripts" / f"{path.stem}.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_opening_and_turns_keep_the_invariants(path, make_client, scorecard):
    definition = model_opens(path)
    if definition.is_workflow:
        return run_workflow(path, definition, make_client, scorecard)
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


STEPS = 4  # a workflow's run, bounded for the small model: each step is a call or two of a few seconds


def run_workflow(path: Path, definition: llm_fsm.FSMDefinition, make_client, scorecard) -> None:
    """A workflow's runs, step by step (from its task, or its opening and first lines): every step keeps the
    invariants, and a run the model keeps going stops at the bound, its steps standing."""
    bounded = definition.model_copy(update={"max_run_steps": STEPS})
    conversation = llm_fsm.Conversation(bounded, make_client(), hooks=example_hooks(path))
    lines = script_lines(path)
    inputs = lines[:1] if bounded.states[bounded.initial_state].acts else [None, *lines[:TURNS]]
    for text in inputs:
        if conversation.ended or conversation.paused:
            break
        before = conversation.snapshot()
        try:
            for result in conversation.run(text):
                check_step(bounded, conversation, before, result)
                scorecard.add(path.stem, result)
                before = conversation.snapshot()
        except llm_fsm.RunLimitError as limit:
            assert limit.limit == STEPS and conversation.state == limit.state  # every step before it stands
            break


def test_the_async_api_against_the_real_server(make_client):
    definition = model_opens(Path(EXAMPLES[0]).parent / "small_talk.json")
    conversation = llm_fsm.Conversation(definition, make_client())

    async def two_turns() -> None:
        before = conversation.snapshot()
        check_turn(definition, conversation, before, await conversation.astart())
        before = conversation.snapshot()
        check_turn(definition, conversation, before, await conversation.asend("Hi! I'm doing well, thanks."))

    asyncio.run(two_turns())
