"""Whether a turn may start: the one rule (llm_fsm.turn.refusals) that Conversation and the HTTP API apply."""

from __future__ import annotations

import pytest

import llm_fsm
from llm_fsm.errors import ConversationEnded, ConversationError, ConversationPaused, EmptyMessageError
from llm_fsm.hooks import Break, Hooks
from llm_fsm.testing import ScriptedLLM, reply
from llm_fsm.turn.refusals import Refusal, turn_refusal


def test_a_new_conversation_may_open_and_take_a_message(signup):
    conversation = llm_fsm.Conversation(signup, ScriptedLLM())
    assert turn_refusal(conversation, None) is None
    assert turn_refusal(conversation, "hello") is None


@pytest.mark.parametrize(
    ("user", "reason", "error"),
    [("", "empty", EmptyMessageError), (" \n", "empty", EmptyMessageError), (3, "not_text", TypeError)],
)
def test_a_message_without_text_is_refused_with_its_reason(signup, user, reason, error):
    refused = turn_refusal(llm_fsm.Conversation(signup, ScriptedLLM()), user)
    assert refused is not None and refused.reason == reason
    assert isinstance(refused.error(), error)


def test_an_opening_after_the_opening_is_refused_and_a_resume_only_when_busy(signup):
    conversation = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Hi")]))
    conversation.start()
    refused = turn_refusal(conversation, None)
    assert refused == Refusal("started", "the opening turn was already made: send a message", "ask_name")
    assert type(refused.error()) is ConversationError
    assert turn_refusal(conversation, None, resuming=True) is None  # the engine checks pauses and tokens
    assert turn_refusal(conversation, None, busy=True, resuming=True).reason == "busy"
    with pytest.raises(ConversationError, match="already"):  # what start() raises is the refusal's error
        conversation.start()


def test_an_ended_or_paused_conversation_is_refused_with_the_library_error(signup):
    context = {"name": "A", "email": "e@x.y", "approved": True}
    ended = llm_fsm.Conversation(signup, ScriptedLLM([reply("done", "Bye")]), state="ask_email", context=context)
    ended.send("done")
    assert isinstance(turn_refusal(ended, "more").error(), ConversationEnded)

    hooks = Hooks()

    @hooks.on("state_enter", states=["ask_email"])
    def wait(**_: object) -> None:
        raise Break("staff must approve")

    paused = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_email", "Email?", name="Ann")]), hooks=hooks)
    paused.send("Ann")
    refused = turn_refusal(paused, "more")
    assert refused is not None and refused.reason == "paused" and "staff must approve" in refused.message
    assert isinstance(refused.error(), ConversationPaused)
