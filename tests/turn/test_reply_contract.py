"""Issue 12 §1: a reply of another shape, or one cut off, is a rejection with a corrective call, never a turn."""

from __future__ import annotations

import json

import pytest

import llm_fsm
from llm_fsm.llm import LLMRequest, LLMResponse
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.fake_openai import Cut
from tests.llm.test_llm import client

GOOD = reply("ask_email", "Thanks Ann! What's your email?", name="Ann")
UNWRAPPED = {"target_state": "ask_email", "context_update": {"name": "Ann"}, "message": "UNWRAPPED: your email?"}
NULL = {"transition": None, "message": "NULL-TRANSITION: your email?"}
WHOLE = json.dumps(reply("ask_email", "Thanks Ann! What's your email address?", name="Ann"))
MID_MESSAGE = WHOLE[: WHOLE.index("your em") + len("your em")]  # json-repair would show "...your em"
OPEN_OBJECT = WHOLE[: WHOLE.index(', "reasoning"')]


@pytest.mark.parametrize("bad", [UNWRAPPED, NULL, {"message": "NO-TRANSITION: your email?"}], ids=str)
def test_a_reply_of_another_shape_gets_a_corrective_call(signup, bad):
    llm = ScriptedLLM([bad, GOOD])
    result = llm_fsm.Conversation(signup, llm).send("I'm Ann")
    assert result.state == "ask_email" and result.message == GOOD["message"] and result.llm_calls == 2
    assert [r.kind for r in result.rejected] == ["format"]
    assert '"transition"' in llm.requests[1].messages[-1]["content"], "the correction shows the shape"


def test_a_reply_of_another_shape_never_becomes_a_stay(signup):
    # Both tries misshapen: the turn falls back; the misshapen message is never shown.
    result = llm_fsm.Conversation(signup, ScriptedLLM([UNWRAPPED, NULL])).send("I'm Ann")
    assert result.state == "ask_name" and "UNWRAPPED" not in result.message and "NULL" not in result.message
    assert result.message == llm_fsm.conversation.DEFAULT_FALLBACK and result.context == {}
    assert result.fallback and result.to_dict()["fallback"] is True


def test_a_model_that_repeats_the_fallback_message_is_not_a_fallback(signup):
    # Seen with SmolLM2-135M: after a fallback turn, the model copied the fallback text from the history into a
    # valid move; the result must say what happened (a move, not a fallback), whatever the message reads.
    conversation = llm_fsm.Conversation(signup, ScriptedLLM([UNWRAPPED, NULL]))
    assert conversation.send("I'm Ann").fallback
    conversation.llm.add(reply("ask_email", llm_fsm.conversation.DEFAULT_FALLBACK, name="Ann"))
    result = conversation.send("I'm Ann, really")
    assert result.state == "ask_email" and result.message == llm_fsm.conversation.DEFAULT_FALLBACK
    assert not result.fallback and result.to_dict()["fallback"] is False


class Truncating:
    """Answers first with a reply the provider cut at the token limit, then with a whole one."""

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if len(self.requests) == 1:  # well-formed JSON, but the provider says it stopped at the limit
            return LLMResponse(json.dumps(reply("ask_email", "Thanks Ann! What's your e")), finish_reason="length")
        return LLMResponse(json.dumps(GOOD), finish_reason="stop")

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def test_a_reply_cut_at_the_token_limit_is_refused_and_the_retry_may_be_longer(signup):
    llm = Truncating()
    result = llm_fsm.Conversation(signup, llm).send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]
    assert "cut off" in result.rejected[0].reason
    assert [r.longer for r in llm.requests] == [False, True]


class CutOnce(Truncating):
    """Answers first with ``text``, cut at the token limit, then with a whole reply."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            return LLMResponse(self.text, finish_reason="length")
        return LLMResponse(json.dumps(GOOD), finish_reason="stop")


def test_a_reply_cut_in_its_reasoning_stands_and_one_cut_in_its_message_does_not(signup):
    loop = WHOLE[: WHOLE.index("Thanks Ann!")] + "Thanks Ann! Your email? " + "And your email? " * 5 + "And yo"
    # guided (a small model's loop): the loop cut after its first time; the move and the update as written
    result = llm_fsm.Conversation(signup, CutOnce(loop), guided=True).send("I'm Ann")
    assert (result.message, result.state, result.llm_calls) == ("Thanks Ann! Your email?", "ask_email", 1)
    # plain: the runtime does not rewrite a message; it is asked again
    result = llm_fsm.Conversation(signup, CutOnce(loop)).send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]
    reasoning = json.dumps({**reply("ask_email", "Your email?", name="Ann"), "reasoning": "The user gave a name and"})
    result = llm_fsm.Conversation(signup, CutOnce(reasoning[:-3])).send("I'm Ann")
    assert (result.message, result.llm_calls, result.rejected) == ("Your email?", 1, ())
    # a message cut mid-sentence, with no loop, is never shown
    result = llm_fsm.Conversation(signup, CutOnce(MID_MESSAGE)).send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]


@pytest.mark.parametrize("text", [MID_MESSAGE, OPEN_OBJECT], ids=["mid-message", "open-object"])
def test_json_that_stops_short_is_never_committed(signup, text):
    result = llm_fsm.Conversation(signup, ScriptedLLM([text, GOOD])).send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_cut_over_http_is_refused_and_max_tokens_doubles(fake_openai, signup, stream):
    fake_openai.add(Cut(json.dumps(reply("ask_email", "Thanks Ann! What's your e"))), json.dumps(GOOD))
    conv = llm_fsm.Conversation(signup, client(fake_openai, stream=stream, max_tokens=40))
    if stream:
        events = list(conv.stream("I'm Ann"))
        result = events[-1]
        start = max((i + 1 for i, e in enumerate(events) if isinstance(e, MessageReset)), default=0)
        assert "".join(e.text for e in events[start:] if isinstance(e, MessageDelta)) == GOOD["message"]
    else:
        result = conv.send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]
    assert [r["max_tokens"] for r in fake_openai.requests] == [40, 80]
    assert conv.history[-1].assistant == GOOD["message"]


# -- issue 24 §4: the last shapes that were read past ---------------------------------------------

BODY = json.dumps(GOOD)
TWO_TRANSITIONS = BODY.replace('"message"', '"transition": {"target_state": "ask_name"}, "message"', 1)
TWO_TARGETS = BODY.replace('"context_update"', '"target_state": "ask_name", "context_update"', 1)
TWO_VALUES = BODY.replace('"name": "Ann"', '"name": "Ann", "name": "Bob"', 1)
LOOSE_TWO_TRANSITIONS = TWO_TRANSITIONS.replace('"reasoning": "r"}', '"reasoning": "r",}')  # json-repair's path
MISREAD = [
    (json.dumps({**GOOD, "message": "   \n"}), "the message is only whitespace"),
    (json.dumps({**GOOD, "message": "\u200b\u2060 \ufeff"}), "the message is only invisible characters"),
    (f"[{BODY}]", "the reply is a JSON list"),
    (f"```json\n[\n  {BODY}\n]\n```", "the reply is a JSON list"),
    (TWO_TRANSITIONS, 'the key "transition" twice at the top level'),
    (f"{BODY}\n{BODY.replace('Ann', 'Bob')}", "the reply holds 2 JSON objects"),  # json-repair kept the last
    (f"```json\n{BODY}\n```\nor\n```json\n{BODY}\n```", "the reply holds 2 JSON objects"),
    (LOOSE_TWO_TRANSITIONS, 'the key "transition" twice at the top level'),
    (TWO_TARGETS, 'the key "target_state" twice inside "transition"'),
    (TWO_VALUES, 'the key "name" twice in one object'),
]


@pytest.mark.parametrize(("bad", "why"), MISREAD, ids=lambda v: v[:24])
def test_a_blank_message_a_list_or_a_key_given_twice_is_a_format_rejection_with_a_correction(signup, bad, why):
    llm = ScriptedLLM([bad, GOOD])
    result = llm_fsm.Conversation(signup, llm).send("I'm Ann")
    assert result.message == GOOD["message"] and result.llm_calls == 2 and result.context == {"name": "Ann"}
    assert [r.kind for r in result.rejected] == ["format"] and why in result.rejected[0].reason
    assert why in llm.requests[1].messages[-1]["content"], "the correction says what was wrong"


def test_a_key_given_twice_never_becomes_the_turn(signup):
    # Both tries give "transition" twice, the last one a move to ask_name: neither move is made.
    result = llm_fsm.Conversation(signup, ScriptedLLM([TWO_TRANSITIONS, TWO_TRANSITIONS])).send("I'm Ann")
    assert result.state == "ask_name" and result.message == llm_fsm.conversation.DEFAULT_FALLBACK
    assert result.context == {}


def test_a_reply_in_a_list_streams_nothing(signup):
    events = list(llm_fsm.Conversation(signup, ScriptedLLM([f"[{BODY}]", GOOD])).stream("I'm Ann"))
    assert not any(isinstance(e, MessageReset) for e in events), "nothing of the listed reply was shown"
    assert "".join(e.text for e in events if isinstance(e, MessageDelta)) == GOOD["message"]


def test_replies_read_only_for_their_data_still_take_the_last_of_two_keys():
    # Summaries and trace scrubbing read what is there; only the reply contract refuses the repeat.
    assert llm_fsm.contract.reply_object('{"summary": "a", "summary": "b"}') == {"summary": "b"}
    with pytest.raises(llm_fsm.errors.ReplyFormatError, match='"summary" twice'):
        llm_fsm.contract.reply_object('{"summary": "a", "summary": "b"}', exact=True)
