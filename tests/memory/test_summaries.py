"""Running summaries: when they are made, what they cost, their bounds, failures, background runs, reloads."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.errors import ConversationError, LLMUnavailableError, ReplyFormatError
from llm_fsm.llm import LiteLLMClient, LLMRequest
from llm_fsm.memory import summaries
from llm_fsm.testing import ScriptedLLM
from llm_fsm.testing.conversation_tests import run_files
from tests.conftest import reply

TALK = {
    "name": "talk",
    "initial_state": "chat",
    "summaries": {"batch": 2},
    "states": {
        "chat": {"purpose": "Chat", "transitions": [{"target_state": "intake"}, {"target_state": "bye"}]},
        "intake": {
            "purpose": "Take the details",
            "summaries": {"on_leave": True, "on_overflow": False},
            "transitions": [{"target_state": "chat"}, {"target_state": "bye"}],
        },
        "bye": {"purpose": "Say goodbye"},
    },
}


def definition(**top) -> llm_fsm.FSMDefinition:
    return llm_fsm.load({**json.loads(json.dumps(TALK)), **top})


def window(size: int) -> llm_fsm.PromptBuilder:
    return llm_fsm.PromptBuilder(settings=llm_fsm.PromptSettings(history_window=size))


def echo_summary(request: LLMRequest) -> dict:
    """A summarizer that keeps every user line it is shown (and the previous summary)."""
    system = request.messages[0]["content"]
    previous = re.search(r"<previous_summary>(.*?)</previous_summary>", system, re.DOTALL).group(1)
    lines = re.findall(r"<user>(.*?)</user>", system)
    kept = [] if previous.startswith("(none yet") else [previous]
    return {"summary": " | ".join([*kept, *lines])}


def conversation_with(replies, *, size=2, summary=echo_summary, definition_=None, **options):
    llm = ScriptedLLM([reply("chat", "Hello!"), *replies], summaries=summary)
    conversation = llm_fsm.Conversation(definition_ or definition(), llm, prompt=window(size), **options)
    conversation.start()
    return conversation, llm


def kinds(llm: ScriptedLLM) -> list[str]:
    return [r.kind for r in llm.requests]


def test_exchanges_leaving_the_window_are_folded_every_batch_turns():
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(6)])
    results = [conversation.send(f"u{i}") for i in range(6)]
    # the opening and 1 turn: 2 exchanges (the window); at 4 = window + batch, the 2 oldest are folded
    assert [r.summary is not None for r in results] == [False, False, True, False, True, False]
    assert all(r.llm_calls == 1 for r in results), "a summary call is not a call for the reply"
    assert kinds(llm).count("summary") == 2
    first = results[2].summary
    assert (first.start, first.end, first.ok) == (0, 2, True) and first.usage.total_tokens > 0
    assert conversation.summary == "u0 | u1 | u2" and conversation.snapshot().summary.through == 4
    request = llm.requests[kinds(llm).index("summary")]
    assert request.max_tokens == 600 and request.strict_schema["required"] == ["summary"]
    assert (
        "<user>u0</user>" in request.messages[0]["content"]
        and "<user>u1</user>" not in request.messages[0]["content"].split("</exchanges>")[1]
    )


def test_the_prompt_carries_the_summary_and_only_what_it_does_not_cover():
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(5)])
    for i in range(5):
        conversation.send(f"u{i}")
    prompt = [r for r in llm.requests if r.kind == "reply"][-1].messages[0]["content"]
    assert "<conversation_summary>u0</conversation_summary>" in prompt  # the opening and u0 are folded
    history = prompt.split("<conversation_history>")[1]
    assert "u0" not in history and "<user>u1</user>" in history, "summarised exchanges leave the window"
    assert history.count("<assistant>") == 3, "up to window + batch - 1 exchanges wait for the next summary"
    assert prompt.index("<conversation_summary>") < prompt.index("<current_context>")


def test_leaving_a_state_folds_its_exchanges_but_the_move():
    replies = [reply("intake", "Details?"), reply("intake", "Noted."), reply("chat", "Back to chat.")]
    conversation, llm = conversation_with(replies, size=10)
    results = [conversation.send(text) for text in ["details please", "my bike is red", "done"]]
    assert [r.summary is not None for r in results] == [False, False, True]
    assert (results[2].summary.start, results[2].summary.end) == (0, 3)
    request = next(r for r in llm.requests if r.kind == "summary")
    assert 'the conversation left the state "intake"' in request.messages[0]["content"]
    assert conversation.summary == "details please | my bike is red"
    prompt = conversation.prompt.system_prompt(conversation.definition, conversation.snapshot())
    assert "my bike is red" not in prompt.split("<conversation_history>")[1]
    assert "Back to chat." in prompt.split("<conversation_history>")[1], "the move's reply stays in the window"


def test_a_failed_summary_never_fails_the_turn_and_is_retried_next_turn():
    outcomes = iter([LLMUnavailableError("provider down"), '{"summary": 3}', None])

    def flaky(request):
        outcome = next(outcomes)
        return echo_summary(request) if outcome is None else outcome

    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(5)], summary=flaky)
    results, states = [], []
    for i in range(5):
        results.append(conversation.send(f"u{i}"))
        states.append(conversation.snapshot().summary)
    assert [r.message for r in results] == [f"r{i}" for i in range(5)]
    assert "provider down" in results[2].summary.error and "provider down" in states[2].error
    assert (states[2].failures, states[2].through, states[2].due) == (1, 0, 2), "still due"
    assert not results[3].summary.ok and 'no "summary" text' in results[3].summary.error and states[3].failures == 2
    assert results[4].summary.ok and (results[4].summary.start, results[4].summary.end) == (0, 4), "all that is due"
    assert states[4].error is None and states[4].failures == 0 and states[4].calls == 3
    assert conversation.summary == "u0 | u1 | u2"


def test_a_summary_longer_than_its_bound_is_cut_and_the_input_is_bounded():
    long_summary = definition(summaries={"max_chars": 60, "batch": 1, "max_exchanges": 2})
    conversation, llm = conversation_with(
        [reply("chat", f"r{i}") for i in range(8)], summary=lambda r: {"summary": "s" * 100},
        definition_=long_summary, size=0,
    )  # fmt: skip
    runs = [conversation.send(f"u{i}").summary for i in range(8)]
    assert all(run is not None and run.cut and run.chars == 60 for run in runs)
    assert all(run.end - run.start <= 2 for run in runs), "max_exchanges per call"
    assert len(conversation.summary) == 60


def test_a_backlog_is_folded_max_exchanges_at_a_time():
    backlog = definition(summaries={"max_exchanges": 3, "batch": 1})
    failing = iter([LLMUnavailableError("down")] * 6)

    def summary(request):
        return next(failing, None) or echo_summary(request)

    conversation, llm = conversation_with(
        [reply("chat", f"r{i}") for i in range(8)], summary=summary, definition_=backlog
    )
    runs = [conversation.send(f"u{i}").summary for i in range(8)]
    spans = [(run.start, run.end) for run in runs if run is not None and run.ok]
    assert spans and all(end - start <= 3 for start, end in spans)
    assert all(r.kind != "summary" or r.messages[0]["content"].count("<exchange ") <= 3 for r in llm.requests)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"summary": "Ann likes tea."}', ("Ann likes tea.", False)),
        ('```json\n{"summary": "fenced"}\n```', ("fenced", False)),
        ("<think>hmm</think>Plain prose summary.", ("Plain prose summary.", False)),
        ('{"summary": "cut off at the tok', ("cut off at the tok", False)),
        ('{"summary": "' + "x" * 80 + '"}', ("x" * 60, True)),
    ],
)
def test_summary_replies_are_read_tolerantly(text, expected):
    assert summaries.parse(text, 60) == expected


@pytest.mark.parametrize("text", ["", "   ", '{"summary": ""}', '{"other": "x"}', '{"summary": 3}'])
def test_a_summary_reply_without_a_summary_is_a_failure(text):
    with pytest.raises(ReplyFormatError):
        summaries.parse(text, 60)


# -- background -------------------------------------------------------------------------------------


def test_background_sync_summaries_wait_for_summarize_pending_or_the_next_turn():
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(6)], background_summaries=True)
    for i in range(3):
        result = conversation.send(f"u{i}")
    assert result.summary is None and conversation.summary_pending and "summary" not in kinds(llm)
    run = conversation.summarize_pending()
    assert run.ok and not conversation.summary_pending and conversation.summary == "u0"
    assert conversation.summarize_pending() is None, "nothing left to do"
    for i in range(3, 5):
        conversation.send(f"u{i}")
    assert conversation.summary_pending
    calls = len(llm.requests)
    result = conversation.send("u5")  # nobody called summarize_pending: the turn makes it first
    assert [r.kind for r in llm.requests[calls:]] == ["summary", "reply"]
    assert result.summary.ok and "<conversation_summary>u0 | u1 | u2<" in llm.requests[-1].messages[0]["content"]


class SlowSummaries(ScriptedLLM):
    """Summary calls wait until released, and the most that ran at once is recorded."""

    def __init__(self, replies):
        super().__init__(replies, summaries=echo_summary)
        self.release = asyncio.Event()
        self.running = self.most = 0

    async def acomplete(self, request):
        if request.kind != "summary":
            return self.complete(request)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
            return self.complete(request)
        finally:
            self.running -= 1


async def three_turns_in_the_background(replies: int) -> tuple[llm_fsm.Conversation, SlowSummaries, object]:
    """A conversation with background summaries after its opening and 3 turns (which make a summary due)."""
    llm = SlowSummaries([reply("chat", "Hello!"), *[reply("chat", f"r{i}") for i in range(replies)]])
    conversation = llm_fsm.Conversation(definition(), llm, prompt=window(2), background_summaries=True)
    await conversation.astart()
    for i in range(3):
        result = await conversation.asend(f"u{i}")
    return conversation, llm, result


def test_background_async_summaries_run_after_the_reply_one_at_a_time():
    async def scenario():
        conversation, llm, result = await three_turns_in_the_background(6)
        assert result.summary is None and llm.running == 0
        await asyncio.sleep(0.01)
        assert llm.running == 1, "the summary call runs after the turn returned"
        assert conversation.summary_pending
        next_turn = asyncio.ensure_future(conversation.asend("u3"))
        await asyncio.sleep(0.01)
        assert not next_turn.done(), "the next turn waits for the summary"
        llm.release.set()
        result = await next_turn
        assert conversation.summary == "u0" and result.summary is None
        assert "<conversation_summary>u0<" in llm.requests[-1].messages[0]["content"], "its prompt carries it"
        for i in range(4, 6):
            await conversation.asend(f"u{i}")
        await conversation.aclose()
        assert not conversation.summary_pending and llm.most == 1
        assert conversation.last_summary.ok and conversation.snapshot().summary.calls == 2

    asyncio.run(scenario())


def test_a_sync_turn_refuses_to_run_under_a_background_summary():
    async def scenario():
        conversation, llm, _ = await three_turns_in_the_background(4)
        await asyncio.sleep(0)
        with pytest.raises(ConversationError, match="await asummarize_pending"):
            conversation.send("now")
        llm.release.set()
        run = await conversation.asummarize_pending()
        assert run.ok and conversation.send("now").message == "r3"

    asyncio.run(scenario())


def test_a_reload_after_a_crash_summarises_what_was_due():
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(3)], background_summaries=True)
    for i in range(3):
        conversation.send(f"u{i}")
    saved = conversation.snapshot().model_dump_json()  # the process dies before summarize_pending
    assert json.loads(saved)["summary"]["due"] == 2
    llm = ScriptedLLM([reply("chat", "Welcome back.")], summaries=echo_summary)
    again = llm_fsm.Conversation.restore(saved, definition(), llm, prompt=window(2), background_summaries=True)
    result = again.send("still there?")
    assert [r.kind for r in llm.requests] == ["summary", "reply"] and result.summary.ok
    assert again.summary == "u0" and "<conversation_summary>u0<" in llm.requests[-1].messages[0]["content"]


def test_a_summary_made_from_history_that_was_undone_is_dropped():
    conversation, _ = conversation_with([reply("chat", f"r{i}") for i in range(3)], background_summaries=True)
    for i in range(3):
        conversation.send(f"u{i}")
    before = conversation.snapshot()
    after, run = summaries.outcome(
        conversation.definition, before, summaries.job(conversation.definition, before),
        llm_fsm.LLMResponse('{"summary": "made from a history that is gone"}'),
    )  # fmt: skip
    undone = before.model_copy(update={"history": before.history[:1]})
    assert summaries.applied(undone, before, after) is None
    assert summaries.applied(before, before, after).summary.text == "made from a history that is gone"


def test_a_streamed_turn_makes_its_summary_and_the_summary_kind_reaches_recorders():
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(3)])
    for i in range(2):
        conversation.send(f"u{i}")
    events = list(conversation.stream("u2"))
    result = events[-1]
    assert "".join(e.text for e in events if isinstance(e, llm_fsm.conversation.MessageDelta)) == "r2"
    assert result.summary.ok and result.to_dict()["summary"]["folded"] == [0, 2]


def test_the_summary_client_may_be_another_model():
    other = ScriptedLLM([{"summary": "from the other model"}])
    conversation, llm = conversation_with([reply("chat", f"r{i}") for i in range(3)], summary_llm=other)
    for i in range(3):
        conversation.send(f"u{i}")
    assert "summary" not in kinds(llm) and [r.kind for r in other.requests] == ["summary"]
    assert conversation.summary == "from the other model"


def test_litellm_bounds_a_summary_call_by_its_own_max_tokens():
    bounded = LiteLLMClient("openai/x", response_format="none", max_tokens=100)
    request = LLMRequest([{"role": "user", "content": "x"}], kind="summary", max_tokens=50)
    assert bounded._params(request, stream=False)["max_tokens"] == 50
    small = LiteLLMClient("openai/x", response_format="none", max_tokens=20)
    assert small._params(request, stream=False)["max_tokens"] == 20, "never above the client's budget"
    assert LiteLLMClient("openai/x", response_format="none")._params(request, stream=False)["max_tokens"] == 50


def test_the_simulated_model_answers_summary_calls():
    from llm_fsm.testing import SimulatedLLM

    sim = SimulatedLLM(definition())
    conversation = llm_fsm.Conversation(definition(), sim, prompt=window(1))
    conversation.start()
    for text in ["apples", "pears", "plums", "figs"]:
        if not conversation.ended:
            conversation.send(text)
    if any(r.kind == "summary" for r in sim.requests):
        assert "User:" in conversation.summary


# -- long conversations -------------------------------------------------------------------------------


def keeps_facts(request: LLMRequest) -> dict:
    """A careful summarizer: the previous summary's facts, plus the user lines that state one, nothing else."""
    system = request.messages[0]["content"]
    previous = re.search(r"<previous_summary>(.*?)</previous_summary>", system, re.DOTALL).group(1)
    facts = [] if previous.startswith("(none yet") else [previous]
    facts += [line for line in re.findall(r"<user>(.*?)</user>", system) if line.startswith("fact:")]
    return {"summary": " ".join(facts) or "Small talk."}


def long_conversation(turns: int, *, summarized: bool) -> tuple[list[int], list[str]]:
    """Prompt characters of each reply call over ``turns`` turns, and the prompts at a few turns."""
    data = json.loads(json.dumps(TALK))
    if not summarized:
        data.pop("summaries")
        data["states"]["intake"].pop("summaries")
    llm = ScriptedLLM(summaries=keeps_facts)
    conversation = llm_fsm.Conversation(llm_fsm.load(data), llm, prompt=window(6))
    llm.add(reply("chat", "Hello!"))
    conversation.start()
    for turn in range(1, turns + 1):
        llm.add(reply("chat", f"Reply number {turn:04d}, talking about the weather at some length."))
        text = "fact: my cat is called Miso" if turn == 3 else f"Chatting about nothing in particular, turn {turn:04d}."
        conversation.send(text)
    prompts = [r.messages[0]["content"] for r in llm.requests if r.kind == "reply"]
    return [len(p) for p in prompts], prompts


def test_a_fact_given_at_turn_3_is_still_in_the_prompt_at_turn_200_and_prompts_stay_flat():
    sizes, prompts = long_conversation(1000, summarized=True)
    assert "my cat is called Miso" in prompts[200]  # the opening is prompts[0]: turn 200 is prompts[200]
    assert "my cat is called Miso" in prompts[1000]
    assert "my cat is called Miso" not in prompts[200].split("<conversation_history>")[1]
    assert max(sizes[500:]) <= max(sizes[100:500]), "no growth once the summary holds the facts"
    assert max(sizes) < 2 * min(sizes[10:]), "bounded: the window, the summary bound and the definition"
    plain, plain_prompts = long_conversation(300, summarized=False)
    assert "Miso" not in plain_prompts[200], "without summaries the fact is lost to the model"
    assert max(plain[100:]) <= max(plain[10:100])


# -- the terminal -------------------------------------------------------------------------------------


def test_chat_context_shows_memory_and_summary(tmp_path):
    data = json.loads(json.dumps(TALK))
    data["memory"] = {"slots": {"facts": {"description": "Facts"}}}
    path = tmp_path / "talk.json"
    path.write_text(json.dumps(data))
    note = reply("intake", "Noted.")
    note["transition"]["memory_update"] = {"facts": "owns a red bike"}
    back = reply("chat", "Back to chat.")  # leaving intake: its exchanges are summarised
    script = [reply("chat", "Hi!"), note, reply("intake", "ok"), back, {"summary": "They talked bikes."}]
    (tmp_path / "replies.json").write_text(json.dumps(script))
    args = ["chat", str(path), "--model", f"scripted:{tmp_path / 'replies.json'}"]
    result = CliRunner().invoke(app, args, input="bike\nmore\nmore\n/context\n/quit\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    shown = result.stdout.split("/context")[-1] if "/context" in result.stdout else result.stdout
    assert "facts: owns a red bike" in shown
    assert "They talked bikes." in shown and "summarised" in shown


def test_test_files_script_replies_and_summaries_get_a_stand_in(tmp_path):
    (tmp_path / "talk.json").write_text(json.dumps(TALK))
    steps = [{"user": None, "reply": reply("chat", "Hello!")}]
    steps += [
        {"user": f"line {i}", "reply": reply("chat", f"r{i}"), "expect": {"state": "chat", "max_llm_calls": 1}}
        for i in range(8)
    ]
    case = {"name": "long", "definition": "talk.json", "steps": steps}
    (tmp_path / "talk.test.json").write_text(json.dumps({"cases": [case]}))
    result = CliRunner().invoke(app, ["test", str(tmp_path / "talk.test.json")])
    assert result.exit_code == 0, result.output
    (outcome,) = run_files([tmp_path / "talk.test.json"])
    made = [step.result.summary for step in outcome.steps if step.result.summary is not None]
    assert made and all(run.ok for run in made), [run.error for run in made]


def test_a_summary_call_over_http_asks_for_its_schema_and_token_bound(fake_openai):
    replies = [reply("chat", "Hello!"), *[reply("chat", f"r{i}") for i in range(3)]]
    for i, answer in enumerate(replies):
        fake_openai.add(json.dumps(answer))
        if i == 3:  # the third turn makes the summary due: its call comes right after the reply
            fake_openai.add('{"summary": "Said u0."}')
    llm = LiteLLMClient(
        "openai/test-model", api_base=fake_openai.url, api_key="sk-test", timeout=5.0,
        response_format="json_schema", max_tokens=256,
    )  # fmt: skip
    conversation = llm_fsm.Conversation(definition(), llm, prompt=window(2))
    conversation.start()
    results = [conversation.send(f"u{i}") for i in range(3)]
    assert results[2].summary.ok and conversation.summary == "Said u0."
    sent = fake_openai.requests[-1]
    assert sent["max_tokens"] == 256, "the client's budget is lower than the summary's 600"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["summary"]


def test_a_summary_request_that_cannot_be_made_never_fails_the_turn():
    class BrokenSummaries(llm_fsm.PromptBuilder):
        def summary_messages(self, *args, **kwargs):
            raise RuntimeError("the summary template broke")

    llm = ScriptedLLM([reply("chat", "Hello!"), *[reply("chat", f"r{i}") for i in range(3)]], summaries=echo_summary)
    prompt = BrokenSummaries(settings=llm_fsm.PromptSettings(history_window=2))
    conversation = llm_fsm.Conversation(definition(), llm, prompt=prompt)
    conversation.start()
    results = [conversation.send(f"u{i}") for i in range(3)]
    assert [r.message for r in results] == ["r0", "r1", "r2"] and results[2].summary is not None
    assert not results[2].summary.ok and "the summary template broke" in results[2].summary.error
    assert kinds(llm).count("summary") == 0


def test_a_summary_model_that_always_fails_leaves_the_stored_snapshot_bounded(tmp_path, caplog):
    # every summary call fails: after MAX_FAILURES tries in a row the due exchanges are given up on (left out
    # of the summary, kept in the store's history rows), so the snapshot a store saves does not grow with age
    from llm_fsm.store import StoredConversation, open_store

    turns = 120
    llm = ScriptedLLM(
        [reply("chat", "Hello!"), *(reply("chat", f"r{i}") for i in range(turns))],
        summaries=lambda _: LLMUnavailableError("summaries are down"),
    )
    store = open_store(f"sqlite://{tmp_path / 'c.db'}")

    def make(snapshot):
        if snapshot is None:
            return llm_fsm.Conversation(definition(), llm, prompt=window(2))
        return llm_fsm.Conversation.restore(snapshot, definition(), llm, prompt=window(2))

    stored = StoredConversation(store, "c", make)
    stored.run(lambda c: c.start())
    sizes, results = [], []
    with caplog.at_level("WARNING", logger="llm_fsm"):
        for i in range(turns):
            results.append(stored.run(lambda c, i=i: c.send(f"u{i}")))
            sizes.append(len(store.load("c").snapshot.history))
    assert all(r.message == f"r{i}" for i, r in enumerate(results)), "a failed summary never fails the turn"
    assert max(sizes[turns // 2 :]) <= max(sizes[: turns // 2]) <= 30, sizes  # flat, not growing with the turns
    summary = store.load("c").snapshot.summary
    assert summary.text == "" and summary.through > turns - 30 and "summaries are down" in summary.error
    gave_up = [r for r in caplog.records if "gave up" in r.getMessage()]
    assert gave_up and "summaries are down" in gave_up[0].getMessage()
    # the exchanges given up on are still in the store's history
    page = store.history("c", before=10, limit=10)
    assert [e.user for _, e in page.exchanges][1:] == [f"u{i}" for i in range(9)]
    calls = kinds(llm).count("summary")
    assert calls <= turns // 2, "a failing summary is not tried again every turn for ever"


def test_a_failure_short_of_the_limit_keeps_the_exchanges_due():
    assert summaries.MAX_FAILURES >= 3  # test_a_failed_summary_never_fails_the_turn_and_is_retried_next_turn
