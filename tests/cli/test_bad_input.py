"""Bad input to every command, every option that takes a value, chat's slash commands and the API.

A command given a bad value prints exactly one ``error:`` line naming what was wrong (the option or
the value), exits 2 and never shows a traceback; chat goes on after a misused slash command. The
commands and their options are read from the Typer app itself, so an option added later without
bad values in ``BAD`` fails ``test_every_option_that_takes_a_value_has_bad_values``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.cli.chat import COMMANDS
from llm_fsm.errors import ConversationError, DefinitionError, LLMError, StoreError
from llm_fsm.store import open_store
from llm_fsm.store.base import public_url
from llm_fsm.testing import ScriptedLLM
from llm_fsm.testing.cassette import ReplayLLM
from llm_fsm.testing.conversation_tests import read
from tests.cli.test_chat import HOOKS_FILE, OPEN
from tests.conftest import reply

runner = CliRunner()

GREETING = reply("ask_name", "Hello! What's your name?")
NAME = reply("ask_email", "Thanks Ann! Your email?", name="Ann")

# A good invocation of each command; {arg} is its positional argument (GOOD_ARG, or the bad value).
BASE = {
    "run": ["run", "{arg}", "-m", "scripted:{script}", "--input", "{inputs}"],
    "chat": ["chat", "{arg}", "-m", "scripted:{script}"],
    "validate": ["validate", "{arg}"],
    "graph": ["graph", "{arg}"],
    "schema": ["schema"],
    "paths": ["paths", "{arg}"],
    "test": ["test", "{arg}"],
    "eval": ["eval", "{arg}", "-m", "scripted:{script}", "--scripts", "{scripts}"],
    "conversations list": ["conversations", "list", "--store", "{store}"],
    "conversations show": ["conversations", "show", "{arg}", "--store", "{store}"],
    "conversations delete": ["conversations", "delete", "{arg}", "--store", "{store}"],
    "conversations unlock": ["conversations", "unlock", "{arg}", "--store", "{store}"],
    "conversations prune": ["conversations", "prune", "--older-than", "30d", "--store", "{store}"],
    "serve": ["serve", "{arg}", "-m", "scripted:{script}", "--store", "{store}"],
    "new": ["new", "{arg}"],
    "edit": ["edit", "{arg}", "--no-browser"],
}
GOOD_ARG = {
    "test": "{tests}",
    "conversations show": "c1",
    "conversations delete": "c1",
    "conversations unlock": "c1",
    "new": "shop",
}  # else the definition

# and then a file of another kind; FIFOs and devices are in tests/definition/test_wrong_kind_files.py (a child process)
NO_FILE = ["{missing}", "{folder}", "{unreadable}", "{binary}", "{empty}", "{oversized}"]
LIMIT = 4096  # LLM_FSM_MAX_FILE_BYTES where {oversized} is given: the other files of the sweep are smaller
NOT_A_DEFINITION = [*NO_FILE, "{cassette}"]
NOT_A_CASSETTE = [*NO_FILE, "{definition}"]
NOT_A_SCRIPT = [f"scripted:{name}" for name in NOT_A_CASSETTE]
NOT_WRITABLE = ["{folder}", "{binary}/under/a/file.json"]
BAD_STORES = ["nosuch://x", "redis://localhost:notaport/0", "redis://localhost:6379/abc", "file://relative/dir",
              "sqlite://rel.db", "sqlite:", "memory:x", "conversations.db", "",
              "postgresql://127.0.0.1:1/db"]  # fmt: skip
BAD_IDS = ["../x", "", "x" * 1000]
PROVIDER = {
    "api_base": ["not a url", "ftp://host/v1", "http://", "http://host:notaport/v1", ""],
    "api_key": [""],
    "timeout": ["0", "-1", "soon"],
    "max_retries": ["-1", "many"],
    "temperature": ["-0.5", "3", "warm"],
    "response_format": ["xml", ""],
    "max_tokens": ["0", "-5", "many"],
    "tool_calling": ["sometimes", ""],
    "prompt_order": ["first", ""],
}
BAD_HOOKS = ["nosuch_module:hooks", "{missing}.py:hooks", "{definition}:hooks", "{folder}.py:hooks", "no-name", ":", ""]
BAD_MCP = ["no-such-command-xyz", "", "http://127.0.0.1:9/mcp"]
CONVERSATION = {
    "store": BAD_STORES,
    "conversation": BAD_IDS,
    "wait": ["-1", "soon"],
    "hooks": BAD_HOOKS,
    "mcp": BAD_MCP,
}

BAD: dict[tuple[str, str], list[str]] = {
    **{("run", name): values for name, values in {**PROVIDER, **CONVERSATION}.items()},
    ("run", "definition"): NOT_A_DEFINITION,
    ("run", "model"): ["", *NOT_A_SCRIPT],
    ("run", "resume"): ["[1]", "{", '"yes"', ""],
    ("run", "input"): ["{missing}", "{folder}", "{unreadable}", "{binary}", "{oversized}"],
    ("run", "history_window"): ["-1", "six"],
    ("run", "max_corrections"): ["-1"],
    ("run", "record"): NOT_WRITABLE,
    ("run", "replay"): NOT_A_CASSETTE,
    **{("chat", name): values for name, values in {**PROVIDER, **CONVERSATION}.items()},
    ("chat", "definition"): NOT_A_DEFINITION,
    ("chat", "model"): ["", *NOT_A_SCRIPT],
    ("chat", "state"): ["nosuch", ""],
    ("chat", "context"): ["{", "[1]", '"text"', '{"a": NaN}', "[" * 100_000, ""],
    ("chat", "record"): NOT_WRITABLE,
    ("validate", "files"): ["{missing}", "{unreadable}", "{oversized}"],  # a folder stands for its definitions
    ("validate", "output_format"): ["xml"],
    ("graph", "definition"): NOT_A_DEFINITION,
    ("graph", "output_format"): ["png"],
    ("graph", "output"): NOT_WRITABLE,
    ("schema", "output"): NOT_WRITABLE,
    ("paths", "definition"): NOT_A_DEFINITION,
    ("paths", "write_tests"): NOT_WRITABLE,
    ("paths", "seed"): ["zero"],
    ("paths", "hooks"): BAD_HOOKS,
    **{("test", name): values for name, values in PROVIDER.items()},
    ("test", "paths"): [*NO_FILE, "{definition}", "{cassette}"],
    ("test", "model"): ["", *NOT_A_SCRIPT],
    ("test", "replay"): NOT_A_CASSETTE,
    ("test", "repeat"): ["0", "-1"],
    ("test", "min_pass"): ["0", "2"],
    ("test", "junit"): NOT_WRITABLE,
    # test loads --hooks only for files that name no hooks: hooks that do not load fail those files' cases
    # (exit 1, test_test_files.py); a spec that is not MODULE:NAME or FILE.py:NAME is a usage error at once
    ("test", "hooks"): [value for value in BAD_HOOKS if ":" not in value.strip(":")],
    **{("eval", name): values for name, values in PROVIDER.items()},
    ("eval", "paths"): [*NO_FILE, "{cassette}"],
    ("eval", "model"): ["", *NOT_A_SCRIPT],
    ("eval", "scripts"): ["{missing}", "{binary}", "{folder}"],
    ("eval", "repeat"): ["0", "-1"],
    ("eval", "json_out"): NOT_WRITABLE,
    ("conversations list", "store"): BAD_STORES,
    ("conversations show", "conversation_id"): BAD_IDS,
    ("conversations show", "store"): BAD_STORES,
    ("conversations delete", "conversation_id"): BAD_IDS,
    ("conversations delete", "store"): BAD_STORES,
    ("conversations unlock", "conversation_id"): BAD_IDS,
    ("conversations unlock", "store"): BAD_STORES,
    ("conversations prune", "older_than"): ["-1d", "soon", ""],
    ("conversations prune", "store"): BAD_STORES,
    **{("serve", name): values for name, values in PROVIDER.items()},
    ("serve", "definitions"): NOT_A_DEFINITION,
    ("serve", "model"): ["", *NOT_A_SCRIPT],
    ("serve", "hooks"): BAD_HOOKS,
    ("serve", "store"): BAD_STORES,
    ("serve", "host"): ["0.0.0.0", "example.com", ""],  # no tokens: loopback only
    ("serve", "port"): ["0", "70000", "http"],
    ("serve", "tokens_file"): NO_FILE,
    ("serve", "busy"): ["wait", ""],
    ("serve", "wait"): ["-1", "soon"],
    ("serve", "workers"): ["0", "two"],
    ("serve", "max_body"): ["0", "many"],
    **{("edit", name): values for name, values in PROVIDER.items()},
    ("edit", "file"): ["{folder}", "{unreadable}", "{oversized}", "{missing}/bot.json", "{binary}/under.json"],
    ("edit", "model"): ["", *NOT_A_SCRIPT],
    ("edit", "port"): ["-1", "70000", "http"],
    ("edit", "hooks"): BAD_HOOKS,
    ("serve", "cors_origin"): ["", "app.example", "https://app.example/path", "ftp://app.example"],
    ("serve", "history_window"): ["-1", "six"],
    ("serve", "max_corrections"): ["-1"],
    ("new", "name"): ["my bot", "1st", "../x", "bot.json", "x" * 65, ""],
    ("new", "folder"): ["{binary}", "{binary}/under"],
}


def value_params() -> dict[tuple[str, str], list[str]]:
    """(command, parameter) → how it is written, for every parameter of the app that takes a value."""
    found: dict[tuple[str, str], list[str]] = {}

    def walk(command, path: str) -> None:  # type: ignore[no-untyped-def]
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        for param in command.params:
            takes_value = param.param_type_name == "argument" or not (param.is_flag or param.count)
            if takes_value and path:
                found[(path, param.name)] = list(param.opts)

    walk(typer.main.get_command(app), "")
    return found


def test_every_option_that_takes_a_value_has_bad_values():
    params = value_params()
    assert set(params) - set(BAD) == set(), "options without bad values in BAD"
    assert set(BAD) - set(params) == set(), "BAD names options the app does not have"
    assert all(BAD.values())


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Every kind of file the sweep gives, in a folder of its own that is also the current folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_FSM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLM_FSM_MODEL", raising=False)
    monkeypatch.delenv("LLM_FSM_SERVER_TOKENS", raising=False)
    import uvicorn

    def serving(*args: object, **kwargs: object) -> None:
        raise AssertionError("serve accepted a bad value and started a server")

    monkeypatch.setattr(uvicorn, "run", serving)
    monkeypatch.setattr(uvicorn.Server, "run", serving)  # edit runs its own Server on the socket it bound
    (tmp_path / "signup.json").write_text(json.dumps(OPEN))
    (tmp_path / "script.json").write_text(json.dumps([GREETING, NAME]))
    (tmp_path / "inputs.txt").write_text("I'm Ann\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "signup.txt").write_text("I'm Ann\n")
    (tmp_path / "scripts" / "signup.json").write_text(json.dumps([GREETING, NAME]))
    (tmp_path / "cassette.json").write_text(json.dumps({"version": 1, "interactions": []}))
    steps = [{"user": None, "reply": GREETING, "expect": {"state": "ask_name"}}]
    test_file = {"cases": [{"name": "opening", "definition": "signup.json", "steps": steps}]}
    (tmp_path / "signup.test.json").write_text(json.dumps(test_file))
    (tmp_path / "binary.dat").write_bytes(b"\x00\x01\xff\xfe binary")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "oversized.json").write_text(json.dumps(OPEN) + " " * LIMIT)  # a definition, over the limit
    (tmp_path / "folder").mkdir()
    unreadable = tmp_path / "unreadable.json"
    unreadable.write_text(json.dumps(OPEN))
    unreadable.chmod(0)
    names = {
        "definition": "signup.json", "script": "script.json", "inputs": "inputs.txt", "cassette": "cassette.json",
        "tests": "signup.test.json", "binary": "binary.dat", "empty": "empty.json", "folder": "folder",
        "missing": "missing.json", "unreadable": "unreadable.json", "scripts": "scripts", "oversized": "oversized.json",
    }  # fmt: skip
    yield {key: str(tmp_path / name) for key, name in names.items()} | {"store": f"sqlite://{tmp_path / 's.db'}"}
    unreadable.chmod(0o600)


def fill(template: str, files: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``files`` replaced (other braces, as in JSON, stay)."""
    for name, value in files.items():
        template = template.replace(f"{{{name}}}", value)
    return template


def argv(command: str, param: str, value: str, files: dict[str, str]) -> list[str]:
    """The good invocation of ``command`` with ``value`` given to ``param``."""
    opts = value_params()[(command, param)]
    positional = not opts[0].startswith("-")
    arg = value if positional else fill(GOOD_ARG.get(command, "{definition}"), files)
    words = [fill(word, files | {"arg": arg}) for word in BASE[command]]
    return words if positional else [*words, opts[0], value]


CASES = [(command, param, value) for (command, param), values in BAD.items() for value in values]


@pytest.mark.parametrize(("command", "param", "template"), CASES, ids=[f"{c}-{p}-{v[:30]!r}" for c, p, v in CASES])
def test_a_bad_value_is_one_error_line_and_exit_2(files, command, param, template):
    if "{unreadable}" in template and os.access(files["unreadable"], os.R_OK):
        pytest.skip("this user can read a file whose mode is 000 (root)")
    value = fill(template, files)
    env = {"COLUMNS": "200"} | ({"LLM_FSM_MAX_FILE_BYTES": str(LIMIT)} if "{oversized}" in template else {})
    result = runner.invoke(app, argv(command, param, value, files), input="", env=env)
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    error_lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, output
    assert result.exit_code == 2, output
    named = (*value_params()[(command, param)], value, value.removeprefix("scripted:"))  # the option, or the file
    assert any(name in error_lines[0] for name in named), "the line names what is wrong"
    if "{oversized}" in template:  # and the limit, by the variable that sets it
        assert "over the limit of 4 KiB" in output and "(LLM_FSM_MAX_FILE_BYTES)" in output, output


# -- chat's slash commands ----------------------------------------------------------------------

SLASH = [
    "/load {missing}", "/load {folder}", "/load {definition}", "/load {cassette}", "/load {binary}",
    "/load {empty}", "/load {store_file}", "/load {sqlite_file}", "/load {unreadable}", "/load",
    "/save {folder}", "/save {binary}/x.json", "/save",
    "/resume notjson", "/resume [1]", "/resume {",
    "/back 999", "/context foo", '/context {"a": 1}', "/state ask_email", "/history 3", "/why not",
    "/reset now", "/help me", "/quit please", "/nosuch", "/stat",
]  # fmt: skip


def test_every_slash_command_has_bad_arguments():
    assert {line.split()[0] for line in SLASH} >= set(COMMANDS)


@pytest.fixture
def chat_files(files, tmp_path):
    """The sweep's files, a definition that pauses, and a file store's and a SQLite store's files."""
    data = json.loads(json.dumps(OPEN))
    data["states"]["ask_email"]["handlers"] = ["ask_staff"]
    (tmp_path / "approval.json").write_text(json.dumps(data))
    (tmp_path / "approval_hooks.py").write_text(HOOKS_FILE)
    store_file = tmp_path / "kept.json"
    store_file.write_text(json.dumps({"version": 1, "updated_at": 0, "snapshot": {}}))
    sqlite_file = tmp_path / "kept.db"
    open_store(f"sqlite://{sqlite_file}").close()
    return files | {"paused": str(tmp_path / "approval.json"), "hooks": f"{tmp_path / 'approval_hooks.py'}:hooks",
                    "store_file": str(store_file), "sqlite_file": str(sqlite_file)}  # fmt: skip


@pytest.mark.parametrize("template", SLASH)
def test_a_misused_slash_command_is_one_error_line_and_the_chat_goes_on(chat_files, template):
    if "{unreadable}" in template and os.access(chat_files["unreadable"], os.R_OK):
        pytest.skip("this user can read a file whose mode is 000 (root)")
    line = fill(template, chat_files)
    script = Path(chat_files["script"])
    script.write_text(json.dumps([GREETING, NAME]))
    args = ["chat", chat_files["paused"], "-m", f"scripted:{script}", "--hooks", chat_files["hooks"]]
    typed = f"I'm Ann\n{line}\n/state\n" if line.startswith("/resume") else f"{line}\n/state\n"  # paused first
    result = runner.invoke(app, args, input=typed, env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0 and "Traceback" not in result.stdout + result.stderr
    assert [e for e in result.stderr.splitlines() if e.startswith("error:")] == result.stderr.splitlines()[-1:]
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert ": Ask for" in result.stdout, "the chat went on to the next command (/state)"


# -- the API ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["redis://localhost:notaport/0", "redis://localhost:99999/0", "redis://", "redis://host/db0", "unix://",
     "file://relative/dir", "sqlite://rel.db", "sqlite:", "file:", "memory:x", "nosuch://x", "x.db", "",
     "sqlite:///tmp/x.db?mode=ro", "redis://localhost:6379/0?nosuch=1", "postgresql://localhost:notaport/db",
     "postgres://127.0.0.1:9/db?nosuch=1", "postgresql://127.0.0.1:9/db?schema=a;b",
     # with a password, which no message may show
     "mysql://bob:PW-7f3a9c@db.internal/bots", "sqlite://bob:PW-7f3a9c@host/x.db", "file://bob:PW-7f3a9c@host/dir",
     "sqlite://bob:PW-7f3a9c@host/x.db?mode=ro", "sqlite://bob:PW-7f3a9c@", "redis://bob:PW-7f3a9c@host:port/0",
     "redis://:PW-7f3a9c@host/db0", "postgresql://bob:PW-7f3a9c@localhost:notaport/db"],
)  # fmt: skip
def test_open_store_refuses_a_bad_url_with_a_store_error(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as info:
        open_store(url)
    assert repr(public_url(url)) in str(info.value) and "\n" not in str(info.value)
    assert "PW-7f3a9c" not in str(info.value)
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def test_a_relative_store_path_is_relative_to_the_current_folder_and_three_slashes_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_store("sqlite:rel.db").url == f"sqlite://{tmp_path / 'rel.db'}"
    assert open_store("file:rel/dir").url == f"file://{tmp_path / 'rel' / 'dir'}"
    assert open_store(f"sqlite://{tmp_path / 'abs.db'}").url == f"sqlite://{tmp_path / 'abs.db'}"
    assert open_store(f"sqlite://{tmp_path / 'with%20space.db'}").url == f"sqlite://{tmp_path / 'with space.db'}"
    with pytest.raises(StoreError) as info:
        open_store("file://relative/dir")
    assert "file:relative/dir" in str(info.value) and f"file://{tmp_path / 'relative' / 'dir'}" in str(info.value)


def test_the_default_store_url_is_absolute_even_when_llm_fsm_home_is_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_FSM_HOME", "my home")
    assert open_store().url == f"sqlite://{tmp_path / 'my home' / 'conversations.db'}"


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "No such file"), (b"\x00\xff", "binary"), (b"", "empty"), (b"{", "invalid JSON at line 1"),
     (json.dumps(OPEN).encode(), "is a definition, not a cassette"), (b'{"interactions": 3}', "'interactions' list"),
     (b'{"interactions": [{"messages": []}]}', "call 1 has no 'response'")],
)  # fmt: skip
def test_replay_of_a_file_that_is_not_a_cassette_is_an_llm_error_naming_it(tmp_path, content, says):
    path = tmp_path / "c.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LLMError) as info:
        ReplayLLM(path)
    assert str(path) in str(info.value) and says in str(info.value) and "\n" not in str(info.value)


def test_a_reply_script_that_is_not_one_is_an_llm_error_naming_it(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(OPEN))
    with pytest.raises(LLMError, match=r"s\.json is a definition, not a reply script"):
        ScriptedLLM.from_file(path)
    path.write_text("[1, 2]")
    with pytest.raises(LLMError, match="is not a reply script"):
        ScriptedLLM.from_file(path)


def test_a_file_of_another_kind_is_one_problem_for_the_loader_and_the_test_runner(tmp_path):
    cassette = tmp_path / "c.json"
    cassette.write_text(json.dumps({"version": 1, "interactions": []}))
    with pytest.raises(DefinitionError) as info:
        llm_fsm.load(cassette)
    (problem,) = info.value.problems
    assert problem.message == "this file is a cassette (recorded model calls), not a definition"
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(DefinitionError, match="the file is empty"):
        llm_fsm.load(tmp_path / "empty.json")
    with pytest.raises(DefinitionError) as info:
        read(tmp_path / "empty.json")
    assert len(info.value.problems) == 1 and "is not a test file: the file is empty" in str(info.value)


@pytest.mark.parametrize("value", ["{}", '{"state": 1}', 42, [1, 2]])
def test_restoring_what_is_not_a_snapshot_is_one_line_conversation_error(signup, value):
    with pytest.raises(ConversationError) as info:
        llm_fsm.Conversation.restore(value, signup, ScriptedLLM())
    assert "snapshot" in str(info.value) and "\n" not in str(info.value)
