"""The message a person reads belongs to the state the conversation is in, for every model.

A reply that stays is never moved with its stay message. Plain mode: the engine judges the target the model
named, and nothing else. Guided mode (a small model's aid) moves a reply that stays where its update fulfils
a move's conditions, and asks once more, with the entered state's prompt, for that state's message
(``llm_fsm.guided.entered``); where that call gives none, the conversation stays, as the model proposed."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Conversation
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply

SIGNUP = {
    "name": "signup",
    "initial_state": "ask_name",
    "global_transitions": [
        {
            "target_state": "human",
            "description": "The user asks for a person",
            "conditions": [{"logic": {"==": [{"var": "wants_human"}, True]}}],
        }
    ],
    "states": {
        "ask_name": {
            "purpose": "Ask for the user's full name",
            "required_context_keys": ["full_name"],
            "transitions": [{"target_state": "ask_email", "conditions": [{"requires_context_keys": ["full_name"]}]}],
        },
        "ask_email": {
            "purpose": "Ask for the user's email",
            "required_context_keys": ["email"],
            "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["email"]}]}],
        },
        "human": {"purpose": "Say a person will take over"},
        "done": {"purpose": "Say goodbye"},
    },
}

# the model stays on purpose: half a name, and a question back
HALF_A_NAME = reply("ask_name", "And your last name?", full_name={"first": "Mei"})
ENTERED = reply("ask_email", "Thanks, Mei! What's your email?")
ASKS_FOR_A_PERSON = reply("ask_name", "Shall I put you through to someone?", wants_human=True)


def signup(*replies: dict[str, Any], guided: bool = False, **options: Any) -> tuple[Conversation, ScriptedLLM]:
    llm = ScriptedLLM(list(replies))
    return Conversation(llm_fsm.load(SIGNUP), llm, guided=guided, **options), llm


def shown_of(events: list[Any]) -> tuple[str, Any]:
    """The text a streaming client shows of a turn's ``events`` (resets applied), and the turn's result."""
    shown = ""
    for event in events[:-1]:
        if isinstance(event, MessageReset):
            shown = ""
        elif isinstance(event, MessageDelta):
            shown += event.text
    return shown, events[-1]


async def collected(conversation: Conversation, text: str) -> list[Any]:
    return [event async for event in conversation.astream(text)]


def drive(conversation: Conversation, how: str, text: str) -> tuple[str, str, int]:
    """(state, the message the person reads, model calls) of one turn, sent, awaited or streamed."""
    if how == "send":
        result = conversation.send(text)
        return result.state, result.message, result.llm_calls
    if how == "asend":
        result = asyncio.run(conversation.asend(text))
        return result.state, result.message, result.llm_calls
    events = asyncio.run(collected(conversation, text)) if how == "astream" else list(conversation.stream(text))
    shown, result = shown_of(events)
    assert shown == result.message  # what streamed is what the turn says
    return result.state, shown, result.llm_calls


# -- plain: the named target, judged ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["send", "asend", "stream", "astream"])
def test_plain_a_reply_that_stays_stays_with_its_message(how: str) -> None:
    conversation, _ = signup(HALF_A_NAME)
    assert drive(conversation, how, "Mei") == ("ask_name", "And your last name?", 1)
    assert conversation.context["full_name"] == {"first": "Mei"}  # what it wrote is kept


@pytest.mark.parametrize("how", ["send", "asend", "stream", "astream"])
def test_plain_a_reply_that_stays_is_not_moved_from_anywhere(how: str) -> None:
    conversation, _ = signup(ASKS_FOR_A_PERSON)
    assert drive(conversation, how, "can I talk to someone?") == (
        "ask_name",
        "Shall I put you through to someone?",
        1,
    )


def test_plain_the_next_answer_lands_in_the_state_that_asked_for_it() -> None:
    whole = reply("ask_email", "Thanks, Mei Lin! Your email?", full_name={"first": "Mei", "last": "Lin"})
    conversation, llm = signup(HALF_A_NAME, whole)
    conversation.send("Mei")
    assert conversation.send("Lin").state == "ask_email"
    assert [request.state for request in llm.requests] == ["ask_name", "ask_name"]


def test_plain_a_reply_that_names_the_move_still_takes_it() -> None:
    conversation, _ = signup(reply("ask_email", "Your email?", full_name="Mei Lin"))
    assert conversation.send("Mei Lin").state == "ask_email"


# -- guided: the move the update fulfils, with the entered state's message ----------------------------


@pytest.mark.parametrize("how", ["send", "asend", "stream", "astream"])
def test_guided_a_moved_reply_says_the_entered_states_message(how: str) -> None:
    conversation, llm = signup(HALF_A_NAME, ENTERED, guided=True)
    assert drive(conversation, how, "Mei") == ("ask_email", "Thanks, Mei! What's your email?", 2)
    second = llm.requests[1]
    # the entered state's prompt, over the context the reply left, held to that state's message alone
    assert second.state == "ask_email" and second.context == {"full_name": {"first": "Mei"}}
    assert "Ask for the user's email" in second.messages[0]["content"]
    transition = second.strict_schema["properties"]["transition"]["properties"]
    assert transition["target_state"]["enum"] == ["ask_email"] and transition["context_update"]["properties"] == {}
    assert second.messages[-1] == {"role": "user", "content": "Mei"}
    assert conversation.history[-1].assistant == "Thanks, Mei! What's your email?"


@pytest.mark.parametrize("how", ["send", "stream"])
def test_guided_a_move_from_anywhere_says_the_entered_states_message(how: str) -> None:
    put_through = reply("human", "A colleague will take over now.")
    conversation, llm = signup(ASKS_FOR_A_PERSON, put_through, guided=True)
    assert drive(conversation, how, "can I talk to someone?") == ("human", "A colleague will take over now.", 2)
    assert llm.requests[1].state == "human"


@pytest.mark.parametrize("how", ["send", "stream"])
def test_guided_no_message_for_the_entered_state_and_the_conversation_stays(how: str) -> None:
    wrong_state = reply("done", "Goodbye!")  # a message for yet another state
    for second in (wrong_state, "not json at all"):
        conversation, _ = signup(HALF_A_NAME, second, guided=True)
        assert drive(conversation, how, "Mei") == ("ask_name", "And your last name?", 2)
        assert conversation.context["full_name"] == {"first": "Mei"}


def test_guided_with_no_call_left_the_conversation_stays() -> None:
    conversation, llm = signup(HALF_A_NAME, guided=True, max_calls_per_turn=1)
    result = conversation.send("Mei")
    assert (result.state, result.message, len(llm.requests)) == ("ask_name", "And your last name?", 1)


def test_guided_a_streamed_stay_message_is_never_shown_when_the_reply_moves() -> None:
    conversation, _ = signup(HALF_A_NAME, ENTERED, guided=True)
    shown: list[str] = []
    for event in conversation.stream("Mei"):
        if isinstance(event, MessageDelta):
            shown.append(event.text)
    assert "".join(shown) == "Thanks, Mei! What's your email?"
    assert not any("last name" in text for text in shown)


# -- sub-conversations ----------------------------------------------------------------------------

SUBFLOWS = Path(__file__).parents[1] / "data" / "subflows"
OPEN = reply("ask_policy", "Hi! Your policy number?")
TO_IDENTITY = reply("identity", "Thanks, let's check who you are.", policy_number="P1", customer_name="Ann")
DOB = reply("check", "What was your first pet's name?", dob="1990-01-01")
# the security answer is right, and the model stays to say so: the sub-conversation's move to "ok" holds
RIGHT_ANSWER = reply("check", "Correct! Anything else I can check?", verified=True)


def in_check(tmp_path: Path, *more: Any, guided: bool = False) -> tuple[Conversation, ScriptedLLM]:
    for path in SUBFLOWS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    llm = ScriptedLLM([OPEN, TO_IDENTITY, DOB, *more])
    conversation = Conversation(llm_fsm.load(tmp_path / "claim.json"), llm, guided=guided)
    conversation.start()
    conversation.send("P1, I'm Ann")
    assert conversation.send("1 Jan 1990").frames[-1] == ("identity_check", "check")
    return conversation, llm


def test_plain_a_sub_conversation_does_not_return_on_a_reply_that_stays(tmp_path: Path) -> None:
    conversation, _ = in_check(tmp_path, RIGHT_ANSWER)
    result = conversation.send("Rex")
    assert result.frames[-1] == ("identity_check", "check") and result.message == "Correct! Anything else I can check?"


def test_guided_a_sub_conversations_return_says_the_message_of_the_state_it_ends_in(tmp_path: Path) -> None:
    confirmed = reply("ok", "Your identity is confirmed.")
    conversation, llm = in_check(tmp_path, RIGHT_ANSWER, confirmed, guided=True)
    result = conversation.send("Rex")
    assert (result.state, result.message, result.llm_calls) == ("describe_loss", "Your identity is confirmed.", 2)
    assert (llm.requests[-1].definition, llm.requests[-1].state) == ("identity_check", "ok")


# -- from the terminal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "state", "message"),
    [([], "ask_name", "And your last name?"), (["--guided"], "ask_email", ENTERED["message"])],
)
def test_run_with_scripted_replies_is_plain_or_guided_as_asked(tmp_path: Path, options, state, message) -> None:
    import json

    from typer.testing import CliRunner

    from llm_fsm.cli import app

    (tmp_path / "signup.json").write_text(json.dumps(SIGNUP))
    opening = reply("ask_name", "Hi! Your full name?")
    (tmp_path / "replies.json").write_text(json.dumps([opening, HALF_A_NAME, ENTERED]))
    args = ["run", str(tmp_path / "signup.json"), "--model", f"scripted:{tmp_path / 'replies.json'}"]
    result = CliRunner().invoke(app, [*args, *options], input="Mei\n")
    assert result.exit_code == 0, result.output
    turn = json.loads(result.stdout.splitlines()[-1])
    assert (turn["state"], turn["message"]) == (state, message)
