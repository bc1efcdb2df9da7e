"""``llm-fsm chat`` through CliRunner (stdin is not a terminal there, so rich prints plain text)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.cli.chat import readline_prompt, status_line
from tests.conftest import SIGNUP, reply
from tests.fake_openai import HTTPError

runner = CliRunner()

OPEN = json.loads(json.dumps(SIGNUP))
OPEN["handler_only_keys"] = []
OPEN["states"]["ask_email"]["transitions"][0]["conditions"] = [
    {"description": "has email", "requires_context_keys": ["email"]}
]


@pytest.fixture
def definition(tmp_path):
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(OPEN))
    return path


def chat(definition, tmp_path, replies, text, *extra):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    args = ["chat", str(definition), "--model", f"scripted:{script}", *extra]
    return runner.invoke(app, args, input=text, env={"COLUMNS": "200"})


GREETING = reply("ask_name", "Hello! What's your **name**?")
NAME = reply("ask_email", "Thanks Ann! Your email?", name="Ann")
DONE = reply("done", "All set. Bye!", email="ann@example.com")


def test_a_conversation_to_its_end(definition, tmp_path):
    result = chat(definition, tmp_path, [GREETING, NAME, DONE], "I'm Ann\nann@example.com\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Hello! What's your name?" in out  # markdown rendered, not raw
    assert "state ask_name → ask_email · collected name · 1 LLM call" in out
    assert "All set. Bye!" in out and "The conversation has ended." in out


def test_end_of_input_leaves_with_0(definition, tmp_path):
    result = chat(definition, tmp_path, [GREETING], "")
    assert result.exit_code == 0 and "Hello!" in result.stdout


def test_state_context_history_why(definition, tmp_path):
    rejected = reply("done", "Registered!", _admin=True)
    correction = reply("ask_name", "Your name first, please.")
    text = "skip\n/why\n/state\n/context\n/history\n/quit\n"
    result = chat(definition, tmp_path, [GREETING, rejected, correction], text, "--context", '{"plan": "pro"}')
    out = result.stdout
    assert result.exit_code == 0, result.output
    assert "Registered!" not in out, "a rejected reply is never shown"
    assert "context_key" in out and "'_admin' is internal" in out
    assert "target" in out and "transition to 'done' rejected" in out
    assert "ask_name: Ask for the user's name" in out and "→ ask_email" in out
    assert '"plan": "pro"' in out
    assert "you> skip" in out and "bot> Your name first, please. (ask_name)" in out


def test_a_blank_line_is_not_sent_and_says_so(definition, tmp_path):
    # Only the greeting and one answer are scripted: a blank line sent as a turn would run out of replies.
    result = chat(definition, tmp_path, [GREETING, NAME], "\n   \n\u200b\nI'm Ann\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("(nothing sent: type a message, or /help for commands)") == 3
    assert "Thanks Ann! Your email?" in result.stdout and "error" not in result.output.lower()


def test_back_undoes_the_last_turn(definition, tmp_path):
    result = chat(definition, tmp_path, [GREETING, NAME], "I'm Ann\n/back\n/state\n/context\n/back\n/back\n")
    out = result.stdout
    assert "Undone: back in state ask_name." in out
    assert out.count("Undone") == 2 and "Nothing to undo." in out
    assert out.index("Undone") < out.index("ask_name: Ask")
    assert "{}" in out.split("ask_name: Ask")[1]


def test_save_and_load(definition, tmp_path):
    saved = tmp_path / "conv.json"
    result = chat(definition, tmp_path, [GREETING, NAME], f"I'm Ann\n/save {saved}\n/quit\n")
    assert result.exit_code == 0 and f"saved to {saved}" in result.stdout
    data = json.loads(saved.read_text())
    assert data["state"] == "ask_email" and data["context"] == {"name": "Ann"}
    result = chat(definition, tmp_path, [GREETING, DONE], f"/load {saved}\nann@example.com\n")
    assert f"loaded {saved}: state ask_email" in result.stdout and "The conversation has ended." in result.stdout
    result = chat(definition, tmp_path, [GREETING], f"/load {tmp_path / 'nope.json'}\n/save\n/quit\n")
    assert "cannot read" in result.stderr and "usage: /save FILE" in result.stderr and result.exit_code == 0


def test_reset_starts_over(definition, tmp_path):
    result = chat(
        definition, tmp_path, [GREETING, NAME, reply("ask_name", "Fresh start!")], "I'm Ann\n/reset\n/context\n"
    )
    assert "Starting over." in result.stdout and "Fresh start!" in result.stdout
    assert result.stdout.split("Fresh start!")[1].split("you>")[1].strip() == "{}"


def test_help_and_unknown_commands(definition, tmp_path):
    result = chat(definition, tmp_path, [GREETING], "/help\n/stat\n/zzz\n/exit\n")
    assert "/history" in result.stdout and "/back" in result.stdout
    assert "unknown command /stat; did you mean '/state'?" in result.stderr
    assert "unknown command /zzz (type /help)" in result.stderr
    assert result.exit_code == 0


def test_start_anywhere_and_bad_options(definition, tmp_path):
    result = chat(
        definition,
        tmp_path,
        [reply("ask_email", "Your email, Bo?")],
        "/context\n",
        "--state",
        "ask_email",
        "--context",
        '{"name": "Bo"}',
    )
    assert "Your email, Bo?" in result.stdout and '"name": "Bo"' in result.stdout
    result = chat(definition, tmp_path, [GREETING], "", "--state", "ask_emial")
    assert result.exit_code == 2 and "unknown state 'ask_emial'; did you mean 'ask_email'?" in result.stderr
    result = chat(definition, tmp_path, [GREETING], "", "--context", "{not json")
    assert result.exit_code == 2 and "--context is not valid JSON" in result.stderr
    result = runner.invoke(app, ["chat", str(definition)], env={"LLM_FSM_MODEL": ""})
    assert result.exit_code == 2 and "no model configured" in result.stderr


def test_provider_errors_print_one_line_and_a_failed_opening_is_made_before_the_next_message(definition, fake_openai):
    fake_openai.add(
        HTTPError(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}),
        json.dumps(GREETING),
        json.dumps(NAME),
    )
    args = ["chat", str(definition), "-m", "openai/x", "--api-base", fake_openai.url, "--api-key", "k"]
    result = runner.invoke(app, args, input="/history\nI'm Ann\n/history\n/state\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.stderr.count("error:") == 1 and "Incorrect API key" in result.stderr
    assert "Traceback" not in result.output
    assert "(no opening yet: it is tried again when you type your next message)" in result.stderr
    first, second = result.stdout.split("(the opening message first)")
    assert "bot>" not in first, "nothing was said before the opening was made"
    assert "bot> Hello! What's your **name**? (ask_name)\nyou> I'm Ann\nbot> Thanks Ann!" in second
    assert "ask_email: Ask for the email" in second
    assert [r["messages"][-1]["content"] for r in fake_openai.requests][-1] == "I'm Ann"


def test_streaming_chat_over_the_local_server(definition, fake_openai):
    fake_openai.add(json.dumps(GREETING), json.dumps(reply("done", "REJECTED-TEXT")), json.dumps(NAME))
    args = ["chat", str(definition), "-m", "openai/x", "--api-base", fake_openai.url, "--api-key", "k"]
    result = runner.invoke(app, args, input="I'm Ann\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert all(r.get("stream") for r in fake_openai.requests)
    assert "REJECTED-TEXT" not in result.stdout and "Thanks Ann! Your email?" in result.stdout
    assert "2 LLM calls" in result.stdout and "1 rejected (/why)" in result.stdout


def test_readline_prompt_wraps_escape_codes():
    from llm_fsm.cli import chat as module

    original = module.console
    module.console = module.Console(force_terminal=True, color_system="standard")
    try:
        prompt = readline_prompt("[bold cyan]you>[/] ")
    finally:
        module.console = original
    assert "you>" in prompt and "\x01\x1b[" in prompt and "m\x02" in prompt
    assert prompt.replace("\x01", "").replace("\x02", "").count("\x1b[") == prompt.count("\x01")


def test_status_line_mentions_tokens():
    from llm_fsm.conversation import TurnResult
    from llm_fsm.llm import Usage

    result = TurnResult("m", "b", "a", "hi", 1, {"k": 1}, (), 1, Usage(1, 2, 3), 0.1, False, {})
    assert status_line(result) == "state a → b · collected k · 1 LLM call · 3 tokens"


def test_shell_completion_of_state_names_and_definition_files(monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    words = "llm-fsm chat fsm_definitions/small_talk.json --state c"
    env = {"_LLM_FSM_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": "4"}
    result = runner.invoke(app, [], env=env, prog_name="llm-fsm")
    assert result.stdout.split() == ["check_in", "chatting"]
    env = {"_LLM_FSM_COMPLETE": "complete_bash", "COMP_WORDS": "llm-fsm run fsm_definitions/sm", "COMP_CWORD": "2"}
    assert runner.invoke(app, [], env=env, prog_name="llm-fsm").stdout.split() == ["fsm_definitions/small_talk.json"]


HOOKS_FILE = """
from llm_fsm import Break, Hooks

hooks = Hooks()


@hooks.handler("ask_staff", on="state_enter")
def ask_staff(*, context):
    raise Break("staff approval needed", {"name": context.get("name")})
"""


@pytest.fixture
def paused_definition(tmp_path):
    data = json.loads(json.dumps(OPEN))
    data["states"]["ask_email"]["handlers"] = ["ask_staff"]
    path = tmp_path / "approval.json"
    path.write_text(json.dumps(data))
    (tmp_path / "approval_hooks.py").write_text(HOOKS_FILE)
    return path


def test_a_paused_chat_shows_the_event_and_resumes(paused_definition, tmp_path):
    hooks = f"{tmp_path / 'approval_hooks.py'}:hooks"
    replies = [GREETING, NAME, reply("ask_email", "Approved! Your email?"), DONE]
    text = 'I\'m Ann\nhello?\n/resume {"approved_by": "Bo"}\n/context\n/resume {}\nann@example.com\n'
    result = chat(paused_definition, tmp_path, replies, text, "--hooks", hooks)
    out = result.stdout
    assert result.exit_code == 0, result.output
    assert "paused: staff approval needed" in out and '{"name": "Ann"}' in out
    assert "The conversation is paused: type /resume JSON" in result.stderr
    assert "Approved! Your email?" in out, "the resume made the next model call"
    assert "approved_by: set by resume on turn 2" in out and "name: set by llm on turn 1" in out
    assert "error: nothing to resume: the conversation is not paused" in result.stderr
    assert "All set. Bye!" in out and "The conversation has ended." in out


def test_unregistered_handlers_and_bad_hooks_are_usage_errors(paused_definition, tmp_path):
    result = chat(paused_definition, tmp_path, [GREETING], "")
    assert result.exit_code == 2 and "names handler 'ask_staff', which is not registered" in result.stderr
    result = chat(paused_definition, tmp_path, [GREETING], "", "--hooks", "no_such_module:hooks")
    assert result.exit_code == 2 and "no module named 'no_such_module'" in result.stderr
    result = chat(paused_definition, tmp_path, [GREETING], "", "--hooks", f"{tmp_path / 'approval_hooks.py'}:Hooks")
    assert result.exit_code == 2 and "not a llm_fsm.Hooks object" in result.stderr


def test_run_stops_at_a_pause(paused_definition, tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([GREETING, NAME]))
    args = [
        "run",
        str(paused_definition),
        "-m",
        f"scripted:{script}",
        "--hooks",
        f"{tmp_path / 'approval_hooks.py'}:hooks",
    ]
    result = runner.invoke(app, args, input="I'm Ann\nmore\n")
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 3 and len(turns) == 2  # 3: left paused, waiting for a person
    assert turns[1]["status"] == "paused" and turns[1]["pending"]["reason"] == "staff approval needed"
    assert "paused: staff approval needed (to continue: run again with a --store to keep it)" in result.stderr


def test_run_resumes_a_stored_pause_with_resume(paused_definition, tmp_path):
    store = f"sqlite://{tmp_path / 'c.db'}"
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([GREETING, NAME, reply("ask_email", "Approved! Your email?"), DONE]))
    args = [
        "run",
        str(paused_definition),
        "-m",
        f"scripted:{script}",
        "--hooks",
        f"{tmp_path / 'approval_hooks.py'}:hooks",
    ]
    first = runner.invoke(app, [*args, "--store", store, "-c", "c1"], input="I'm Ann\n")
    assert first.exit_code == 3 and "run again with --store, -c c1 and --resume JSON" in first.stderr
    script.write_text(json.dumps([reply("ask_email", "Approved! Your email?"), DONE]))
    resumed = runner.invoke(
        app, [*args, "--store", store, "-c", "c1", "--resume", '{"approved_by": "Bo"}'], input="ann@example.com\n"
    )
    turns = [json.loads(line) for line in resumed.stdout.splitlines()]
    assert resumed.exit_code == 0, resumed.output
    assert [t["message"] for t in turns] == ["Approved! Your email?", "All set. Bye!"]
    assert turns[0]["context"]["approved_by"] == "Bo"
    again = runner.invoke(app, [*args, "--store", store, "-c", "c1", "--resume", "{}"], input="")
    assert again.exit_code == 1 and "has ended" in again.stderr
    bad = runner.invoke(app, [*args, "--resume", "[1]"], input="")
    assert bad.exit_code == 2 and "--resume takes a JSON object" in bad.stderr
    fresh = runner.invoke(app, [*args, "--resume", "{}"], input="")
    assert fresh.exit_code == 2 and "the conversation is not paused" in fresh.stderr


# -- the chat as people use it ------------------------------------------------------------------


def test_after_the_end_the_chat_stays_open_and_says_how_to_leave(definition, tmp_path):
    text = "I'm Ann\nann@example.com\none more thing\n/history\n/back\n/state\n"
    result = chat(definition, tmp_path, [GREETING, NAME, DONE], text)
    assert result.exit_code == 0, result.output
    ended = result.stdout.partition("All set. Bye!")[2]
    assert "The conversation has ended. /history, /save FILE and /back still work; /quit or Ctrl-D leaves." in ended
    assert result.stderr.count("error:") == 1 and "error: the conversation has ended" in result.stderr
    assert "you> ann@example.com" in ended and "bot> All set. Bye! (done)" in ended, "/history after the end"
    assert "Undone: back in state ask_email." in ended and "ask_email: Ask for the email" in ended


def test_continuing_a_paused_stored_conversation_shows_the_pause_again(paused_definition, tmp_path):
    kept = ["--hooks", f"{tmp_path / 'approval_hooks.py'}:hooks", "--store", f"sqlite://{tmp_path / 's.db'}", "-c", "p"]
    first = chat(paused_definition, tmp_path, [GREETING, NAME], "I'm Ann\n", *kept)
    assert "paused: staff approval needed" in first.stdout
    again = chat(paused_definition, tmp_path, [DONE], "/quit\n", *kept)
    assert again.exit_code == 0, again.output
    shown = again.stdout.split("Continuing conversation p: state ask_email, 2 exchanges.")[1]
    assert "paused: staff approval needed" in shown and '{"name": "Ann"}' in shown
    assert "Type /resume JSON (for example /resume {}) to continue." in shown


# -- files the chat writes ---------------------------------------------------------------------


def test_saved_conversations_are_private_files_in_private_folders(definition, tmp_path):
    old = os.umask(0)  # what a plain open() would make readable by everyone
    try:
        existing = tmp_path / "shared.json"
        existing.write_text("{}")
        existing.chmod(0o644)
        text = f"I'm Ann\n/save {tmp_path / 'new' / 'deeper' / 'conv.json'}\n/save {existing}\n"
        result = chat(definition, tmp_path, [GREETING, NAME], text)
    finally:
        os.umask(old)
    assert result.exit_code == 0 and result.stdout.count("saved to") == 2, result.output
    assert stat.S_IMODE((tmp_path / "new" / "deeper" / "conv.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600, "a file written over is private too"
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "deeper").stat().st_mode) == 0o700


def test_recorded_cassettes_are_private_files_in_private_folders(definition, tmp_path):
    cassette = tmp_path / "rec" / "session.json"
    old = os.umask(0)
    try:
        result = chat(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--record", str(cassette))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert len(json.loads(cassette.read_text())["interactions"]) == 2
    assert stat.S_IMODE(cassette.stat().st_mode) == 0o600 and stat.S_IMODE(cassette.parent.stat().st_mode) == 0o700


# -- tools in the terminal ----------------------------------------------------------------------

TOOL_HOOKS = """
from llm_fsm import Hooks

hooks = Hooks()


@hooks.tool()
def lookup(name: str) -> dict:
    return {"member": name, "level": "gold"}


@hooks.tool()
def wipe(name: str) -> str:
    open(__file__ + ".wiped", "a").write(name + "|")
    return "wiped"
"""


@pytest.fixture
def tool_definition(tmp_path):
    data = json.loads(json.dumps(OPEN))
    data["tools"] = {"lookup": {"description": "Find a member"}, "wipe": {"approval": "always"}}
    data["states"]["ask_email"]["tools"] = ["lookup", "wipe"]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(data))
    (tmp_path / "tool_hooks.py").write_text(TOOL_HOOKS)
    return path


def test_the_chat_shows_tool_calls_and_asks_before_a_call_that_needs_approval(tool_definition, tmp_path):
    hooks = f"{tmp_path / 'tool_hooks.py'}:hooks"
    replies = [
        GREETING,
        NAME,
        {"tool_calls": [{"name": "lookup", "arguments": {"name": "Ann"}}]},
        reply("ask_email", "You are a gold member. Email?"),
        {"tool_calls": [{"name": "wipe", "arguments": {"name": "Ann"}}]},
        reply("ask_email", "Not wiped. Email?"),
        {"tool_calls": [{"name": "wipe", "arguments": {"name": "Ann"}}]},
        reply("ask_email", "Wiped. Email?"),
    ]
    text = "I'm Ann\nmy level?\n/why\nwipe me\nn\nnot today\nwipe me\ny\n"
    result = chat(tool_definition, tmp_path, replies, text, "--hooks", hooks)
    out = result.stdout
    assert result.exit_code == 0, result.output
    assert '🔧 lookup({"name": "Ann"}) → {"member": "Ann", "level": "gold"}' in out
    assert "1 tool call (/why)" in out and "Tool calls of the last turn:" in out
    assert 'approval needed: the tool wipe wants to run with {"name": "Ann"}' in out
    assert "Not wiped. Email?" in out and "Wiped. Email?" in out
    assert (tmp_path / "tool_hooks.py.wiped").read_text() == "Ann|"  # ran once: after the "y", not the "n"


def test_an_approval_takes_the_yes_and_no_of_the_definitions_language(tool_definition, tmp_path):
    data = json.loads(tool_definition.read_text()) | {"language": "it"}
    tool_definition.write_text(json.dumps(data))
    hooks = f"{tmp_path / 'tool_hooks.py'}:hooks"
    wipe = {"tool_calls": [{"name": "wipe", "arguments": {"name": "Ann"}}]}
    replies = [GREETING, NAME, wipe, reply("ask_email", "Not wiped. Email?"), wipe, reply("ask_email", "Wiped.")]
    result = chat(tool_definition, tmp_path, replies, "I'm Ann\nwipe me\nno\n\nwipe me\nsì\n", "--hooks", hooks)
    assert result.exit_code == 0, result.output
    assert "approve? [y/n, sì/no]" in result.stdout and "Still waiting" not in result.stdout
    assert "Not wiped. Email?" in result.stdout and "Wiped." in result.stdout
    assert (tmp_path / "tool_hooks.py.wiped").read_text() == "Ann|"  # ran once: after the "sì", not the "no"


def test_an_approval_can_be_answered_later_and_back_does_not_undo_a_call_that_ran(tool_definition, tmp_path):
    hooks = f"{tmp_path / 'tool_hooks.py'}:hooks"
    replies = [
        GREETING,
        NAME,
        {"tool_calls": [{"name": "wipe", "arguments": {"name": "Ann"}}]},
        reply("ask_email", "Wiped. Email?"),
    ]
    text = "I'm Ann\nwipe me\nmaybe\nhello?\ny\n/back\n"
    result = chat(tool_definition, tmp_path, replies, text, "--hooks", hooks)
    assert result.exit_code == 0, result.output
    assert "Still waiting for approval: answer y/n." in result.stdout
    assert "Waiting for approval: type y or n" in result.stderr  # "hello?" is not an answer
    assert "Wiped. Email?" in result.stdout
    assert "/back cannot undo the call to 'wipe': it was approved and ran" in result.stderr
    assert (tmp_path / "tool_hooks.py.wiped").read_text() == "Ann|"


def test_a_call_approved_before_the_session_stopped_is_not_asked_again(tool_definition, tmp_path):
    # A process that died while an approved call ran leaves it saved as "running": the decision was made
    # (and the call may have run), so continuing goes on with it instead of asking y/n a second time.
    from llm_fsm.store import open_store

    url = f"sqlite://{tmp_path / 's.db'}"
    kept = ["--hooks", f"{tmp_path / 'tool_hooks.py'}:hooks", "--store", url, "-c", "w"]
    replies = [GREETING, NAME, {"tool_calls": [{"name": "wipe", "arguments": {"name": "Ann"}}]}]
    first = chat(tool_definition, tmp_path, replies, "I'm Ann\nwipe me\n", *kept)
    assert first.exit_code == 0 and "approve? [y/n]" in first.stdout, first.output
    store = open_store(url)
    record = store.load("w")
    pending = record.snapshot.pending
    running = pending.model_copy(update={"tool_call": {**pending.tool_call, "approval": "running"}})
    store.save("w", record.snapshot.model_copy(update={"pending": running}), expected_version=record.version)
    store.close()
    again = chat(tool_definition, tmp_path, [reply("ask_email", "It may have run. Email?")], "n\n", *kept)
    assert again.exit_code == 0, again.output
    assert "approve? [y/n]" not in again.stdout and "interrupted: the approved call to wipe" in again.stdout
    assert "It may have run. Email?" in again.stdout


def test_an_opening_the_state_cannot_write_is_one_error_and_exit_1(tmp_path):
    # the state's own opening reads a key no context gives: it fails the same way at every try, so the chat
    # says so once and leaves, instead of trying it again before each message typed
    data = json.loads(json.dumps(OPEN))
    data["states"]["ask_name"]["opening"] = "Welcome back, {{ name }}!"
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(data))
    result = chat(path, tmp_path, [], "hello\nhello again\n")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("error:") == 1 and "'name' is undefined" in result.stderr
    assert "tried again" not in result.stderr and "bot>" not in result.stdout
    passed = chat(path, tmp_path, [], "", "--context", '{"name": "Ann"}')  # with the key, it opens
    assert passed.exit_code == 0 and "Welcome back, Ann!" in passed.stdout
