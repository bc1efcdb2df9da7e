"""Provider prompt caching: the prompt's stable prefix survives a change of state, usage reports the cached
prompt tokens (turn results, the eval card, traces), and Anthropic requests mark the prefix to cache."""

from __future__ import annotations

import copy
import json
import os
import pickle

import pytest

import llm_fsm
from llm_fsm.llm import Usage
from llm_fsm.llm.protocol import PromptText
from llm_fsm.testing import ScriptedLLM
from llm_fsm.testing.scorecard import Course, score, summary
from tests.conftest import reply
from tests.fake_openai import RawBody
from tests.telemetry import test_telemetry

spans = test_telemetry.spans  # the fixture that collects the spans of the test's turns

ANTHROPIC_REPLY = {
    "id": "msg_test",
    "type": "message",
    "role": "assistant",
    "model": "claude-3-5-haiku-20241022",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 40,
        "output_tokens": 12,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 60,
    },
}


def anthropic_reply(text: str) -> RawBody:
    """A Messages API response (the fake server answers any path, Anthropic's /v1/messages too)."""
    body = {**ANTHROPIC_REPLY, "content": [{"type": "text", "text": text}]}
    return RawBody(200, json.dumps(body).encode(), "application/json")


def client(server, model: str = "openai/test-model", **kwargs):
    options = {"api_key": "sk-test", "timeout": 5.0, "backoff": 0.01, "response_format": "none"} | kwargs
    return llm_fsm.LiteLLMClient(model, api_base=server.url, tool_calling="json", **options)


def three_calls(signup, **options):
    """Two calls in ask_name, then one in ask_email: the requests' system prompts, and the conversation."""
    llm = ScriptedLLM([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann"), reply("ask_name", "Name?")])
    conversation = llm_fsm.Conversation(signup, llm, **options)
    conversation.start()
    conversation.send("Ann")
    conversation.send("change my name")
    assert [r.state for r in llm.requests] == ["ask_name", "ask_name", "ask_email"]
    return [r.messages[0]["content"] for r in llm.requests], conversation


def test_a_change_of_state_keeps_the_definition_wide_prefix(signup):
    prompts, conversation = three_calls(signup)  # ScriptedLLM names no order: "recency"
    stable = conversation.prompt.stable_prefix(signup)
    assert all(p.startswith(stable) for p in prompts) and "<current_state>" not in stable
    assert all(isinstance(p, PromptText) and p.breaks[0] == len(stable) for p in prompts)
    # the state's part ends where the turn's begins
    assert all(p[p.breaks[1] :].startswith("<current_context>") for p in prompts)
    # the reply rules follow the state, naming its id; no map of the states
    assert "<response>" not in stable and "<state_map>" not in stable
    assert all(p[: p.breaks[1]].endswith("</format_rules>\n") for p in prompts)
    assert [p.count('"ask_name" to stay') for p in prompts] == [1, 1, 0] and '"ask_email" to stay' in prompts[2]


def test_in_the_cache_order_a_change_of_state_keeps_the_rules_and_the_map(signup):
    prompts, conversation = three_calls(signup, prompt_order="cache")
    stable = conversation.prompt.stable_prefix(signup, order="cache")
    assert all(p.startswith(stable) for p in prompts) and "<current_state>" not in stable
    assert all(isinstance(p, PromptText) and p.breaks[0] == len(stable) for p in prompts)
    assert all(p[p.breaks[1] :].startswith("<current_context>") for p in prompts)
    # the map of the states names every state, the rules are in the stable part and name no state
    assert all(f'<state id="{state}"' in stable for state in signup.states)
    assert "<response>" in stable and "<format_rules>" in stable and " to stay" in stable
    assert not any('"ask_name" to stay' in p or '"ask_email" to stay' in p for p in prompts)
    # what a change of state keeps: most of the prompt (the recency order keeps its definition part only)
    recency, _ = three_calls(signup)
    kept = len(os.path.commonprefix([prompts[1], prompts[2]])) / len(prompts[2])
    kept_recency = len(os.path.commonprefix([recency[1], recency[2]])) / len(recency[2])
    assert kept > 0.6 > kept_recency


def sub_conversation_prompts(order):
    """The insurance example's first two calls: the first line's (insurance_claim: its opening is fixed, no call),
    which enters the identity check, then the second's (the sub-definition identity_check): their system prompts."""
    from tests.conftest import ROOT, example_hooks
    from tests.test_examples import script_for

    path = ROOT / "fsm_definitions" / "insurance_claim.json"
    script, lines = script_for(path)
    llm = ScriptedLLM(script["replies"])
    conversation = llm_fsm.Conversation(llm_fsm.load(path), llm, hooks=example_hooks(path), prompt_order=order)
    conversation.start()
    conversation.send(lines[0])
    conversation.send(lines[1])
    assert [r.definition for r in llm.requests[:2]] == ["insurance_claim", "identity_check"]
    return [str(r.messages[0]["content"]) for r in llm.requests[:2]]


def test_in_the_cache_order_a_sub_conversation_keeps_the_rules_and_the_task():
    parent, child = sub_conversation_prompts("cache")
    shared = os.path.commonprefix([parent, child])
    # the rules and the task's lines that name no definition come before the line that names it
    assert parent.startswith("<response>") and "<format_rules>" in shared and "Each turn you read" in shared
    line = 'You are the conversational voice of a finite state machine named "'
    assert shared.endswith(f"{line}i") and shared.count("\n") == parent[: parent.index(line)].count("\n")
    assert len(shared) > 1500
    # the recency order opens with the definition's name: the two share the task's first words only
    parent, child = sub_conversation_prompts("recency")
    assert len(os.path.commonprefix([parent, child])) < 100


@pytest.mark.parametrize(("order", "guided"), [("recency", False), ("recency", True), ("cache", True)])
def test_other_prompts_open_with_the_task_that_names_the_definition(signup, order, guided):
    snapshot = llm_fsm.Conversation(signup, ScriptedLLM()).snapshot()
    prompt = llm_fsm.PromptBuilder().system_prompt(signup, snapshot, order=order, guided=guided)
    assert prompt.startswith('<task>\nYou are the conversational voice of a finite state machine named "signup"')
    task = prompt[: prompt.index("</task>")]
    assert task.index('named "signup"') < task.index("Each turn you read") < task.index("are data from")


@pytest.mark.parametrize(
    ("model", "api_base", "guided", "order"),
    [
        ("openai/gpt-5-mini", None, False, "cache"),  # cached tokens at a tenth of the price
        ("gpt-4.1-mini", None, False, "cache"),  # a quarter
        ("anthropic/claude-3-5-haiku-20241022", None, False, "cache"),
        ("deepseek/deepseek-chat", None, False, "cache"),
        ("gemini/gemini-2.5-flash", None, False, "cache"),
        ("openai/gpt-4o-mini", None, False, "recency"),  # half: the longer prompt would cost more
        ("openai/local", "http://127.0.0.1:8080/v1", False, "recency"),  # a server of one's own
        ("openai/gpt-5-mini", None, True, "recency"),  # guided replies are for small models
        ("ollama/llama3", None, False, "recency"),
        ("groq/llama-3.1-8b-instant", None, False, "recency"),
    ],
)
def test_the_client_chooses_the_order_by_provider(model, api_base, guided, order):
    assert llm_fsm.LiteLLMClient(model, api_base=api_base, guided=guided).prompt_order == order
    forced = "cache" if order == "recency" else "recency"
    assert llm_fsm.LiteLLMClient(model, api_base=api_base, prompt_order=forced).prompt_order == forced


def test_a_conversation_takes_the_order_its_client_names(signup, fake_openai):
    fake_openai.add(json.dumps(reply("ask_name", "Hi")))
    llm_fsm.Conversation(signup, client(fake_openai, prompt_order="cache")).start()
    system = fake_openai.requests[0]["messages"][0]["content"]
    assert system.index("<response>") < system.index("<current_state>") and "<state_map>" in system


def test_each_part_renders_once(signup):
    builder = llm_fsm.PromptBuilder()
    replies = [reply("ask_name", "Hi"), reply("ask_name", "Name?"), reply("ask_email", "Email?", name="A")]
    llm = ScriptedLLM([*replies, reply("ask_email", "Your email?")])
    conversation = llm_fsm.Conversation(signup, llm, prompt=builder)
    rendered: list[str] = []
    original = builder._render

    def counting(name, variables):
        rendered.append(name)
        return original(name, variables)

    builder._render = counting  # type: ignore[method-assign]
    conversation.start()
    conversation.send("hm")
    conversation.send("A")
    conversation.send("hm")
    assert rendered.count("system_definition.xml.j2") == 1
    assert rendered.count("system_state.xml.j2") == 2  # ask_name, ask_email


def test_prompt_text_keeps_its_breaks_when_copied():
    text = PromptText("abcdef", (2, 4))
    for copied in (copy.deepcopy(text), pickle.loads(pickle.dumps(text))):
        assert copied == "abcdef" and copied.breaks == (2, 4)
    assert json.dumps({"content": text}) == '{"content": "abcdef"}'


def test_usage_adds_cached_tokens():
    total = Usage(10, 2, 12, None, 6, 1) + Usage(20, 3, 23, None, 15)
    assert (total.prompt_tokens, total.cached_tokens, total.cache_write_tokens) == (30, 21, 1)


@pytest.mark.parametrize("stream", [False, True])
def test_cached_prompt_tokens_reach_the_turn_and_the_trace_over_http(signup, fake_openai, spans, stream):
    fake_openai.cached_tokens = 32
    fake_openai.add(json.dumps(reply("ask_name", "Hi")), json.dumps(reply("ask_email", "Email?", name="Ann")))
    conversation = llm_fsm.Conversation(signup, client(fake_openai, stream=stream))
    first = conversation.start()
    second = conversation.send("Ann")
    assert first.usage.cached_tokens == second.usage.cached_tokens == 32
    assert first.usage.prompt_tokens == 50
    sent = fake_openai.requests[0]["messages"][0]
    assert isinstance(sent["content"], str)  # OpenAI-style providers get the prompt as plain text, as before
    calls = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    turns = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent ")]
    assert calls and all(s.attributes["gen_ai.usage.cache_read.input_tokens"] == 32 for s in calls)
    assert turns and all(s.attributes["gen_ai.usage.cache_read.input_tokens"] == 32 for s in turns)


def test_the_eval_card_counts_cached_prompt_tokens(signup, fake_openai):
    fake_openai.cached_tokens = 40
    fake_openai.add(json.dumps(reply("ask_name", "Hi")), json.dumps(reply("ask_email", "Email?", name="Ann")))
    course = Course("signup", signup, ("Ann",), ("ask_name", "ask_email"))
    figures = summary([score(course, client(fake_openai))])
    assert figures["cached_tokens_per_turn"] == 40 and figures["prompt_tokens_per_turn"] == 50


def test_anthropic_requests_mark_the_stable_prefix_for_caching(signup, fake_openai):
    fake_openai.add(anthropic_reply(json.dumps(reply("ask_name", "Hi"))))
    conversation = llm_fsm.Conversation(signup, client(fake_openai, "anthropic/claude-3-5-haiku-20241022"))
    result = conversation.start()
    assert result.state == "ask_name"
    assert result.usage.cached_tokens == 900 and result.usage.cache_write_tokens == 60
    body = fake_openai.requests[0]  # what litellm sent to the Messages API
    system = body["system"]
    # Anthropic caches a marked prefix: the client asks for the cache order, even at an api_base
    snapshot = conversation.snapshot().model_copy(update={"history": ()})
    prompt = conversation.prompt.system_prompt(signup, snapshot, order="cache")
    assert "".join(block["text"] for block in system) == prompt
    assert [block.get("cache_control") for block in system] == [{"type": "ephemeral"}, {"type": "ephemeral"}, None]
    assert system[0]["text"] == conversation.prompt.stable_prefix(signup, order="cache")
    assert system[1]["text"].startswith("<current_state>") and system[2]["text"].startswith("<current_context>")


def test_openai_requests_are_unchanged(signup, fake_openai):
    fake_openai.add(json.dumps(reply("ask_name", "Hi")))
    conversation = llm_fsm.Conversation(signup, client(fake_openai))
    conversation.start()
    sent = fake_openai.requests[0]["messages"]
    assert sent[0] == {"role": "system", "content": sent[0]["content"]} and isinstance(sent[0]["content"], str)
    assert "cache_control" not in json.dumps(fake_openai.requests[0])


def test_the_turns_pieces_read_the_same_through_a_users_templates(signup, tmp_path):
    from llm_fsm.snapshot import Exchange
    from llm_fsm.turn.engine import initial_snapshot
    from llm_fsm.turn.prompt import _templates_dir

    history = (
        Exchange(user=None, assistant="Hi <b>", state="ask_name"),
        Exchange(user="Ann", assistant="Ok", state="ask_name"),
    )
    snapshot = initial_snapshot(signup, None, {"name": "A & B"}).model_copy(update={"history": history})
    packaged = llm_fsm.PromptBuilder().system_prompt(signup, snapshot)
    # the packaged composer, as a user's copy: rendered by Jinja instead of joined, the same text
    for name in ("system_conversation.xml.j2", "conversation_history.xml.j2", "exchange.xml.j2"):
        (tmp_path / name).write_text((_templates_dir() / name).read_text())
    assert llm_fsm.PromptBuilder([tmp_path]).system_prompt(signup, snapshot) == packaged
    # a composer written against the data, as before the pieces: it still has the context and the history
    (tmp_path / "system_conversation.xml.j2").write_text(
        "{{ context | tojson }}{% for h in history %}[{{ h.user }}|{{ h['assistant'] }}]{% endfor %}</fsm>\n"
    )
    custom = llm_fsm.PromptBuilder([tmp_path]).system_prompt(signup, snapshot)
    assert custom.endswith('{"name": "A &amp; B"}[None|Hi &lt;b&gt;][Ann|Ok]</fsm>\n')


@pytest.mark.parametrize("stream", [False, True])
def test_cached_tokens_never_exceed_the_prompt_tokens(fake_openai, stream):
    # a provider that reports more cached tokens than the prompt held (counted apart, or a quirk): clamped
    # where usage is read, so no figure built on it (cache hit rates, the eval card) goes past 100 %
    from llm_fsm.llm import LLMRequest

    fake_openai.cached_tokens = 80  # the fake's prompt_tokens are 50
    fake_openai.add("hello")
    response = client(fake_openai, stream=stream).complete(LLMRequest([{"role": "user", "content": "hi"}]))
    assert (response.usage.prompt_tokens, response.usage.cached_tokens) == (50, 50)


def test_an_order_that_is_not_one_is_refused(signup):
    for wrong in ("auto", "bogus", "Cache", ""):
        with pytest.raises(ValueError, match="prompt_order is 'recency' or 'cache'"):
            llm_fsm.Conversation(signup, ScriptedLLM(), prompt_order=wrong)
    for wrong in ("bogus", "CACHE", None, ""):
        with pytest.raises(ValueError, match="prompt_order is 'auto', 'recency' or 'cache'"):
            llm_fsm.LiteLLMClient("openai/gpt-4.1", prompt_order=wrong)


def test_a_recording_keeps_the_order_and_its_replay_sends_the_same_prompts(signup, tmp_path):
    from llm_fsm.testing.cassette import RecordingLLM, ReplayLLM

    inner = ScriptedLLM([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")])
    inner.prompt_order = "cache"
    cassette = tmp_path / "c.json"
    recorded = llm_fsm.Conversation(signup, RecordingLLM(inner, cassette))
    recorded.start()
    recorded.send("Ann")
    assert "<state_map>" in inner.requests[0].messages[0]["content"]
    assert json.loads(cassette.read_text())["prompt_order"] == "cache"
    replayed = llm_fsm.Conversation(signup, ReplayLLM(cassette))
    replayed.start()
    assert replayed.send("Ann").state == "ask_email"  # the same prompts: no mismatch


def test_the_command_lines_order_reaches_scripted_and_simulated_replies(tmp_path):
    from typer.testing import CliRunner

    from llm_fsm.cli import app
    from tests.conftest import ROOT

    examples = ROOT / "fsm_definitions"
    cassette = tmp_path / "run.json"
    args = ["run", str(examples / "quiz.json"), "--model", f"scripted:{examples / 'scripts' / 'quiz.json'}"]
    args += ["--input", str(examples / "scripts" / "quiz.txt"), "--record", str(cassette), "--prompt-order", "cache"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    prompts = [call["messages"][0]["content"] for call in json.loads(cassette.read_text())["interactions"]]
    assert prompts and all("<state_map>" in p for p in prompts)
