"""--store and --conversation for run and chat, and the conversations command group."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llm_fsm.cli import app
from llm_fsm.store import open_store
from tests.cli.test_chat import OPEN
from tests.conftest import reply
from tests.store.test_store import url_for

runner = CliRunner()
GREETING = reply("ask_name", "Hello! Name?")
NAME = reply("ask_email", "Thanks Ann! Email?", name="Ann")
DONE = reply("done", "All set!", email="ann@example.com")


@pytest.fixture
def setup(tmp_path):
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    return definition, f"sqlite://{tmp_path / 'store.db'}"


def run(definition, tmp_path, replies, text, *extra):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    args = ["run", str(definition), "-m", f"scripted:{script}", *extra]
    result = runner.invoke(app, args, input=text)
    return result, [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_run_continues_a_stored_conversation(setup, tmp_path):
    definition, store = setup
    first, turns = run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "--conversation", "c1")
    assert first.exit_code == 0, first.output
    assert [t["turn"] for t in turns] == [0, 1]
    again, turns = run(definition, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1")
    assert again.exit_code == 0, again.output
    assert [t["turn"] for t in turns] == [2], "no new greeting; turns keep counting"
    assert turns[0]["previous_state"] == "ask_email" and turns[0]["context"] == {
        "name": "Ann",
        "email": "ann@example.com",
    }
    record = open_store(store).load("c1")
    assert record.version == 3 and [e.user for e in record.snapshot.history] == [None, "I'm Ann", "ann@example.com"]
    ended, _ = run(definition, tmp_path, [DONE], "more\n", "--store", store, "-c", "c1")
    assert ended.exit_code == 1 and "has ended" in ended.stderr


def test_the_default_store_is_sqlite_under_llm_fsm_home(setup, tmp_path, monkeypatch):
    definition, _ = setup
    monkeypatch.setenv("LLM_FSM_HOME", str(tmp_path / "home"))
    result, turns = run(definition, tmp_path, [GREETING], "", "--conversation", "mine")
    assert result.exit_code == 0 and len(turns) == 1
    assert open_store(f"sqlite://{tmp_path / 'home' / 'conversations.db'}").load("mine") is not None


def test_a_store_without_an_id_gets_a_new_id(setup, tmp_path):
    definition, store = setup
    result, _ = run(definition, tmp_path, [GREETING], "", "--store", store)
    assert "conversation: " in result.stderr and "--conversation" in result.stderr
    new_id = result.stderr.split("conversation: ")[1].split()[0]
    assert open_store(store).load(new_id) is not None


def test_a_busy_conversation_is_a_clear_error_after_the_wait(setup, tmp_path):
    definition, store = setup
    with open_store(store).lock("busy", timeout=1):
        result, _ = run(definition, tmp_path, [GREETING], "", "--store", store, "-c", "busy", "--wait", "0.2")
    assert result.exit_code == 1 and "in use by another turn (waited 0.2 s)" in result.stderr
    assert "Traceback" not in result.output


def test_bad_store_urls_and_ids_are_usage_errors(setup, tmp_path):
    definition, _ = setup
    result, _ = run(definition, tmp_path, [GREETING], "", "--store", "nosuch://x", "-c", "a")
    assert result.exit_code == 2 and "unknown store URL" in result.stderr
    result, _ = run(definition, tmp_path, [GREETING], "", "--store", f"sqlite://{tmp_path / 's.db'}", "-c", "../x")
    assert result.exit_code == 2 and "invalid conversation id" in result.stderr


def test_chat_continues_a_stored_conversation(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c2")
    script = tmp_path / "chat.json"
    script.write_text(json.dumps([DONE]))
    args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", "c2"]
    result = runner.invoke(app, args, input="ann@example.com\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Continuing conversation c2: state ask_email, 2 exchanges." in result.stdout
    assert "Thanks Ann! Email?" in result.stdout and "All set!" in result.stdout
    assert open_store(store).load("c2").snapshot.status == "ended"


def test_chat_back_is_saved_too(setup, tmp_path):
    definition, store = setup
    script = tmp_path / "chat.json"
    script.write_text(json.dumps([GREETING, NAME]))
    args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", "c3"]
    result = runner.invoke(app, args, input="I'm Ann\n/back\n/quit\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert open_store(store).load("c3").snapshot.state == "ask_name"


def test_conversations_commands(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "keep")
    listed = runner.invoke(app, ["conversations", "list", "--store", store, "--json"])
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["id"], row["state"], row["turns"], row["version"]) == ("keep", "ask_email", 1, 2)
    table = runner.invoke(app, ["conversations", "list", "--store", store], env={"COLUMNS": "200"})
    assert "keep" in table.stdout and "ask_email" in table.stdout
    shown = json.loads(runner.invoke(app, ["conversations", "show", "keep", "--store", store]).stdout)
    assert shown["context"] == {"name": "Ann"} and shown["version"] == 2 and len(shown["history"]) == 2
    assert runner.invoke(app, ["conversations", "show", "nope", "--store", store]).exit_code == 1
    assert (
        "deleted 0 conversations"
        in runner.invoke(app, ["conversations", "prune", "--older-than", "30d", "--store", store]).stdout
    )
    assert (
        "deleted 1 conversation "
        in runner.invoke(app, ["conversations", "prune", "--older-than", "0s", "--store", store]).stdout
    )
    bad = runner.invoke(app, ["conversations", "prune", "--older-than", "soon", "--store", store])
    assert bad.exit_code == 2 and "not a duration" in bad.output
    run(definition, tmp_path, [GREETING], "", "--store", store, "-c", "gone")
    assert runner.invoke(app, ["conversations", "delete", "gone", "--store", store]).stdout.strip() == "deleted gone"
    assert runner.invoke(app, ["conversations", "delete", "gone", "--store", store]).exit_code == 1


def test_conversations_show_masks_secret_looking_values_unless_asked(setup, tmp_path):
    import llm_fsm
    from llm_fsm.testing import ScriptedLLM

    definition, store = setup
    conversation = llm_fsm.Conversation(llm_fsm.load(definition), ScriptedLLM(), context={"name": "Ann"})
    conversation.update_context({"password": "hunter2", "note": "4111 1111 1111 1111", "api_key": "sk-live-123"})
    open_store(store).save("s1", conversation.snapshot())
    shown = runner.invoke(app, ["conversations", "show", "s1", "--store", store])
    assert shown.exit_code == 0, shown.output
    context = json.loads(shown.stdout)["context"]
    assert context == {"name": "Ann", "password": "[masked]", "note": "[masked]", "api_key": "[masked]"}
    assert "hunter2" not in shown.stdout and "sk-live-123" not in shown.stdout
    revealed = runner.invoke(app, ["conversations", "show", "s1", "--store", store, "--show-secrets"])
    assert json.loads(revealed.stdout)["context"]["password"] == "hunter2"


def test_conversations_show_masks_the_payload_of_a_pause(setup, tmp_path):
    definition, store = setup
    (tmp_path / "pause_hooks.py").write_text(
        "from llm_fsm import Break, Hooks\nhooks = Hooks()\n\n\n"
        "@hooks.on('context_update', keys=['name'])\n"
        "def ask(*, update):\n"
        "    raise Break('check the card', {'card_number': '4111111111111111', 'who': update['name']})\n"
    )
    hooks = f"{tmp_path / 'pause_hooks.py'}:hooks"
    result, _ = run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "p", "--hooks", hooks)
    assert "paused: check the card" in result.stderr, result.output
    pending = json.loads(runner.invoke(app, ["conversations", "show", "p", "--store", store]).stdout)["pending"]
    assert pending["payload"] == {"card_number": "[masked]", "who": "Ann"}


@pytest.mark.parametrize("kind", ["sqlite", "file", "postgres"])
def test_conversations_unlock_frees_a_conversation_left_locked(setup, tmp_path, kind, request):
    definition, _ = setup
    store = url_for(kind, tmp_path, request)
    held = open_store(store)
    lock = held.lock("stuck", timeout=1)
    lock.__enter__()  # a holder that never lets go (the SIGKILL case is in test_store_locks.py)
    result = runner.invoke(app, ["conversations", "unlock", "stuck", "--store", store])
    assert result.exit_code == 0 and result.stdout == "unlocked stuck\n", result.output
    again = runner.invoke(app, ["conversations", "unlock", "stuck", "--store", store])
    assert again.stdout == "stuck was not locked\n"
    turn, lines = run(definition, tmp_path, [GREETING], "", "--store", store, "-c", "stuck", "--wait", "0.5")
    assert turn.exit_code == 0 and lines[0]["message"] == "Hello! Name?"
    lock.__exit__(None, None, None)  # the stuck holder goes away at last (its release finds another turn's lock)
    held.close()


def _edit_definition(definition, edit):
    data = json.loads(definition.read_text())
    edit(data)
    definition.write_text(json.dumps(data))


def test_run_after_a_structure_change_names_the_cli_option(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c1")
    _edit_definition(definition, lambda d: d["states"]["ask_email"]["required_context_keys"].append("phone"))
    refused, _ = run(definition, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1")
    assert refused.exit_code == 2 and "keys, checks or settings of state 'ask_email' changed" in refused.stderr
    assert "--allow-changed-definition" in refused.stderr and "allow_changed_definition=True" not in refused.stderr
    allowed, turns = run(
        definition, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1", "--allow-changed-definition"
    )
    assert allowed.exit_code == 0, allowed.output
    assert [t["turn"] for t in turns] == [2]


def test_run_after_a_prose_edit_continues_unless_strict(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c1")
    _edit_definition(
        definition, lambda d: d["states"]["ask_email"].update(purpose="Get the email", instructions="Be brief")
    )
    strict, _ = run(
        definition, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1", "--strict-definition"
    )
    assert strict.exit_code == 2 and "descriptions or instructions of state 'ask_email' changed" in strict.stderr
    result, turns = run(definition, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1")
    assert result.exit_code == 0, result.output
    assert [t["turn"] for t in turns] == [2] and turns[0]["state"] == "done"


def test_a_conversation_saved_with_another_definition_says_so(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c1")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(definition.read_text()), "name": "other"}))
    refused, _ = run(other, tmp_path, [DONE], "ann@example.com\n", "--store", store, "-c", "c1")
    assert refused.exit_code == 2
    assert f"this conversation was saved with another definition ('{OPEN['name']}'), not 'other'" in refused.stderr
    assert "removed" not in refused.stderr and "changed since" not in refused.stderr


def test_a_prose_edit_refused_by_strict_definition_says_so_and_suggests_no_other_option(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c1")
    _edit_definition(definition, lambda d: d["states"]["ask_email"].update(purpose="Get the email"))
    args = ["--store", store, "-c", "c1", "--strict-definition"]
    strict, _ = run(definition, tmp_path, [DONE], "ann@example.com\n", *args)
    assert strict.exit_code == 2 and "refused because of --strict-definition" in strict.stderr
    assert "--allow-changed-definition" not in strict.stderr
    _edit_definition(definition, lambda d: d["states"]["ask_email"]["required_context_keys"].append("phone"))
    strict, _ = run(definition, tmp_path, [DONE], "ann@example.com\n", *args)
    assert strict.exit_code == 2 and "(refused because of --strict-definition)" in strict.stderr
    assert "--allow-changed-definition" not in strict.stderr


@pytest.mark.parametrize("command", ["run", "chat"])
def test_strict_and_allow_changed_definition_together_are_a_usage_error(setup, tmp_path, command):
    definition, _ = setup
    (tmp_path / "replies.json").write_text(json.dumps([GREETING]))
    args = [command, str(definition), "-m", f"scripted:{tmp_path / 'replies.json'}"]
    result = runner.invoke(app, [*args, "--strict-definition", "--allow-changed-definition"], input="")
    assert result.exit_code == 2 and "contradict each other" in result.output, result.output
    assert "Traceback" not in result.output


def test_chat_takes_allow_changed_definition(setup, tmp_path):
    definition, store = setup
    run(definition, tmp_path, [GREETING, NAME], "I'm Ann\n", "--store", store, "-c", "c2")
    _edit_definition(definition, lambda d: d["states"]["ask_email"]["transitions"][0].update(priority=7))
    script = tmp_path / "chat.json"
    script.write_text(json.dumps([DONE]))
    args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", "c2"]
    refused = runner.invoke(app, args, input="ann@example.com\n", env={"COLUMNS": "200"})
    assert refused.exit_code == 2 and "transitions of state 'ask_email' changed" in refused.stderr
    assert "--allow-changed-definition" in refused.stderr
    allowed = runner.invoke(
        app, [*args, "--allow-changed-definition"], input="ann@example.com\n", env={"COLUMNS": "200"}
    )
    assert allowed.exit_code == 0, allowed.output
    assert open_store(store).load("c2").snapshot.status == "ended"


def test_chat_load_honours_the_definition_options(setup, tmp_path):
    definition, _ = setup
    saved = tmp_path / "saved.json"
    chat_args = ["chat", str(definition), "-m", f"scripted:{tmp_path / 'chat.json'}"]
    (tmp_path / "chat.json").write_text(json.dumps([GREETING, NAME, DONE]))
    runner.invoke(app, chat_args, input=f"I'm Ann\n/save {saved}\n", env={"COLUMNS": "200"})
    _edit_definition(definition, lambda d: d["states"]["ask_email"]["transitions"][0].update(priority=7))
    (tmp_path / "chat.json").write_text(json.dumps([GREETING, DONE]))
    text = f"/load {saved}\n/state\n"
    refused = runner.invoke(app, chat_args, input=text, env={"COLUMNS": "200"})
    assert refused.exit_code == 0 and "transitions of state 'ask_email' changed" in refused.stderr
    assert "--allow-changed-definition" in refused.stderr and "loaded" not in refused.stdout
    allowed = runner.invoke(app, [*chat_args, "--allow-changed-definition"], input=text, env={"COLUMNS": "200"})
    assert allowed.exit_code == 0 and f"loaded {saved}: state ask_email" in allowed.stdout, allowed.output


def chat_with_another_writer(tmp_path, monkeypatch, text, when):
    """A chat on conversation "c" of a SQLite store, while another process takes three turns of it just
    before the chat reads the line ``when``; the chat's result, and the store."""
    import llm_fsm
    from llm_fsm.cli import chat as chat_module
    from llm_fsm.store import advance
    from llm_fsm.testing import ScriptedLLM
    from tests.store.test_store import CHAT

    definition = tmp_path / "chat.json"
    definition.write_text(json.dumps(CHAT))
    store = f"sqlite://{tmp_path / 'store.db'}"
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("chat", f"reply {i}") for i in range(5)]))
    original, done = chat_module._read, []

    def read(prompt, before=None):
        line = original(prompt, before)
        if line is not None and line.strip() == when and not done:
            done.append(True)
            other = ScriptedLLM([reply("chat", f"elsewhere reply {i}") for i in range(3)])
            with open_store(store) as opened:
                for i in range(3):
                    advance(opened, "c", llm_fsm.load(CHAT), other, f"elsewhere {i}")
        return line

    monkeypatch.setattr(chat_module, "_read", read)
    args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", "c"]
    result = runner.invoke(app, args, input=text, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result, open_store(store)


def said(opened):
    page = opened.history("c", limit=100)
    return [e.user for _, e in page.exchanges]


@pytest.mark.parametrize("command", ["/back", "/reset", "/load saved.json"])
def test_chat_back_reset_and_load_refuse_to_drop_turns_saved_elsewhere(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    text = f"one\ntwo\n/save saved.json\n{command}\n/quit\n"
    result, opened = chat_with_another_writer(tmp_path, monkeypatch, text, command)
    name = command.split()[0]
    assert "the conversation changed elsewhere since this chat last saw it" in result.stderr
    assert f"{name} would drop what it saved, so nothing changed" in result.stderr
    assert said(opened)[-5:] == ["one", "two", "elsewhere 0", "elsewhere 1", "elsewhere 2"]


def test_chat_back_goes_no_further_back_than_turns_taken_up_from_elsewhere(tmp_path, monkeypatch):
    text = "one\ntwo\nthree\n/back\n/back\n/quit\n"
    result, opened = chat_with_another_writer(tmp_path, monkeypatch, text, "three")
    assert "Nothing to undo." in result.stdout
    assert said(opened)[-5:] == ["one", "two", "elsewhere 0", "elsewhere 1", "elsewhere 2"]


def test_chat_back_after_load_restores_the_whole_long_conversation(tmp_path, monkeypatch):
    from tests.store.test_store import CHAT

    monkeypatch.chdir(tmp_path)
    definition = tmp_path / "chat.json"
    definition.write_text(json.dumps(CHAT))
    store = f"sqlite://{tmp_path / 'store.db'}"
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("chat", f"reply {i}") for i in range(30)]))

    def chat(cid, text):
        args = ["chat", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", cid]
        result = runner.invoke(app, args, input=text, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return result

    chat("b", "another\n/save b.json\n/quit\n")
    # longer than the tail a stored conversation carries: its first exchanges are only in the store's rows
    messages = [f"m{i}" for i in range(25)]
    result = chat("c", "".join(f"{m}\n" for m in messages) + "/load b.json\n/back\n/quit\n")
    assert "Undone" in result.stdout, result.stderr
    with open_store(store) as opened:
        assert [e.user for _, e in opened.history("c", limit=100).exchanges][-25:] == messages
        assert opened.load("c").snapshot.history_start > 0
