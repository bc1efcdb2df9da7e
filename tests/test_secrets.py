"""Secret-looking values are masked in prompts, logs and displays; the library logs nothing by default."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.secrets import MASK, is_secret_key, looks_like_card, mask_text
from llm_fsm.testing import ScriptedLLM
from tests.cli.test_cli import command
from tests.conftest import ROOT, SIGNUP, reply

SECRETS = {
    "password": "hunter2-PASSWORD",
    "apiKey": "sk-APIKEY123",
    "payment": {"card_number": "4111 1111 1111 1111", "note": "5500-0000-0000-0004"},
    "member_code": "MEMBER-777",
    "name": "Ann",
}
VALUES = ["hunter2-PASSWORD", "sk-APIKEY123", "4111 1111 1111 1111", "5500-0000-0000-0004", "MEMBER-777"]


def definition(**fields):
    return llm_fsm.load({**json.loads(json.dumps(SIGNUP)), **fields})


@pytest.mark.parametrize(
    ("name", "secret"),
    [("password", True), ("user_password", True), ("apiKey", True), ("refresh_token", True), ("client_secret", True),
     ("credentials", True), ("cardNumber", True), ("cvv", True), ("pin", True), ("iban", True), ("session_id", True),
     ("name", False), ("email", False), ("author", False), ("passenger", False), ("pinned", False), ("topic", False)],
)  # fmt: skip
def test_secret_names(name, secret):
    assert is_secret_key(name) is secret


def test_card_numbers_are_recognised_by_luhn():
    assert looks_like_card("4111 1111 1111 1111") and looks_like_card("5500-0000-0000-0004")
    assert not looks_like_card("4111 1111 1111 1112") and not looks_like_card("12345") and not looks_like_card("x")


def test_prompts_mask_secret_values_and_the_definition_can_add_keys_or_turn_it_off():
    llm = ScriptedLLM([reply("ask_name", "Hi")])
    llm_fsm.Conversation(definition(secret_keys=["member_*"]), llm, context=SECRETS).start()
    prompt = llm.requests[0].messages[0]["content"]
    assert not any(value in prompt for value in VALUES)
    assert prompt.count(MASK) == 5 and '"name": "Ann"' in prompt
    llm = ScriptedLLM([reply("ask_name", "Hi")])
    llm_fsm.Conversation(definition(mask_secrets=False), llm, context=SECRETS).start()
    assert all(value in llm.requests[0].messages[0]["content"] for value in VALUES)


def test_the_conversation_keeps_the_real_values():
    conversation = llm_fsm.Conversation(definition(), ScriptedLLM([reply("ask_name", "Hi")]), context=SECRETS)
    assert conversation.start().context["password"] == "hunter2-PASSWORD"


def test_run_and_chat_displays_mask_unless_asked(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({**SIGNUP, "handler_only_keys": []}))
    script = tmp_path / "s.json"
    script.write_text(json.dumps([reply("ask_name", "Hi"), reply("ask_name", "Noted", name="Ann")]))
    runner = CliRunner()
    hooks = tmp_path / "h.py"
    hooks.write_text(
        "from llm_fsm import Hooks\nhooks = Hooks()\n"
        "@hooks.on('start')\ndef secrets(**_):\n    return {'password': 'hunter2-PASSWORD', 'pin': '1234'}\n"
    )
    args = ["run", str(path), "-m", f"scripted:{script}", "--hooks", f"{hooks}:hooks"]
    masked = runner.invoke(app, args, input="hi\n")
    assert masked.exit_code == 0, masked.output
    assert "hunter2" not in masked.stdout and json.loads(masked.stdout.splitlines()[0])["context"]["pin"] == MASK
    shown = runner.invoke(app, [*args, "--show-secrets"], input="hi\n")
    assert "hunter2-PASSWORD" in shown.stdout
    chat = runner.invoke(app, ["chat", *args[1:]], input="/context\n/quit\n", env={"COLUMNS": "200"})
    assert chat.exit_code == 0 and MASK in chat.stdout and "hunter2" not in chat.stdout


def test_debug_logs_mask_secrets(caplog):
    with caplog.at_level(logging.DEBUG, logger="llm_fsm"):
        conversation = llm_fsm.Conversation(
            definition(secret_keys=["member_*"]), ScriptedLLM([reply("ask_name", "Hi")]), context=SECRETS
        )
        conversation.start()
    assert "turn 0" in caplog.text and MASK in caplog.text
    assert not any(value in caplog.text for value in VALUES)


def test_the_library_is_silent_and_writes_nothing_to_disk(tmp_path, fake_openai):
    """A conversation through the CLI (scripted and over HTTP) leaves the working directory empty."""
    work = tmp_path / "work"
    work.mkdir()
    definition_file = tmp_path / "d.json"
    definition_file.write_text(json.dumps({**SIGNUP, "handler_only_keys": []}))
    script = tmp_path / "s.json"
    script.write_text(json.dumps([reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann")]))
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"HOME": str(tmp_path / "home")}
    done = subprocess.run([*command(), "run", str(definition_file), "-m", f"scripted:{script}"],
                          input="Ann\n", capture_output=True, text=True, cwd=work, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    for text in (json.dumps(reply("ask_name", "Hi")), json.dumps(reply("ask_email", "Email?", name="Ann"))):
        fake_openai.add(text)
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import json, llm_fsm\n"
        f"d = llm_fsm.load({str(definition_file)!r})\n"
        f"c = llm_fsm.Conversation(d, llm_fsm.LiteLLMClient('openai/x', api_base={fake_openai.url!r}, api_key='k'))\n"
        "c.start(); c.send('Ann')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=work, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", "no output unless the application configures logging"
    assert os.listdir(work) == [] and not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("secret=hunter2", "secret=[masked]"),
        ('login failed: password: "hunter 2" for ann', 'login failed: password: "[masked]" for ann'),
        ("{'api_key': 'abc123', 'user': 'ann'}", "{'api_key': '[masked]', 'user': 'ann'}"),
        ("user_token:xyz;next", "user_token:[masked];next"),
        ("card 4111 1111 1111 1111 declined", "card [masked] declined"),
        ("key sk-abcdef123456 refused", "key [masked] refused"),
        ("Authorization: Bearer abcdefghijk", "Authorization: Bearer [masked]"),
        ("cannot reach https://bob:pw123@db.example/x", "cannot reach https://bob:***@db.example/x"),
        ("member_id=M-77 order=12345 at 10:30", "member_id=[masked] order=12345 at 10:30"),
    ],
)
def test_free_text_such_as_an_exception_message_is_masked_like_context_values(text, masked):
    assert mask_text(text, extra=["member_*"]) == masked


def test_known_secret_values_are_masked_wherever_they_appear():
    assert mask_text("pin 98765 refused for 98765", values=["98765"]) == "pin [masked] refused for [masked]"
    assert mask_text("a b c", values=["b"]) == "a b c", "values too short to be secrets are not hunted"
