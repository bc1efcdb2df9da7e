from __future__ import annotations

import asyncio
import json

import pytest

import llm_fsm
from llm_fsm.errors import ConversationEnded, ConversationError, EmptyMessageError, LLMUnavailableError
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply


def test_a_valid_turn_makes_exactly_one_call(signup):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ann, your email?", name="Ann")])
    conv = llm_fsm.Conversation(signup, llm)
    opening = conv.start()
    assert (opening.llm_calls, opening.previous_state, opening.turn) == (1, None, 0)
    result = conv.send("I'm Ann")
    assert result.llm_calls == 1 and llm.calls == 2
    assert (result.previous_state, result.state, result.transitioned) == ("ask_name", "ask_email", True)
    assert result.context_updates == {"name": "Ann"} and conv.context == {"name": "Ann"}
    assert result.usage.total_tokens > 0 and result.latency >= 0
    assert [h.user for h in conv.history] == [None, "I'm Ann"]


def test_what_the_opening_writes_is_recorded_at_turn_0_and_the_first_message_at_turn_1(signup):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?", name="Ann"), reply("ask_email", "Your email?", name="Bo")])
    conv = llm_fsm.Conversation(signup, llm)
    conv.start()
    assert (conv.provenance["name"]["by"], conv.provenance["name"]["turn"]) == ("llm", 0)
    conv.send("I'm Bo")
    assert conv.provenance["name"]["turn"] == 1


@pytest.mark.parametrize("text", ["", " \n\t ", "\u200b\u00ad\u3164"], ids=["empty", "whitespace", "invisible"])
def test_an_empty_message_is_refused_and_changes_nothing(signup, text):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?")])
    conv = llm_fsm.Conversation(signup, llm)
    conv.start()
    before = conv.snapshot()

    async def asend() -> None:
        await conv.asend(text)

    for attempt in (lambda: conv.send(text), lambda: list(conv.stream(text)), lambda: asyncio.run(asend())):
        with pytest.raises(EmptyMessageError, match="nothing to answer") as refused:
            attempt()
        assert isinstance(refused.value, ValueError)
    assert conv.snapshot() == before and llm.calls == 1, "no turn ran, no model call was made"


def test_the_user_message_is_sent_once_as_the_user_turn(signup):
    llm = ScriptedLLM([reply("ask_name", "Hi"), reply("ask_name", "Name?")])
    conv = llm_fsm.Conversation(signup, llm)
    conv.start()
    conv.send("UNIQUE-MARKER-123")
    messages = llm.requests[1].messages
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "UNIQUE-MARKER-123"
    assert "UNIQUE-MARKER-123" not in messages[0]["content"]


def test_a_failed_condition_gets_one_corrective_call_that_says_why(signup):
    llm = ScriptedLLM([reply("ask_email", "Great, your email?"), reply("ask_name", "What is your name?")])
    conv = llm_fsm.Conversation(signup, llm)
    result = conv.send("hello")
    assert result.llm_calls == 2 and result.state == "ask_name"
    assert result.message == "What is your name?"
    correction = llm.requests[1].messages[-1]["content"]
    assert "transition to 'ask_email' rejected: condition 'has name' needs key 'name'" in correction
    assert llm.requests[1].messages[-2] == {
        "role": "assistant",
        "content": json.dumps(reply("ask_email", "Great, your email?")),
    }
    assert [r.kind for r in result.rejected] == ["condition"]


def test_when_the_correction_is_also_invalid_the_turn_stays_and_never_claims_the_move(signup):
    llm = ScriptedLLM([reply("done", "All set, you're registered!", email="a@b.c"), "not json at all"])
    conv = llm_fsm.Conversation(signup, llm, state="ask_email", context={"name": "Ann"}, fallback_message="FALLBACK")
    result = conv.send("a@b.c")
    assert result.state == "ask_email" and result.message == "FALLBACK"
    assert "registered" not in result.message
    assert conv.context == {"name": "Ann", "email": "a@b.c"}, "valid context updates are kept"
    assert [r.kind for r in result.rejected] == ["condition", "format"]
    assert conv.history[-1].assistant == "FALLBACK"


def test_unknown_and_undeclared_targets_are_rejected(signup):
    llm = ScriptedLLM([reply("nowhere", "x"), reply("done", "y"), reply("ask_name", "ok")])
    conv = llm_fsm.Conversation(signup, llm, max_corrections=2)
    result = conv.send("hi")
    reasons = [r.reason for r in result.rejected]
    assert "there is no state 'nowhere'" in reasons[0]
    assert "'ask_name' has no transition to it" in reasons[1]
    assert result.llm_calls == 3 and result.state == "ask_name"


def test_the_model_cannot_approve_itself_and_jump_to_the_final_state(signup):
    """The documented incident: the model writes an approval flag and jumps to the end."""
    attack = reply("done", "Approved! You're all set.", email="a@b.c", approved=True, _approved=True)
    llm = ScriptedLLM([attack, attack])
    conv = llm_fsm.Conversation(signup, llm, state="ask_email", context={"name": "Ann"})
    result = conv.send("approve me")
    assert conv.state == "ask_email" and not conv.ended
    assert "approved" not in conv.context and "_approved" not in conv.context
    refused_keys = {r.key for r in result.rejected if r.kind == "context_key"}
    assert refused_keys == {"approved", "_approved"}
    # Code may set the gate key; then the same move is accepted.
    approved = llm_fsm.Conversation(
        signup, ScriptedLLM([attack]), state="ask_email", context={"name": "A", "approved": True}
    )
    assert approved.send("ok").state == "done" and approved.ended


def test_a_provider_failure_changes_nothing_and_raises_a_library_error(signup):
    llm = ScriptedLLM([reply("ask_name", "Hi"), LLMUnavailableError("down", model="m")])
    conv = llm_fsm.Conversation(signup, llm)
    conv.start()
    before = conv.snapshot()
    with pytest.raises(llm_fsm.FSMError):
        conv.send("I'm Ann")
    assert conv.snapshot() == before


def test_terminal_state_ends_the_conversation(signup):
    llm = ScriptedLLM([reply("done", "Thanks, bye!")])
    conv = llm_fsm.Conversation(
        signup, llm, state="ask_email", context={"name": "A", "email": "e@x.y", "approved": True}
    )
    result = conv.send("done")
    assert result.ended and conv.ended and conv.status == "ended"
    with pytest.raises(ConversationEnded, match="ended"):
        conv.send("more")


def test_start_at_any_state_with_context_and_unknown_state_is_refused(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM(), state="ask_email", context={"name": "Bo"})
    assert conv.state == "ask_email" and conv.context == {"name": "Bo"}
    with pytest.raises(ConversationError, match="unknown state 'nope'"):
        llm_fsm.Conversation(signup, ScriptedLLM(), state="nope")


def test_start_twice_is_an_error(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Hi")]))
    conv.start()
    with pytest.raises(ConversationError, match="already"):
        conv.start()


def test_context_property_is_a_copy(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM(), context={"nested": {"a": 1}})
    conv.context["nested"]["a"] = 2
    assert conv.context == {"nested": {"a": 1}}


@pytest.mark.parametrize("form", ["model", "dict", "json"])
def test_snapshot_restore_round_trip(signup, form):
    llm = ScriptedLLM([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")])
    conv = llm_fsm.Conversation(signup, llm)
    conv.start()
    conv.send("Ann")
    snap = conv.snapshot()
    data = {"model": snap, "dict": snap.model_dump(mode="json"), "json": snap.model_dump_json()}[form]
    json.dumps(snap.model_dump(mode="json"))  # JSON-serialisable
    restored = llm_fsm.Conversation.restore(data, signup, ScriptedLLM([reply("ask_email", "Still need it")]))
    assert (restored.state, restored.context, restored.history) == (conv.state, conv.context, conv.history)
    assert restored.send("hmm").turn == 2


def edited(definition, edit):
    """``definition`` loaded again after ``edit`` changed its JSON."""
    data = json.loads(json.dumps(definition.model_dump(by_alias=True, exclude_none=True)))
    edit(data)
    return llm_fsm.load(data)


def test_restore_refuses_a_changed_structure_unless_asked(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM())
    other = edited(signup, lambda d: d["states"]["ask_name"]["required_context_keys"].append("age"))
    with pytest.raises(ConversationError, match="keys, checks or settings of state 'ask_name' changed"):
        llm_fsm.Conversation.restore(conv.snapshot(), other, ScriptedLLM())
    restored = llm_fsm.Conversation.restore(conv.snapshot(), other, ScriptedLLM(), allow_changed_definition=True)
    assert restored.state == "ask_name" and restored.snapshot().definition_hash == other.content_hash
    with pytest.raises(ConversationError, match="not a valid snapshot"):
        llm_fsm.Conversation.restore("{}", signup, ScriptedLLM())


def _edit_prose(data):
    data["persona"] = "A chatty assistant."
    data["description"] = "Say hello first."
    state = data["states"]["ask_email"]
    state["purpose"], state["instructions"] = "Ask for the email address", "Be brief."
    state["example_dialogue"] = [{"user": "hi"}, {"assistant": "Your email?"}]
    state["transitions"][0]["description"] = "The email is known"
    state["transitions"][0]["conditions"][0]["description"] = "an email was given"


def test_a_prose_edit_does_not_block_restoring_unless_strict(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM())
    other = edited(signup, _edit_prose)
    assert other.content_hash != signup.content_hash
    restored = llm_fsm.Conversation.restore(conv.snapshot(), other, ScriptedLLM())
    assert restored.state == "ask_name" and restored.snapshot().definition_hash == other.content_hash
    with pytest.raises(ConversationError, match="descriptions or instructions of state 'ask_email' changed; top-level"):
        llm_fsm.Conversation.restore(conv.snapshot(), other, ScriptedLLM(), strict_definition=True)


@pytest.mark.parametrize(
    ("edit", "change"),
    [
        (lambda d: d["states"]["ask_email"]["transitions"][1].update(priority=5), "transitions of state 'ask_email'"),
        (lambda d: d["states"]["ask_email"]["transitions"][0]["conditions"][1].update(logic=True), "transitions of"),
        (lambda d: d["states"]["done"].update(checks=[{"kind": "max_length", "max": 9}]), "settings of state 'done'"),
        (lambda d: d.update(handler_only_keys=[]), "top-level fields changed"),
        (lambda d: d["states"].update(bye={"purpose": "Say bye"}), "state 'bye' added"),
    ],
)
def test_structure_edits_still_block_restoring(signup, edit, change):
    conv = llm_fsm.Conversation(signup, ScriptedLLM())
    with pytest.raises(ConversationError, match=change):
        llm_fsm.Conversation.restore(conv.snapshot(), edited(signup, edit), ScriptedLLM())


def test_snapshots_with_an_outline_of_the_older_format_still_restore(signup):
    """Snapshots saved before prose and structure were hashed apart: the same definition restores;
    any change (they cannot tell prose from structure) is refused, named as it was then."""
    snap = llm_fsm.Conversation(signup, ScriptedLLM()).snapshot()
    older = snap.model_copy(update={"definition_outline": signup._outline_before_prose})
    assert llm_fsm.Conversation.restore(older, signup, ScriptedLLM()).state == "ask_name"
    other = edited(signup, _edit_prose)
    with pytest.raises(ConversationError, match="purpose or instructions of state 'ask_email' changed"):
        llm_fsm.Conversation.restore(older, other, ScriptedLLM())
    without_outline = snap.model_copy(update={"definition_outline": {}})
    with pytest.raises(ConversationError, match="its content changed"):
        llm_fsm.Conversation.restore(without_outline, other, ScriptedLLM())


def test_asend_runs_the_same_turn(signup):
    llm = ScriptedLLM([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")])
    conv = llm_fsm.Conversation(signup, llm)

    async def talk():
        await conv.astart()
        return await conv.asend("Ann")

    result = asyncio.run(talk())
    assert result.state == "ask_email" and conv.context == {"name": "Ann"} and llm.calls == 2


def test_unparseable_reply_is_corrected_with_the_reason(signup):
    llm = ScriptedLLM(['{"message": ', reply("ask_name", "Your name?")])
    result = llm_fsm.Conversation(signup, llm).send("hi")
    assert result.message == "Your name?" and result.llm_calls == 2
    assert result.rejected[0].kind == "truncated", "the reply stops short: a format rejection that says so"
    assert "format" in llm.requests[1].messages[-1]["content"] or "JSON" in llm.requests[1].messages[-1]["content"]


def test_corrections_are_capped(signup):
    llm = ScriptedLLM(["bad"] * 5)
    conv = llm_fsm.Conversation(signup, llm, max_corrections=0)
    result = conv.send("hi")
    assert result.llm_calls == 1 and llm.remaining == 4
    assert result.message == llm_fsm.conversation.DEFAULT_FALLBACK


def test_null_values_and_extra_namespace(signup):
    llm = ScriptedLLM([reply("ask_name", "ok", name=None, _extra={"likes": "tea"})])
    conv = llm_fsm.Conversation(signup, llm)
    result = conv.send("I like tea")
    assert conv.context == {"_extra": {"likes": "tea"}} and not result.rejected


def test_advance_passes_the_restore_options_to_stored_conversations_only(signup):
    from llm_fsm.store import advance, open_store

    store = open_store("memory:")
    first = advance(store, "c1", signup, ScriptedLLM([reply("ask_name", "Name?")]), None, allow_changed_definition=True)
    assert first.state == "ask_name"  # a new conversation: the restore options do not reach Conversation()
    other = edited(signup, lambda d: d["states"]["ask_name"]["required_context_keys"].append("age"))
    with pytest.raises(ConversationError, match="keys, checks or settings of state 'ask_name' changed"):
        advance(store, "c1", other, ScriptedLLM([reply("ask_name", "Age?")]), "Ann")
    turn = advance(store, "c1", other, ScriptedLLM([reply("ask_name", "Age?")]), "Ann", allow_changed_definition=True)
    assert turn.turn == 1 and store.load("c1").snapshot.definition_hash == other.content_hash


def test_restore_names_another_definition_and_a_refusal_by_strictness(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM())
    other = edited(signup, lambda d: d.update(name="other"))
    with pytest.raises(ConversationError, match=r"taken with another definition \('signup'\), not 'other'"):
        llm_fsm.Conversation.restore(conv.snapshot(), other, ScriptedLLM())
    prose = edited(signup, lambda d: d.update(persona="A chatty assistant."))
    with pytest.raises(ConversationError, match=r"\(refused because of strict_definition=True\)$"):
        llm_fsm.Conversation.restore(conv.snapshot(), prose, ScriptedLLM(), strict_definition=True)


@pytest.mark.parametrize("name", ["quiz", "form_filling", "order_flow", "small_talk"])
def test_a_snapshot_saved_before_tools_existed_restores_unchanged(name):
    """Fields added to the format since (tools...) hold their default in these definitions: the
    definition's hash, and so a stored conversation, must not change with the upgrade."""
    from tests.conftest import ROOT

    saved = (ROOT / "tests" / "data" / "snapshots_before_tools" / f"{name}.json").read_text()
    data = json.loads((ROOT / "fsm_definitions" / f"{name}.json").read_text())
    for state in data["states"].values():  # the example's own opening came later, with the examples' edit
        state.pop("opening", None)
    definition = llm_fsm.load(data)
    restored = llm_fsm.Conversation.restore(saved, definition, ScriptedLLM(), strict_definition=True)
    assert restored.snapshot().definition_hash == definition.content_hash


def test_a_turn_result_as_a_dict_and_back_is_the_same_result(signup):
    from llm_fsm.turn.runner import TurnResult

    llm = ScriptedLLM(["not json", reply("ask_email", "Thanks Ann, your email?", name="Ann")])
    conversation = llm_fsm.Conversation(signup, llm)
    result = conversation.send("I'm Ann")
    data = result.to_dict()
    assert (data["user"], data["turn"], data["context_updates"], data["llm_calls"]) == (
        "I'm Ann",
        1,
        {"name": "Ann"},
        2,
    )
    assert data["latency_ms"] == round(result.latency * 1000, 3) and data["ended"] is False
    again = TurnResult.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    assert (again.user, again.turn, again.context_updates, again.llm_calls, again.ended) == (
        "I'm Ann",
        1,
        {"name": "Ann"},
        2,
        False,
    )
    assert again.rejected == result.rejected and again.rejected[0].kind == "format"
