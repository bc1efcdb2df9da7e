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

from tests.conftest import ROOT, reply
from tests.fake_openai import Hang
from tests.test_chat import OPEN
from tests.test_cli import command

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")


class Terminal:
    def __init__(self, name: str) -> None:
        self.base = ["tmux", "-L", name]

    def start(self, shell_command: str) -> None:
        args = ["new-session", "-d", "-s", "e2e", "-x", "110", "-y", "40", shell_command]
        subprocess.run([*self.base, *args], check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "e2e", *keys], check=True)

    def screen(self) -> str:
        done = subprocess.run(
            [*self.base, "capture-pane", "-p", "-t", "e2e", "-S", "-200"], capture_output=True, text=True
        )
        return done.stdout

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
