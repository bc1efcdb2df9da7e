"""The turn's reply modes (llm_fsm.turn.reply_modes): what helps a small model held to a grammar (guided) never
reaches a capable model's reply (plain), whose reply is judged as the model wrote it."""

from __future__ import annotations

from llm_fsm.contract import Reply
from llm_fsm.turn.reply_modes import GUIDED, PLAIN
from llm_fsm.turn.verdict import cut_reply

LOOP = "You can buy it for £10. " * 4


def reply(message: str, target: str = "a") -> Reply:
    return Reply.model_validate({"transition": {"target_state": target, "context_update": {}}, "message": message})


def test_a_message_that_loops_is_cut_in_the_guided_mode_alone():
    looping = reply(LOOP.strip())
    assert PLAIN.read(looping) is looping  # a capable model's words stand as written
    assert GUIDED.read(looping).message == "You can buy it for £10."


def test_a_reply_cut_in_its_message_stands_in_the_guided_mode_alone_and_only_where_it_loops():
    cut = '{"transition": {"target_state": "a", "context_update": {}}, "message": "' + LOOP + "You can"
    assert cut_reply(cut, PLAIN) is None  # asked again: a message cut mid-sentence is not shown
    stood = cut_reply(cut, GUIDED)
    assert stood is not None and stood.message == "You can buy it for £10."
    plain = '{"transition": {"target_state": "a", "context_update": {}}, "message": "Your order is on its way and'
    assert cut_reply(plain, GUIDED) is None and cut_reply(plain, PLAIN) is None  # no loop: nothing can stand
    in_reasoning = '{"transition": {"target_state": "a", "context_update": {}}, "message": "Done.", "reasoning": "be'
    for mode in (PLAIN, GUIDED):  # the reasoning is never shown: a reply cut there stands in both
        kept = cut_reply(in_reasoning, mode)
        assert kept is not None and kept.message == "Done." and kept.reasoning == "be"
