"""A message written elsewhere recorded as the assistant's turn (``Conversation.record``, llm_fsm/recorded.py):
the next prompt shows it; append and replace; the statuses, the errors, turns, sub-conversations and summaries;
``StoredConversation.record``/``arecord`` on every store (a reload and the history's pages show it); ``serve``'s
``POST /conversations/{id}/assistant``; what the ``/v1`` endpoint does with a message it did not write."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import llm_fsm
from llm_fsm import Break, Conversation, Hooks
from llm_fsm.errors import ConversationError, ConversationPaused, EmptyMessageError, IdempotencyKeyReused
from llm_fsm.llm import LLMRequest, LLMResponse
from llm_fsm.server import create_app
from llm_fsm.snapshot import Exchange
from llm_fsm.store import StoredConversation, aadvance, open_store
from llm_fsm.store.history import TAIL
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from tests.server.test_server import (
    ALICE,
    BOB,
    TOKENS,
    GatedLLM,
    auth,
    client,
    create,
    error_of,
    live,
    orders_needing_approval,
    send_message,
    settled,
    signup,
    wait_for,
)
from tests.store.test_store import CHAT, snapshot_after, url_for, whole
from tests.subflows.test_subflows import DOB, in_identity

ROOT = Path(__file__).resolve().parents[2]
PERSON = "Sam from the team here: your parcel ships tomorrow."


def system_prompt(llm: ScriptedLLM, call: int = -1) -> str:
    return str(llm.requests[call].messages[0]["content"])


def shown(llm: ScriptedLLM, call: int = -1) -> list[tuple[str | None, str]]:
    """The exchanges a prompt showed, in order: (user, assistant); user None where the exchange had none."""
    history = re.search(r"<conversation_history>(.*)</conversation_history>", system_prompt(llm, call), re.DOTALL)
    assert history is not None
    pairs = re.findall(r"(?:<user>(.*?)</user>\s*)?<assistant>(.*?)</assistant>", history.group(1), re.DOTALL)
    return [(user or None, assistant) for user, assistant in pairs]


def chatting(*replies: Any) -> tuple[Conversation, ScriptedLLM]:
    llm = ScriptedLLM(list(replies))
    return Conversation(signup(), llm), llm


# -- append and replace ----------------------------------------------------------------------------


def test_an_appended_message_is_an_exchange_without_user_words_that_the_next_prompt_shows():
    conversation, llm = chatting(reply("ask_name", "Hi! Your name?"), reply("ask_name", "Sorry?"),
                                 reply("ask_email", "Thanks Ann!", name="Ann"))  # fmt: skip
    conversation.start()
    conversation.send("hello")
    before = conversation.snapshot()
    assert conversation.record(PERSON) is None
    assert conversation.history[-1] == Exchange(user=None, assistant=PERSON, state="ask_name")
    after = conversation.snapshot()
    assert after.turns == before.turns == 1 and after.context == before.context and after.status == "active"
    assert after.provenance == before.provenance and after.memory == before.memory
    result = conversation.send("Ann")
    assert result.turn == 2 and result.previous_state == "ask_name"  # the next turn is the next one counted
    assert shown(llm) == [(None, "Hi! Your name?"), ("hello", "Sorry?"), (None, PERSON)]
    assert llm.requests[-1].messages[-1]["content"] == "Ann"


def test_replace_writes_over_the_last_reply_and_keeps_its_user_words_and_state():
    conversation, llm = chatting(reply("ask_name", "Hi! Your name?"), reply("ask_email", "Email?", name="Ann"),
                                 reply("ask_email", "Thanks."))  # fmt: skip
    conversation.start()
    conversation.send("I'm Ann")
    conversation.record(PERSON, replace=True)
    assert conversation.history[-1] == Exchange(user="I'm Ann", assistant=PERSON, state="ask_email")
    assert len(conversation.history) == 2 and conversation.snapshot().turns == 1
    conversation.record("Twice over.", replace=True)  # the last one again: still one exchange
    assert [e.assistant for e in conversation.history] == ["Hi! Your name?", "Twice over."]
    conversation.send("ann@example.com")
    assert shown(llm) == [(None, "Hi! Your name?"), ("I'm Ann", "Twice over.")]
    assert "Email?" not in system_prompt(llm) and PERSON not in system_prompt(llm)


def test_a_recorded_message_is_cleaned_as_a_users_message_is():
    conversation, _ = chatting()
    conversation.record("odd \ud800 text")
    assert conversation.history[-1].assistant == "odd \ufffd text"  # a lone surrogate could not be saved


# -- statuses --------------------------------------------------------------------------------------


def test_on_a_new_conversation_it_is_the_opening():
    conversation, llm = chatting(reply("ask_email", "Thanks Ann!", name="Ann"))
    conversation.record("Hello, I'm Sam. Your name?")
    assert conversation.status == "active" and conversation.snapshot().turns == 0
    assert conversation.history == (Exchange(user=None, assistant="Hello, I'm Sam. Your name?", state="ask_name"),)
    with pytest.raises(ConversationError, match="opening turn was already made"):
        conversation.start()
    assert llm.calls == 0
    result = conversation.send("Ann")
    assert result.turn == 1 and result.state == "ask_email"
    assert shown(llm) == [(None, "Hello, I'm Sam. Your name?")]
    assert "(none yet: this is the opening turn)" not in system_prompt(llm)


def test_on_a_new_conversation_the_start_handlers_do_not_run():
    hooks = Hooks()
    started: list[str] = []

    @hooks.on("start")
    def note(**_: Any) -> None:
        started.append("start")

    conversation = Conversation(signup(), ScriptedLLM(), hooks=hooks)
    conversation.record("Hello from a person.")
    assert started == [] and conversation.status == "active"


def test_replace_with_no_exchange_yet_is_an_error_that_says_what_to_do():
    conversation, _ = chatting()
    with pytest.raises(ConversationError, match="has none yet: record the message without replace"):
        conversation.record(PERSON, replace=True)
    assert conversation.history == () and conversation.status == "new"


def test_a_paused_conversation_takes_it_and_its_pause_resumes_after():
    hooks = Hooks()

    @hooks.on("state_enter", states=["ask_email"])
    def hold(**_: Any) -> None:
        raise Break("staff must approve")

    llm = ScriptedLLM([reply("ask_email", "One moment.", name="Ann"), reply("ask_email", "Approved! Your email?")])
    conversation = Conversation(signup(), llm, hooks=hooks)
    conversation.send("I'm Ann")
    token = conversation.pending.token
    conversation.record("A person checks it now.", replace=True)  # over the pause's message
    conversation.record("Almost done.")
    assert conversation.paused and conversation.pending.token == token
    assert [e.assistant for e in conversation.history] == ["A person checks it now.", "Almost done."]
    result = conversation.resume(token, {"approved": True})
    assert result.message == "Approved! Your email?" and not conversation.paused
    assert shown(llm) == [("I'm Ann", "A person checks it now."), (None, "Almost done.")]


def test_an_append_while_a_tool_call_waits_for_approval_is_refused_and_a_replace_is_not():
    definition, hooks, _ = orders_needing_approval()
    llm = ScriptedLLM([tool_calls(("find_order", {"order_id": "A-17"})), reply("help", "A-17 has shipped.")])
    conversation = Conversation(definition, llm, hooks=hooks)
    conversation.send("Where is A-17?")
    before = conversation.snapshot()
    with pytest.raises(ConversationPaused, match="'find_order' waits for a person's approval: resume"):
        conversation.record("A person looks at it.")
    assert conversation.snapshot() == before
    conversation.record("A person approves it in a minute.", replace=True)
    assert conversation.history[-1].user == "Where is A-17?"
    assert conversation.resume(conversation.pending.token, {"approved": True}).message == "A-17 has shipped."


def test_an_ended_conversation_takes_it_and_stays_ended():
    llm = ScriptedLLM([reply("done", "All done, Ann.", email="a@example.com")])
    conversation = Conversation(signup(), llm, "ask_email", {"name": "Ann", "approved": True})
    conversation.send("a@example.com")
    assert conversation.ended
    conversation.record("A person: thanks for your patience!")
    conversation.record("Goodbye from the team.", replace=True)
    assert conversation.ended and conversation.state == "done" and conversation.snapshot().turns == 1
    assert conversation.history[-1] == Exchange(user=None, assistant="Goodbye from the team.", state="done")


def test_it_is_refused_while_a_turn_runs():
    conversation, _ = chatting(reply("ask_name", "Hi! Your name?"))
    events = conversation.stream()
    next(events)  # the turn is under way
    with pytest.raises(ConversationError, match="in progress"):
        conversation.record(PERSON)
    events.close()
    assert conversation.history == ()
    conversation.record(PERSON)  # once the turn is over
    assert conversation.history[-1].assistant == PERSON


@pytest.mark.parametrize(
    ("message", "replace", "error", "says"),
    [
        (None, False, TypeError, "record(): message must be a str, not NoneType"),
        (42, True, TypeError, "record(): message must be a str, not int (42)"),
        (b"bytes", False, TypeError, "record(): message must be a str, not bytes"),
        ("text", "yes", TypeError, "record(): replace must be True or False, not 'yes'"),
        ("", False, EmptyMessageError, "record(): message is empty: there is nothing to record"),
        ("  \n", True, EmptyMessageError, "record(): message is only whitespace"),
        ("\u200b", False, EmptyMessageError, "record(): message is only invisible characters"),
    ],
)
def test_bad_input_is_a_clear_error_naming_the_argument_and_changes_nothing(message, replace, error, says):
    conversation, _ = chatting(reply("ask_name", "Hi! Your name?"))
    conversation.start()
    before = conversation.snapshot()
    with pytest.raises(error) as raised:
        conversation.record(message, replace=replace)
    assert str(raised.value).startswith(says)
    assert conversation.snapshot() == before


# -- sub-conversations and summaries -----------------------------------------------------------------


def test_in_a_sub_conversation_every_level_below_the_talking_one_hears_it(tmp_path: Path):
    from tests.subflows.test_subflows import DATA

    for path in DATA.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    conversation, llm = in_identity(tmp_path, DOB, reply("check", "Thanks."))
    frame = conversation.snapshot().stack[-1].snapshot
    assert frame.history == () and frame.status == "new"  # pushed by the last turn, not started yet
    conversation.record(PERSON)
    root, frame = conversation.snapshot(), conversation.snapshot().stack[-1].snapshot
    assert root.history[-1] == Exchange(user=None, assistant=PERSON, state="identity")
    assert frame.history == (Exchange(user=None, assistant=PERSON, state="ask_dob"),)
    assert frame.status == "active" and frame.turns == 0 and root.turns == 1
    conversation.send("1 Jan 1990")
    assert shown(llm) == [(None, PERSON)]  # the sub-conversation's own prompt
    conversation.record("A person asks: your first pet's name?", replace=True)
    root, frame = conversation.snapshot(), conversation.snapshot().stack[-1].snapshot
    assert root.history[-1] == frame.history[-1].model_copy(update={"state": "identity"})
    assert frame.history[-1] == Exchange(user="1 Jan 1990", assistant="A person asks: your first pet's name?",
                                         state="check")  # fmt: skip
    assert [e.assistant for e in root.history[:-1]][-1] == PERSON
    conversation.send("Rex")
    assert shown(llm)[-1] == ("1 Jan 1990", "A person asks: your first pet's name?")


def test_a_replace_leaves_a_sub_conversation_that_did_not_hear_the_last_exchange(tmp_path: Path):
    from tests.subflows.test_subflows import DATA

    for path in DATA.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    conversation, _ = in_identity(tmp_path)
    conversation.record("A person: let's check who you are.", replace=True)
    root, frame = conversation.snapshot(), conversation.snapshot().stack[-1].snapshot
    assert root.history[-1] == Exchange(user="P1, I'm Ann", assistant="A person: let's check who you are.",
                                        state="identity")  # fmt: skip
    assert frame.history == () and frame.status == "new"


NOTES = {
    "name": "notes",
    "initial_state": "talk",
    "summaries": {"on_overflow": True, "batch": 1},
    "states": {"talk": {"purpose": "Talk", "transitions": [{"target_state": "bye"}]}, "bye": {"purpose": "Bye"}},
}


def test_summaries_see_a_recorded_exchange_like_any_other():
    asked: list[str] = []

    def summarise(request: LLMRequest) -> dict[str, str]:
        asked.append(str(request.messages[0]["content"]))
        return {"summary": "The team said the parcel ships tomorrow."}

    llm = ScriptedLLM([reply("talk", "Hi!"), reply("talk", "Anything else?")], summaries=summarise)
    window = llm_fsm.PromptBuilder(settings=llm_fsm.PromptSettings(history_window=1))
    conversation = Conversation(llm_fsm.load(NOTES), llm, prompt=window, background_summaries=True)
    conversation.start()
    conversation.record(PERSON)
    conversation.record("Tracking number 1Z999.")
    assert conversation.summary_pending  # what the recorded exchanges made due is marked
    run = conversation.summarize_pending()
    assert run is not None and (run.start, run.end) == (0, 2) and PERSON in asked[0]
    conversation.send("Thanks")
    prompt = system_prompt(llm)
    assert "The team said the parcel ships tomorrow." in prompt and PERSON not in prompt  # folded, not shown
    assert shown(llm) == [(None, "Tracking number 1Z999.")]


# -- stores ----------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "file", "sqlite", "redis", "postgres"])
def store(request, tmp_path):
    opened = open_store(url_for(request.param, tmp_path, request))
    yield opened
    opened.close()


def chat_maker(llm: ScriptedLLM) -> Any:
    definition = llm_fsm.load(CHAT)

    def make(snapshot: llm_fsm.Snapshot | None) -> Conversation:
        if snapshot is None:
            return Conversation(definition, llm)
        return Conversation.restore(snapshot, definition, llm)

    return make


def test_a_stored_record_is_saved_under_the_lock_and_a_reload_shows_it(store):
    long = 2 * TAIL  # a load carries the tail only: a replace rewrites the rows from there on
    store.save("c", snapshot_after(long))
    llm = ScriptedLLM([reply("chat", "Noted.")])
    stored = StoredConversation(store, "c", chat_maker(llm))
    stored.record(PERSON)
    assert stored.version == 2
    again = StoredConversation(store, "c", chat_maker(llm)).load()
    assert again.history[-1] == Exchange(user=None, assistant=PERSON, state="chat")
    assert again.snapshot().turns == long and again.snapshot().history_len == long + 1
    stored.record("Written over.", replace=True)
    stored.record("Written over again.", replace=True)
    rows = whole(store, "c")
    assert len(rows) == long + 1 and rows[-1] == Exchange(user=None, assistant="Written over again.", state="chat")
    assert rows[:-1] == snapshot_after(long).history  # the rows before are as they were
    assert store.load("c").snapshot.history[-1].assistant == "Written over again." and store.load("c").version == 4
    # a turn on it: its prompt shows the replaced text, and the rows grow from it
    fresh = StoredConversation(store, "c", chat_maker(llm))
    fresh.run(lambda c: c.send("thanks"))
    assert shown(llm)[-2:] == [(f"message {long - 1}", f"reply {long - 1}"), (None, "Written over again.")]
    assert [e.assistant for e in whole(store, "c")[-2:]] == ["Written over again.", "Noted."]


def test_a_stored_replace_over_a_turn_keeps_its_user_words_through_every_store(store):
    llm = ScriptedLLM([reply("chat", "Hello!"), reply("chat", "The model's reply.")])
    stored = StoredConversation(store, "c", chat_maker(llm))
    stored.run(lambda c: c.start())
    stored.run(lambda c: c.send("Where is my parcel?"))
    stored.record(PERSON, replace=True)
    assert whole(store, "c") == (
        Exchange(user=None, assistant="Hello!", state="chat"),
        Exchange(user="Where is my parcel?", assistant=PERSON, state="chat"),
    )
    assert store.history("c").exchanges[-1] == (1, Exchange(user="Where is my parcel?", assistant=PERSON,
                                                             state="chat"))  # fmt: skip


def test_a_stored_record_with_no_conversation_yet_makes_one_opened_by_it():
    store = open_store("memory:")
    StoredConversation(store, "new", chat_maker(ScriptedLLM())).record("Hello from the team.")
    snapshot = store.load("new").snapshot
    assert snapshot.status == "active" and snapshot.turns == 0
    assert snapshot.history == (Exchange(user=None, assistant="Hello from the team.", state="chat"),)


def test_a_stored_record_sent_again_with_its_key_records_once():
    store = open_store("memory:")
    stored = StoredConversation(store, "c", chat_maker(ScriptedLLM([reply("chat", "Hello!")])))
    stored.run(lambda c: c.start())
    stored.record(PERSON, idempotency_key="k1")
    assert not stored.replayed
    StoredConversation(store, "c", chat_maker(ScriptedLLM())).record(PERSON, idempotency_key="k1")
    assert [e.assistant for e in store.load("c").snapshot.history] == ["Hello!", PERSON]
    with pytest.raises(IdempotencyKeyReused):
        stored.record("another message", idempotency_key="k1")
    with pytest.raises(IdempotencyKeyReused):
        stored.record(PERSON, replace=True, idempotency_key="k1")
    assert len(store.load("c").snapshot.history) == 2


def test_a_stored_record_checks_its_arguments_before_it_takes_the_lock():
    store = open_store("memory:")
    stored = StoredConversation(store, "c", chat_maker(ScriptedLLM()))
    with store.lock("c", timeout=1):  # held: a record that waited for it would fail with ConflictError instead
        with pytest.raises(EmptyMessageError, match="record"):
            StoredConversation(store, "c", chat_maker(ScriptedLLM()), wait=0).record(" ")
        with pytest.raises(TypeError, match="record"):
            stored.record(["not", "text"])  # type: ignore[arg-type]
    assert store.load("c") is None


# -- async -----------------------------------------------------------------------------------------


class SlowLLM(ScriptedLLM):
    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        await asyncio.sleep(0.05)
        return self.complete(request)


def test_async_turns_and_records_interleave_as_they_come():
    async def main() -> tuple[Conversation, ScriptedLLM]:
        llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Email?", name="Ann")])
        conversation = Conversation(signup(), llm)
        await conversation.astart()
        conversation.record(PERSON, replace=True)
        await conversation.asend("Ann")
        return conversation, llm

    conversation, llm = asyncio.run(main())
    assert shown(llm) == [(None, PERSON)] and conversation.history[-1].user == "Ann"


def test_an_async_stored_record_waits_for_the_turn_that_holds_the_conversation(tmp_path: Path):
    store = open_store(f"sqlite:{tmp_path / 'c.db'}")
    definition = llm_fsm.load(CHAT)
    llm = SlowLLM([reply("chat", "Hello!"), reply("chat", "A reply.")])

    async def main() -> None:
        await aadvance(store, "c", definition, llm, None)
        turn = asyncio.create_task(aadvance(store, "c", definition, llm, "hi"))
        await asyncio.sleep(0.01)  # the turn holds the lock, its model call under way
        await StoredConversation(store, "c", chat_maker(llm)).arecord(PERSON)
        await turn

    asyncio.run(main())
    assert [(e.user, e.assistant) for e in whole(store, "c")] == [(None, "Hello!"), ("hi", "A reply."), (None, PERSON)]
    store.close()


def test_an_async_stored_replace_and_its_key():
    store = open_store("memory:")
    stored = StoredConversation(store, "c", chat_maker(ScriptedLLM([reply("chat", "Hello!")])))

    async def main() -> None:
        await stored.arun(lambda c: c.astart())
        await stored.arecord(PERSON, replace=True, idempotency_key="k")
        await stored.arecord(PERSON, replace=True, idempotency_key="k")
        assert stored.replayed
        with pytest.raises(ConversationError, match="has none yet"):  # nothing to write over
            await StoredConversation(store, "none", chat_maker(ScriptedLLM())).arecord(PERSON, replace=True)

    asyncio.run(main())
    assert store.load("c").snapshot.history == (Exchange(user=None, assistant=PERSON, state="chat"),)
    assert store.load("none") is None


# -- serve -----------------------------------------------------------------------------------------


def test_the_route_records_and_answers_with_the_conversation():
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name?"),
                       reply("ask_email", "Thanks Ann!", name="Ann")])  # fmt: skip
    http = client(llm)
    cid = create(http)["id"]
    http.post(f"/conversations/{cid}/messages", json={"message": "hello"})
    appended = http.post(f"/conversations/{cid}/assistant", json={"message": PERSON})
    assert appended.status_code == 200, appended.text
    body = appended.json()
    assert body == http.get(f"/conversations/{cid}").json()  # what GET gives
    assert body["history"][-1] == {"user": None, "assistant": PERSON, "state": "ask_name"}
    assert body["turns"] == 1 and body["version"] == 3 and body["history_len"] == 3
    replaced = http.post(f"/conversations/{cid}/assistant", json={"message": "Sam: your name?", "replace": True})
    assert replaced.json()["history"][-1] == {"user": None, "assistant": "Sam: your name?", "state": "ask_name"}
    assert replaced.json()["history_len"] == 3
    page = http.get(f"/conversations/{cid}/history").json()
    assert [e["assistant"] for e in page["exchanges"]] == ["Hi! Your name?", "Your name?", "Sam: your name?"]
    assert http.post(f"/conversations/{cid}/messages", json={"message": "Ann"}).json()["turn"] == 2
    assert shown(llm)[-1] == (None, "Sam: your name?") and PERSON not in system_prompt(llm)


def test_the_route_refuses_what_the_other_routes_refuse():
    http = client(ScriptedLLM([reply("ask_name", "Hi! Your name?")]), tokens=TOKENS)
    cid = create(http, auth(ALICE))["id"]
    path = f"/conversations/{cid}/assistant"
    error_of(http.post(path, json={"message": PERSON}), 401, "unauthorized")
    error_of(http.post(path, json={"message": PERSON}, headers=auth(BOB)), 404, "not_found")  # another client's
    error_of(http.post(f"/conversations/{'0' * 32}/assistant", json={"message": PERSON}, headers=auth(ALICE)),
             404, "not_found")  # fmt: skip
    error_of(
        http.post("/conversations/nope/assistant", json={"message": PERSON}, headers=auth(ALICE)), 404, "not_found"
    )
    for body in ({"message": 5}, {"message": PERSON, "replace": "yes"}, {"message": PERSON, "extra": 1}, {}):
        error_of(http.post(path, json=body, headers=auth(ALICE)), 400, "invalid_request")
    error = error_of(http.post(path, json={"message": " "}, headers=auth(ALICE)), 422, "empty_message")
    assert "record(): message is only whitespace" in error["message"]
    started_not = create(http, auth(ALICE), start=False)["id"]
    conflict = http.post(f"/conversations/{started_not}/assistant", json={"message": PERSON, "replace": True},
                         headers=auth(ALICE))  # fmt: skip
    assert "has none yet" in error_of(conflict, 409, "conversation_conflict")["message"]
    error_of(http.get(path, headers=auth(ALICE)), 405, "method_not_allowed")
    huge = http.post(path, json={"message": "x" * 70_000}, headers=auth(ALICE))
    error_of(huge, 413, "request_too_large")
    assert http.get(f"/conversations/{cid}", headers=auth(ALICE)).json()["history_len"] == 1  # nothing recorded


def test_the_route_takes_an_ended_conversation_and_refuses_an_append_during_a_tool_approval():
    definition, hooks, _ = orders_needing_approval()
    llm = ScriptedLLM([tool_calls(("find_order", {"order_id": "A-17"})), reply("done", "Bye!")])
    http = client(llm, [definition], hooks=hooks)
    cid = create(http, start=False)["id"]
    paused = http.post(f"/conversations/{cid}/messages", json={"message": "Where is A-17?"}).json()
    error = error_of(http.post(f"/conversations/{cid}/assistant", json={"message": PERSON}), 409,
                     "conversation_paused")  # fmt: skip
    assert "find_order" in error["message"]
    assert http.post(f"/conversations/{cid}/assistant", json={"message": PERSON, "replace": True}).status_code == 200
    http.post(f"/conversations/{cid}/resume", json={"token": paused["pending"]["token"], "result": {"approved": True}})
    ended = http.post(f"/conversations/{cid}/assistant", json={"message": "A person: bye too."}).json()
    assert ended["status"] == "ended" and ended["history"][-1]["assistant"] == "A person: bye too."


def test_the_route_sent_again_with_its_idempotency_key_records_once():
    http = client(ScriptedLLM([reply("ask_name", "Hi! Your name?")]))
    cid = create(http)["id"]
    path, key = f"/conversations/{cid}/assistant", {"Idempotency-Key": "3f1c0a52-9f0b-4c0e-8d8a-1d2f3e4a5b6c"}
    first = http.post(path, json={"message": PERSON}, headers=key)
    again = http.post(path, json={"message": PERSON}, headers=key)
    assert first.status_code == again.status_code == 200 and "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true" and again.json()["history_len"] == 2
    error_of(http.post(path, json={"message": "another"}, headers=key), 422, "idempotency_key_reused")


def test_the_route_is_409_busy_while_a_turn_holds_the_conversation_under_the_reject_policy(tmp_path: Path):
    url = f"sqlite:{tmp_path / 'c.db'}"
    llm = GatedLLM([reply("ask_name", "Hi!"), reply("ask_email", "Email?", name="Ann")])
    llm.gate.set()
    with live(create_app([signup()], llm, store=url, busy="reject")) as base, httpx.Client(base_url=base) as http:
        cid = http.post("/conversations", json={}).json()["id"]
        llm.gate.clear()
        llm.entered.clear()
        with ThreadPoolExecutor(1) as pool:
            turn = pool.submit(send_message, base, cid, "Ann")
            wait_for(llm.entered.is_set, "the turn's model call")
            error_of(http.post(f"/conversations/{cid}/assistant", json={"message": PERSON}), 409, "busy")
            llm.gate.set()
            assert turn.result().status_code == 200
        assert http.post(f"/conversations/{cid}/assistant", json={"message": PERSON}).status_code == 200
    record = settled(url, f"local@{cid}")
    assert [(e.user, e.assistant) for e in record.snapshot.history] == [
        (None, "Hi!"),
        ("Ann", "Email?"),
        (None, PERSON),
    ]


# -- the OpenAI-compatible endpoint ----------------------------------------------------------------


def test_a_chat_client_that_did_not_see_a_recorded_message_branches_and_one_that_names_the_conversation_sees_it():
    pytest.importorskip("openai")
    from tests.server.test_openai_endpoint import ask, in_process, talk_signup

    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name?"),
                       reply("ask_email", "Email?", name="Ada"), reply("ask_name", "Your name, again?")])  # fmt: skip
    sdk, http = in_process(llm)
    messages, (extension,) = talk_signup(sdk, "hello")
    cid = extension["conversation_id"]
    assert http.post(f"/conversations/{cid}/assistant", json={"message": PERSON}).status_code == 200
    # the client's transcript lacks the recorded message: as after an edit, the turn runs in a branch of its mark
    _, branched = ask(sdk, [*messages, {"role": "user", "content": "Ada"}], model="signup")
    assert branched["branched_from"] == cid and PERSON not in system_prompt(llm)
    # named, the conversation goes on with it
    _, named = ask(sdk, [{"role": "user", "content": "Ada?"}], model="signup", extra_headers={"X-Conversation-Id": cid})
    assert named["conversation_id"] == cid and shown(llm)[-1] == (None, PERSON)


def test_an_assistant_message_a_chat_client_wrote_itself_is_not_recorded():
    pytest.importorskip("openai")
    from tests.server.test_openai_endpoint import ask, in_process, talk_signup

    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_name", "Your name?"),
                       reply("ask_email", "Email?", name="Ada")])  # fmt: skip
    sdk, _ = in_process(llm)
    messages, (extension,) = talk_signup(sdk, "hello")
    # an assistant message after the bot's: the client's own (or a person's the server never saw)
    written = [*messages, {"role": "assistant", "content": PERSON}, {"role": "user", "content": "Ada"}]
    _, answer = ask(sdk, written, model="signup")
    assert answer["branched_from"] == extension["conversation_id"]
    assert "the messages after the first 2 are not the conversation's" in answer["notes"]
    assert PERSON not in system_prompt(llm)  # left out, said in a note: /assistant records a message


# -- the docs --------------------------------------------------------------------------------------


def test_the_python_guides_example_runs():
    page = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    section = page[page.index("## Messages written elsewhere") : page.index("## Embedding the runtime")]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    exec(compile(block, "docs/python.md", "exec"), {})  # noqa: S102 (our own docs' example)
