"""A state's own opening (``"opening"``): the opening turn with no model call, in every way a turn runs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.errors import DefinitionError, LLMUnavailableError, OpeningError, PromptError
from llm_fsm.testing import ScriptedLLM
from tests.conftest import ROOT, SIGNUP, reply

runner = CliRunner()
HELLO = "Hi! I'm Sunny. What's your name?"


def signup(opening: str | None = HELLO, **state: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"] |= {"opening": opening, **state}
    return data


def never() -> ScriptedLLM:
    """A model that fails any call: an opening that needs none never reaches it."""
    return ScriptedLLM([LLMUnavailableError("no model here", model="x")])


# -- the definition -----------------------------------------------------------------------------


def test_a_template_that_does_not_compile_is_a_load_error_naming_the_state_and_the_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(signup("Hi {{ name "), indent=1))
    with pytest.raises(DefinitionError) as caught:
        llm_fsm.load(path)
    (problem,) = caught.value.problems
    assert problem.path == "states.ask_name.opening" and problem.line is not None
    assert "the opening is not a valid template" in problem.message


def test_an_opening_is_prose_and_a_definition_without_one_keeps_its_hash():
    plain, opened = llm_fsm.load(SIGNUP), llm_fsm.load(signup())
    assert "opening" not in json.dumps(llm_fsm.load(SIGNUP).model_dump(mode="json", exclude_none=True)["states"])
    assert plain.content_hash != opened.content_hash
    # the snapshot of a conversation saved without it continues on the definition with it (a prose edit)
    assert opened.changes_since(plain.outline, prose=False) == []
    assert opened.changes_since(plain.outline) == ["descriptions or instructions of state 'ask_name' changed"]
    assert opened.states["ask_name"].opening == HELLO and plain.states["ask_name"].opening is None


# -- the turn -----------------------------------------------------------------------------------


def test_the_opening_makes_no_model_call_and_is_recorded_like_a_models():
    llm = never()
    conversation = llm_fsm.Conversation(llm_fsm.load(signup()), llm)
    result = conversation.start()
    assert (result.message, result.state, result.previous_state, result.user, result.turn) == (
        HELLO, "ask_name", None, None, 0,
    )  # fmt: skip
    assert result.llm_calls == 0 and result.usage.total_tokens == 0 and not result.rejected
    assert llm.requests == [] and conversation.status == "active"
    (exchange,) = conversation.history
    assert (exchange.user, exchange.assistant, exchange.state) == (None, HELLO, "ask_name")
    with pytest.raises(llm_fsm.ConversationError):
        conversation.start()  # an opening after the opening is refused, as for a model's


def test_the_next_prompt_shows_the_opening_in_its_history_like_any_turn():
    llm = ScriptedLLM([reply("ask_email", "Thanks Ann! Your email?", name="Ann")])
    conversation = llm_fsm.Conversation(llm_fsm.load(signup()), llm)
    conversation.start()
    conversation.send("I'm Ann")
    (request,) = llm.requests
    system = request.messages[0]["content"]
    assert "Hi! I&#39;m Sunny" in system or "Hi! I'm Sunny" in system
    assert request.messages[-1] == {"role": "user", "content": "I'm Ann"}


def test_a_template_reads_the_initial_context_and_a_missing_key_is_an_error_naming_it():
    definition = llm_fsm.load(signup("Welcome back, {{ name }}! Your plan: {{ plan | default('free') }}."))
    greeted = llm_fsm.Conversation(definition, never(), context={"name": "Ann"})
    assert greeted.start().message == "Welcome back, Ann! Your plan: free."
    missing = llm_fsm.Conversation(definition, never())
    with pytest.raises(OpeningError, match=r"state 'ask_name'.*'name' is undefined"):
        missing.start()
    assert missing.status == "new" and missing.history == ()  # the failed turn changed nothing
    missing.update_context({"name": "Bo"})
    assert missing.start().message.startswith("Welcome back, Bo!")


def test_the_template_is_sandboxed_and_not_escaped():
    definition = llm_fsm.load(signup("{{ name.__class__ }}"))
    with pytest.raises(PromptError, match="its opening could not be written"):  # an OpeningError is one
        llm_fsm.Conversation(definition, never(), context={"name": "x"}).start()
    marked = llm_fsm.load(signup("Hi {{ name }} <3 & welcome"))
    assert llm_fsm.Conversation(marked, never(), context={"name": "A&B"}).start().message == "Hi A&B <3 & welcome"


def test_start_handlers_run_first_and_no_call_handlers_run():
    hooks, seen = Hooks(), []

    @hooks.on("start")
    def look_up(**_: Any) -> dict[str, Any]:
        seen.append("start")
        return {"name": "Ann"}

    @hooks.on("before_llm_call")
    def before(**_: Any) -> None:
        seen.append("before_llm_call")

    definition = llm_fsm.load(signup("Hello {{ name }}!"))
    result = llm_fsm.Conversation(definition, never(), hooks=hooks).start()
    assert result.message == "Hello Ann!" and seen == ["start"]


def test_a_terminal_state_that_opens_runs_its_end_handlers_and_ends():
    hooks, seen = Hooks(), []
    hooks.on("end")(lambda **_: seen.append("end"))
    data = {"name": "notice", "initial_state": "closed", "states": {"closed": {"opening": "We are closed today."}}}
    conversation = llm_fsm.Conversation(llm_fsm.load(data), never(), hooks=hooks)
    result = conversation.start()
    assert result.ended and conversation.ended and seen == ["end"] and result.message == "We are closed today."


def test_a_break_in_start_pauses_before_the_opening():
    hooks = Hooks()

    @hooks.on("start")
    def hold(**_: Any) -> None:
        raise llm_fsm.Break("check the account", message="One moment.")

    conversation = llm_fsm.Conversation(llm_fsm.load(signup()), never(), hooks=hooks)
    result = conversation.start()
    assert result.paused and result.message == "One moment." and result.llm_calls == 0


def test_the_resume_of_a_break_in_start_writes_the_opening_with_no_model_call():
    hooks, seen = Hooks(), []

    @hooks.on("start")
    def hold(**_: Any) -> None:
        seen.append("hold")
        raise llm_fsm.Break("look the customer up", message="One moment.")

    @hooks.on("start")
    def after(**_: Any) -> dict[str, Any]:  # after the one that paused: runs on the resume
        seen.append("after")
        return {"plan": "gold"}

    llm = never()
    conversation = llm_fsm.Conversation(llm_fsm.load(signup("Hello {{ name }} ({{ plan }})!")), llm, hooks=hooks)
    paused = conversation.start()
    assert paused.paused and paused.message == "One moment."
    assert paused.pending is not None
    result = conversation.resume(paused.pending.token, {"name": "Ann"})
    assert result.message == "Hello Ann (gold)!" and result.llm_calls == 0 and llm.requests == []
    assert seen == ["hold", "after"] and conversation.status == "active"
    assert [e.assistant for e in conversation.history] == ["One moment.", "Hello Ann (gold)!"]


def test_the_resume_of_a_break_in_start_in_a_terminal_state_writes_its_opening_and_ends():
    hooks, seen = Hooks(), []

    @hooks.on("start")
    def hold(**_: Any) -> None:
        raise llm_fsm.Break("check the hours", message="One moment.")

    hooks.on("end")(lambda **_: seen.append("end"))
    data = {"name": "notice", "initial_state": "closed", "states": {"closed": {"opening": "We are closed today."}}}
    conversation = llm_fsm.Conversation(llm_fsm.load(data), never(), hooks=hooks)
    paused = conversation.start()
    assert paused.pending is not None
    result = conversation.resume(paused.pending.token, {})
    assert result.message == "We are closed today." and result.ended and seen == ["end"]


def test_a_conversation_started_in_another_state_opens_with_that_states_opening():
    data = signup(None)
    data["states"]["ask_email"]["opening"] = "Your email, please?"
    llm = never()
    result = llm_fsm.Conversation(llm_fsm.load(data), llm, state="ask_email").start()
    assert result.message == "Your email, please?" and llm.requests == []
    # the initial state has none: the model writes it, as before
    model = ScriptedLLM([reply("ask_name", "Name?")])
    assert llm_fsm.Conversation(llm_fsm.load(data), model).start().llm_calls == 1 and len(model.requests) == 1


def test_async_and_streamed_openings_make_no_call():
    definition = llm_fsm.load(signup("Hi {{ name }}!"))

    async def both() -> tuple[str, list[Any]]:
        first = await llm_fsm.Conversation(definition, never(), context={"name": "A"}).astart()
        events = [e async for e in llm_fsm.Conversation(definition, never(), context={"name": "B"}).astream()]
        return first.message, events

    message, events = asyncio.run(both())
    assert message == "Hi A!"
    assert [type(e).__name__ for e in events] == ["MessageDelta", "TurnResult"] and events[0].text == "Hi B!"
    streamed = list(llm_fsm.Conversation(definition, never(), context={"name": "C"}).stream())
    assert streamed[0].text == "Hi C!" and streamed[-1].llm_calls == 0


def test_a_conversation_opening_in_a_subflow_uses_the_subdefinitions_opening(tmp_path):
    inner = {
        "name": "identity", "initial_state": "ask_dob",
        "states": {
            "ask_dob": {"opening": "For policy {{ policy }}: your date of birth?",
                        "transitions": [{"target_state": "ok"}]},
            "ok": {},
        },
    }  # fmt: skip
    claim = {
        "name": "claim", "initial_state": "identify", "context_schema": {"policy": {"type": "string"}},
        "states": {
            "identify": {"subflow": {"definition": "identity", "input": {"policy": "policy"}},
                         "transitions": [{"target_state": "done"}]},
            "done": {},
        },
    }  # fmt: skip
    (tmp_path / "identity.json").write_text(json.dumps(inner))
    (tmp_path / "claim.json").write_text(json.dumps(claim))
    outer = llm_fsm.load(tmp_path / "claim.json")
    llm = never()
    conversation = llm_fsm.Conversation(outer, llm, context={"policy": "HM-1"})
    result = conversation.start()
    assert result.message == "For policy HM-1: your date of birth?" and result.llm_calls == 0 and llm.requests == []
    assert result.ran_in == ("identity", "ask_dob") and conversation.frames[-1] == {
        "definition": "identity", "state": "ask_dob",
    }  # fmt: skip
    assert conversation.history[0].assistant == result.message


# -- stores, serve, the command line -------------------------------------------------------------


def test_a_stored_conversation_opens_and_saves_with_no_model():
    from llm_fsm.store import advance, open_store

    store = open_store("memory:")
    result = advance(store, "c1", llm_fsm.load(signup()), never(), None)
    assert result.message == HELLO and result.llm_calls == 0
    saved = store.load("c1").snapshot
    assert saved.history[0].assistant == HELLO and saved.turns == 0

    async def opened() -> str:
        from llm_fsm.store import aadvance

        return (await aadvance(store, "c2", llm_fsm.load(signup()), never(), None)).message

    assert asyncio.run(opened()) == HELLO


def test_serve_creates_a_conversation_with_a_model_that_would_fail():
    from fastapi.testclient import TestClient

    from llm_fsm.server import create_app
    from llm_fsm.store import open_store

    llm = never()
    http = TestClient(create_app([llm_fsm.load(signup())], llm, store=open_store("memory:")))
    response = http.post("/conversations", json={})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["result"]["message"] == HELLO and body["result"]["llm_calls"] == 0 and llm.requests == []
    # an opening that reads a key the request's context lacks: the request is at fault, and nothing is stored
    store = open_store("memory:")
    templated = TestClient(create_app([llm_fsm.load(signup("Hi {{ name }}!"))], never(), store=store))
    refused = templated.post("/conversations", json={})
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request"
    assert "'name' is undefined" in refused.json()["error"]["message"] and store.list() == []
    created = templated.post("/conversations", json={"context": {"name": "Ann"}})
    assert created.status_code == 201 and created.json()["result"]["message"] == "Hi Ann!"


def test_chat_shows_the_first_prompt_before_litellm_is_touched(tmp_path, monkeypatch):
    """The opening needs no model: litellm's warm-up starts only as the first prompt is shown."""
    from llm_fsm.cli import chat as chat_module

    path = tmp_path / "signup.json"
    path.write_text(json.dumps(signup()))
    seen: list[Any] = []
    monkeypatch.setattr(chat_module, "_warm_up", lambda llm: seen.append(("warm-up", llm._litellm is None)))

    def typed(prompt: str = "") -> str:
        seen.append(("prompt", prompt.strip()))
        raise EOFError

    monkeypatch.setattr("builtins.input", typed)
    monkeypatch.setattr(chat_module, "_piped_line", typed)  # what reads the prompt's line when stdin is no terminal
    args = ["chat", str(path), "-m", "openai/x", "--api-key", "k", "--store", "memory:"]
    result = runner.invoke(chat_module.app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert HELLO in result.stdout and "0 LLM calls" in result.stdout
    # never imported by the client before the prompt: the warm-up starts just before it, not at launch
    assert seen == [("warm-up", True), ("prompt", "you>")]


def test_chat_warms_litellm_up_at_launch_when_the_model_writes_the_opening(tmp_path, monkeypatch):
    from llm_fsm.cli import chat as chat_module

    path = tmp_path / "signup.json"
    path.write_text(json.dumps(SIGNUP))
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("ask_name", "Name?")]))
    seen: list[str] = []
    monkeypatch.setattr(chat_module, "_warm_up", lambda llm: seen.append("warm-up"))
    monkeypatch.setattr(chat_module.ChatSession, "opening", lambda self: seen.append("opening"))
    result = runner.invoke(chat_module.app, ["chat", str(path), "-m", f"scripted:{script}", "--store", "memory:"])
    assert result.exit_code == 0, result.output
    assert seen == ["warm-up", "opening"]


def test_run_prints_the_opening_with_no_call(tmp_path):
    from llm_fsm.cli import app

    path = tmp_path / "signup.json"
    path.write_text(json.dumps(signup()))
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([]))
    result = runner.invoke(app, ["run", str(path), "-m", f"scripted:{script}"], input="")
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout.splitlines()[0])
    assert (first["message"], first["llm_calls"], first["user"], first["turn"]) == (HELLO, 0, None, 0)


# -- validate ------------------------------------------------------------------------------------


def test_validate_warns_about_an_opening_never_shown_and_one_reading_keys_no_opening_has():
    from llm_fsm.authoring.analysis import analyze

    data = signup("Hi {{ name }}!")
    data["states"]["ask_email"]["opening"] = "Your email?"
    found = {(d.code, d.path) for d in analyze(data)}
    assert ("opening_needs_context", "states.ask_name.opening") in found
    assert ("opening_not_initial", "states.ask_email.opening") in found
    quiet = signup("Hi {{ name | default('there') }}!")
    assert not [d for d in analyze(quiet) if d.code.startswith("opening")]


def test_the_examples_that_greet_the_same_way_every_time_open_by_themselves():
    for path in sorted((ROOT / "fsm_definitions").glob("*.json")):
        definition = llm_fsm.load(path)
        opening = definition.states[definition.initial_state].opening
        assert opening, f"{path.name}: its greeting is fixed, so its initial state writes it"


def test_a_test_file_that_scripts_a_reply_for_an_opening_the_state_writes_says_why_it_is_unused(tmp_path):
    from llm_fsm.cli import app

    (tmp_path / "signup.json").write_text(json.dumps(signup()))
    step = {"user": None, "reply": reply("ask_name", "Name?"), "expect": {"state": "ask_name", "max_llm_calls": 0}}
    case = {"cases": [{"name": "opens", "definition": "signup.json", "steps": [step]}]}
    (tmp_path / "signup.test.json").write_text(json.dumps(case))
    result = runner.invoke(app, ["test", str(tmp_path / "signup.test.json")], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "1 scripted reply not used (state 'ask_name' writes its own opening" in result.stdout
    del step["reply"]
    (tmp_path / "signup.test.json").write_text(json.dumps(case))
    assert runner.invoke(app, ["test", str(tmp_path / "signup.test.json")]).exit_code == 0


def test_a_traced_opening_is_one_turn_span_with_no_model_call_span():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llm_fsm import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    try:
        hooks = Hooks()
        hooks.on("start")(lambda **_: None)
        llm_fsm.Conversation(llm_fsm.load(signup()), never(), hooks=hooks, id="c1").start()
    finally:
        telemetry.set_tracer_provider(None)
    spans = exporter.get_finished_spans()
    # the turn's span, as for any opening, and its start handler's: no span of a model call
    assert sorted(s.name for s in spans) == ["handler <lambda>", "invoke_agent signup"]
    (turn,) = [s for s in spans if s.parent is None]
    attributes = dict(turn.attributes or {})
    assert attributes["llm_fsm.turn.kind"] == "opening" and attributes["llm_fsm.llm_calls"] == 0
    assert attributes["llm_fsm.transition"] == "stay" and attributes["gen_ai.usage.input_tokens"] == 0


FIRST_PROMPT = """
import builtins, os, sys
def prompt(text=""):
    print("AT PROMPT", "litellm" in sys.modules, "rich.markdown" in sys.modules, flush=True)
    os._exit(0)
builtins.input = prompt
import llm_fsm.cli.chat
llm_fsm.cli.chat._piped_line = prompt  # the prompt's reader when stdin is no terminal
llm_fsm.cli.chat._warm_up = lambda llm: None  # its timing is the test above's: here, nothing else imports litellm
sys.argv = ["llm-fsm", "chat", sys.argv[1], "-m", "openai/x", "--api-key", "k", "--store", "memory:"]
from llm_fsm.cli import entry_point
entry_point()
"""


def test_chat_reaches_its_first_prompt_without_importing_litellm_or_markdown(tmp_path):
    """In a process of its own: what was imported when the first prompt shows (the warm-up left out)."""
    import os
    import subprocess
    import sys

    path = tmp_path / "signup.json"
    path.write_text(json.dumps(signup()))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FSM_HOME": str(tmp_path / "home"), "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_PROMPT, str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert HELLO in done.stdout and "AT PROMPT False False" in done.stdout


def test_a_message_without_markup_is_shown_as_plain_text():
    from rich.markdown import Markdown
    from rich.text import Text

    from llm_fsm.cli.chat_views import rendered

    assert isinstance(rendered(HELLO), Text) and isinstance(rendered("Price: 5 USD (50% off) - ok?"), Text)
    for marked in ("Your **name**?", "a\nb", "- item", "1. first", "    code", "# Title", "[a](b)", "x_y_", "> q"):
        assert isinstance(rendered(marked), Markdown), marked


# -- bounds: an opening is one chat message, and a definition's text cannot hang or fill the process ----------


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("{{ 'x' * 10**9 }}", "a repetition over 4000 items"),
        ("{{ 9 ** (9 ** 9) }}", "an exponent over 64"),
        ("{% for i in range(10**7) %}x{% endfor %}", "loops over more than 1000 items"),
        ("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}", "loops over more than 1000"),
        ("{{ 'x' * 3000 }}{{ 'y' * 3000 }}", "writes more than 4000 characters"),
        ("{% include 'other.j2' %}", "no loader"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ '' }}{# nothing #}", "wrote nothing a user could read"),
        ("{{ name * 'ab' }}", "a repetition over 4000 items"),
    ],
)
def test_an_opening_the_sandbox_bounds_is_an_opening_error_and_validate_names_it(template, said):
    from llm_fsm.authoring.analysis import analyze

    definition = llm_fsm.load(signup(template))  # loads at once: nothing is computed at compile time
    with pytest.raises(OpeningError, match=said):
        llm_fsm.Conversation(definition, never(), context={"name": 10**8}).start()
    if "name" not in template:  # one that reads a key is told by opening_needs_context instead
        found = [d for d in analyze(signup(template)) if d.code == "opening_fails"]
        assert found and said.split(" (")[0] in found[0].message


def test_an_opening_within_the_bounds_is_written():
    opening = "Hello {{ 2 ** 10 }}: {% for i in range(3) %}{{ i }}{% endfor %} {{ '-' * 10 }}"
    result = llm_fsm.Conversation(llm_fsm.load(signup(opening)), never()).start()
    assert result.message == "Hello 1024: 012 ----------"


@pytest.mark.parametrize("blank", ["", "   ", "\u200b\n"])
def test_an_opening_with_no_visible_text_is_a_load_error(blank):
    with pytest.raises(DefinitionError, match="no visible text"):
        llm_fsm.load(signup(blank))


def test_serve_refuses_an_opening_the_sandbox_bounds_with_400_and_stores_nothing():
    from fastapi.testclient import TestClient

    from llm_fsm.server import create_app
    from llm_fsm.store import open_store

    store = open_store("memory:")
    http = TestClient(create_app([llm_fsm.load(signup("{{ 'x' * n }}"))], never(), store=store))
    refused = http.post("/conversations", json={"context": {"n": 10**8}})
    assert refused.status_code == 400 and "repetition" in refused.json()["error"]["message"]
    assert store.list() == []
