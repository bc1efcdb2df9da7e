"""End to end: ``llm-fsm chat`` in a real terminal (tmux), streaming from the local server."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from tests.cli.test_chat import OPEN
from tests.cli.test_cli import command
from tests.conftest import ROOT, reply
from tests.fake_openai import Hang

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")


class Terminal:
    def __init__(self, name: str) -> None:
        self.base = ["tmux", "-L", name]

    def start(self, shell_command: str, rows: int = 40) -> None:
        args = ["new-session", "-d", "-s", "e2e", "-x", "110", "-y", str(rows), shell_command]
        subprocess.run([*self.base, *args], check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "e2e", *keys], check=True)

    def screen(self) -> str:
        done = subprocess.run(
            [*self.base, "capture-pane", "-p", "-t", "e2e", "-S", "-200"], capture_output=True, text=True
        )
        return done.stdout

    def visible(self) -> str:
        """What the pane shows now, wrapped lines joined, without its scrollback (where a cleared screen goes)."""
        done = subprocess.run([*self.base, "capture-pane", "-p", "-J", "-t", "e2e"], capture_output=True, text=True)
        return done.stdout

    def title(self) -> str:
        """The pane's title, as an OSC 0 or OSC 2 sequence written to the pane sets it."""
        done = subprocess.run(
            [*self.base, "display", "-p", "-t", "e2e", "#{pane_title}"], capture_output=True, text=True
        )
        return done.stdout.strip()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen, re.MULTILINE):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} never appeared; screen:\n{self.screen()}")

    def wait_for_prompt(self, timeout: float = 60.0) -> None:
        """Wait until the last non-empty line is the bare prompt (keys sent earlier can be lost)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [line for line in self.screen().splitlines() if line.strip()]
            if lines and lines[-1].strip() == "you>":
                return
            time.sleep(0.1)
        raise AssertionError(f"the prompt never came back; screen:\n{self.screen()}")

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def test_chat_in_a_real_terminal(tmp_path, fake_openai):
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    fake_openai.add(
        json.dumps(reply("ask_name", "Hello! What is your **name**?")),
        json.dumps(reply("ask_email", "Nice to meet you, Ann. What is your email address?", name="Ann")),
    )
    env = {"TERM": "xterm-256color", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1"}
    unset = " ".join(f"-u {name}" for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"))
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    chat = [*command(), "chat", str(definition), "--model", "openai/x", "--api-base", fake_openai.url, "--api-key", "k"]
    shell = f"env {unset} {assignments} {shlex.join(chat)}; echo EXITED=$?; sleep 60"
    terminal = Terminal(f"fsm-e2e-{os.getpid()}")
    terminal.start(shell)
    try:
        screen = terminal.wait_for(r"What is your name\?")
        assert "**" not in screen, "markdown is rendered"
        terminal.wait_for_prompt()
        terminal.keys("Iam Ann", "C-a", "Right", " ")  # readline editing: to the start, one right, insert
        terminal.keys("Enter")
        screen = terminal.wait_for(r"state ask_name → ask_email · collected name · 1 LLM call")
        assert "Nice to meet you, Ann." in screen
        terminal.wait_for_prompt()
        terminal.keys("/state", "Enter")
        terminal.wait_for(r"ask_email: Ask for the email")
        terminal.wait_for_prompt()
        terminal.keys("C-d")
        screen = terminal.wait_for(r"EXITED=\d+")
        assert "EXITED=0" in screen and "Traceback" not in screen
        assert fake_openai.requests[1]["messages"][1]["content"] == "I am Ann"
        assert all(r.get("stream") for r in fake_openai.requests)
    finally:
        terminal.kill()


def test_ctrl_c_cancels_a_reply_and_then_leaves(tmp_path, fake_openai):
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    fake_openai.add(json.dumps(reply("ask_name", "Hello! Name?")), Hang(5.0), "{}")
    chat = [*command(), "chat", str(definition), "--model", "openai/x", "--api-base", fake_openai.url, "--api-key", "k"]
    environment = "env -u HTTP_PROXY -u HTTPS_PROXY LITELLM_LOCAL_MODEL_COST_MAP=True"
    shell = f"{environment} {shlex.join(chat)}; echo EXITED=$?; sleep 60"
    terminal = Terminal(f"fsm-e2e-c-{os.getpid()}")
    terminal.start(shell)
    try:
        terminal.wait_for(r"Hello! Name\?")
        terminal.wait_for_prompt()
        terminal.keys("some text", "C-u")  # readline redraws the line: the prompt must survive
        terminal.wait_for_prompt()
        terminal.keys("I am Ann", "Enter")
        terminal.wait_for(r"thinking")
        terminal.keys("C-c")
        terminal.wait_for(r"turn cancelled: nothing changed")
        terminal.wait_for_prompt()
        terminal.keys("/history", "Enter")
        screen = terminal.wait_for(r"bot> Hello! Name\?")
        assert "you> I am Ann" not in screen.split("/history")[-1], "the cancelled turn left no trace"
        terminal.wait_for_prompt()
        terminal.keys("C-c")
        screen = terminal.wait_for(r"EXITED=\d+")
        assert "EXITED=0" in screen and "Traceback" not in screen
    finally:
        terminal.kill()


def test_chat_with_the_simulated_model_in_a_real_terminal(tmp_path):
    # a newcomer's first chat: no key, no server, no network (issue 27 §2)
    chat = [*command(), "chat", "fsm_definitions/form_filling.json", "--model", "simulated", "--store", "memory:"]
    environment = "env -u OPENAI_API_KEY -u LLM_FSM_MODEL TERM=xterm-256color"
    shell = f"cd {shlex.quote(str(ROOT))} && {environment} {shlex.join(chat)}; echo EXITED=$?; sleep 60"
    terminal = Terminal(f"fsm-e2e-s-{os.getpid()}")
    terminal.start(shell)
    try:
        screen = terminal.wait_for(r"what's your full\s+name\?")  # the line may wrap
        assert "form_filling · simulated" in screen
        terminal.wait_for_prompt()
        terminal.keys("Maya Chen", "Enter")
        terminal.wait_for(r"state collect_name → collect_email · collected name · 1 LLM call")
        terminal.wait_for_prompt()
        terminal.keys("maya@example.com", "Enter")
        terminal.wait_for(r"state collect_email → collect_age")
        terminal.wait_for_prompt()
        terminal.keys("C-d")
        screen = terminal.wait_for(r"EXITED=\d+")
        assert "EXITED=0" in screen and "Traceback" not in screen
    finally:
        terminal.kill()


# -- text from a model or a user is shown as text (issue 45) --------------------------------------------------------

HOSTILE = "Hi\x1b[2J\x1b[H\x1b]0;HACKED\x07 then \x1b]2;HACKED\x1b\\ and \x9b2J \u202eevil END-OF-TEXT"


def _scripted_chat(tmp_path, replies, *extra: str) -> str:
    """The shell command of a chat on the signup definition with these scripted replies."""
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    chat = [*command(), "chat", str(definition), "--model", f"scripted:{script}", *extra]
    return f"env -u COLUMNS TERM=xterm-256color {shlex.join(chat)}; echo EXITED=$?; sleep 60"  # the pane's width


def _assert_shown_as_text(terminal: Terminal, before: str) -> None:
    """The title the pane had, the banner still on the screen (not cleared), the sequences readable."""
    visible = terminal.visible()
    assert "HACKED" not in terminal.title() and terminal.title() == before
    assert "signup · scripted:" in visible, f"the screen was cleared:\n{visible}"
    assert "\\x1b[2J\\x1b[H\\x1b]0;HACKED\\x07" in visible and "\\x9b2J \\u202eevil" in visible


def test_a_reply_s_control_sequences_neither_clear_the_screen_nor_set_the_title(tmp_path):
    terminal = Terminal(f"fsm-e2e-t-{os.getpid()}")
    terminal.start(_scripted_chat(tmp_path, [reply("ask_name", HOSTILE)]))
    try:
        before = terminal.title()
        terminal.wait_for(r"END-OF-TEXT")
        terminal.wait_for_prompt()
        _assert_shown_as_text(terminal, before)
        terminal.keys("C-d")
        assert "EXITED=0" in terminal.wait_for(r"EXITED=\d+")
    finally:
        terminal.kill()


def test_a_stored_user_message_s_control_sequences_are_text_in_history(tmp_path):
    # a remote user's message (serve stores it as run does), read back by an operator: chat -c ID, /history
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    store = f"sqlite://{tmp_path / 'c.db'}"
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    script = tmp_path / "run.json"
    script.write_text(json.dumps([reply("ask_name", "Hello! Name?"), reply("ask_name", "Sorry?")]))
    args = ["run", str(definition), "-m", f"scripted:{script}", "--store", store, "-c", "remote"]
    assert CliRunner().invoke(app, args, input=HOSTILE + "\n").exit_code == 0
    terminal = Terminal(f"fsm-e2e-h-{os.getpid()}")
    terminal.start(_scripted_chat(tmp_path, [], "--store", store, "-c", "remote"))
    try:
        terminal.wait_for(r"Sorry\?")
        terminal.wait_for_prompt()
        before = terminal.title()
        terminal.keys("/history", "Enter")
        terminal.wait_for(r"END-OF-TEXT")
        terminal.wait_for_prompt()
        _assert_shown_as_text(terminal, before)
        assert "you> Hi\\x1b[2J" in terminal.visible()
        terminal.keys("C-d")
        assert "EXITED=0" in terminal.wait_for(r"EXITED=\d+")
    finally:
        terminal.kill()


def test_run_and_conversations_show_write_the_sequences_readably(tmp_path):
    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(OPEN))
    script = tmp_path / "run.json"
    script.write_text(json.dumps([reply("ask_name", HOSTILE), reply("ask_name", HOSTILE)]))
    (tmp_path / "input.txt").write_text(HOSTILE + "\n")
    store = f"sqlite://{tmp_path / 'c.db'}"
    run = [*command(), "run", str(definition), "-m", f"scripted:{script}", "-i", str(tmp_path / "input.txt")]
    show = [*command(), "conversations", "show", "t", "--store", store]
    both = f"{shlex.join([*run, '--store', store, '-c', 't'])} && {shlex.join(show)}"
    terminal = Terminal(f"fsm-e2e-r-{os.getpid()}")
    terminal.start(f"echo BEFORE-IT-RAN; env TERM=xterm-256color {both}; echo EXITED=$?; sleep 60", rows=150)
    try:
        before = terminal.title()
        screen = terminal.wait_for(r"EXITED=\d+")
        assert "EXITED=0" in screen
        visible = terminal.visible()
        assert "HACKED" not in terminal.title() and terminal.title() == before
        assert "BEFORE-IT-RAN" in visible
        # C0 escaped by JSON itself; C1 and the bidi override (which tmux would drop unseen) too
        assert visible.count("\\u001b[2J\\u001b[H\\u001b]0;HACKED\\u0007") >= 4
        assert visible.count("\\u009b2J \\u202eevil") >= 4
    finally:
        terminal.kill()
