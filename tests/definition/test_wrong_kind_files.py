"""Issue 45 §6: a file of the wrong kind is one line, not an out-of-memory or a hang.

Every file a command reads, given a character device (``/dev/zero``, endless) or a FIFO (whose ``open``
waits for a writer): one ``error:`` line saying it is not a regular file, exit 2, no traceback. The
commands run in a child process with its memory capped and a timeout, so that a reader that does read
to the end fails the test instead of taking the machine's memory or hanging it. (Files over the size
limit are in tests/cli/test_bad_input.py's sweep: they are safe to try in-process.)
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and /dev/zero")

MEMORY = 1536 * 1024 * 1024  # bytes of address space the child may take: reading /dev/zero whole fails fast
DEFINITION = ROOT / "fsm_definitions" / "small_talk.json"

# (what is tried, the command line with {bad} where the file goes, what is typed, the exit code)
CASES = [
    ("validate", ["validate", "{bad}"], "", 2),
    ("run", ["run", "{bad}", "-m", "simulated", "--input", "{inputs}"], "", 2),
    ("chat", ["chat", "{bad}", "-m", "simulated"], "", 2),
    ("graph", ["graph", "{bad}"], "", 2),
    ("paths", ["paths", "{bad}"], "", 2),
    ("serve", ["serve", "{bad}", "-m", "simulated"], "", 2),
    ("test", ["test", "{bad}"], "", 2),
    ("eval", ["eval", "{bad}", "-m", "scripted"], "", 2),
    ("eval's user lines", ["eval", "{definition}", "-m", "scripted", "--scripts", "{scripts}"], "", 2),
    ("--input", ["run", "{definition}", "-m", "simulated", "--input", "{bad}"], "", 2),
    ("--replay", ["run", "{definition}", "--replay", "{bad}", "--input", "{inputs}"], "", 2),
    ("test --replay", ["test", "{tests}", "--replay", "{bad}"], "", 2),
    ("--model scripted:", ["run", "{definition}", "-m", "scripted:{bad}", "--input", "{inputs}"], "", 2),
    ("--tokens-file", ["serve", "{definition}", "-m", "simulated", "--tokens-file", "{bad}"], "", 2),
    ("chat's /load", ["chat", "{definition}", "-m", "simulated"], "/load {bad}\n/quit\n", 0),  # the chat goes on
]

# Runs each case with typer's CliRunner, in this one child (one start-up for all), and prints the outcomes.
CHILD = """
import json, os, sys
sys.path.insert(0, {root!r})
import uvicorn
from typer.testing import CliRunner
from llm_fsm.cli import app


def serving(*args, **kwargs):
    raise AssertionError("serve read the file and started a server")


uvicorn.run = serving
outcomes = {{}}
for name, args, typed in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args, input=typed, env={{"COLUMNS": "200"}})
    error = None if result.exception is None or isinstance(result.exception, SystemExit) else repr(result.exception)
    outcomes[name] = [result.exit_code, result.stdout + "\\n" + result.stderr, error]
print(json.dumps(outcomes))
"""


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def wrong_file(kind: str, path: Path) -> Path:
    """A file of the wrong kind at ``path``: a FIFO, or a link to /dev/zero (``stat`` follows it to the device)."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.fixture(params=["fifo", "device"])
def places(request, tmp_path):
    kind = request.param
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(ROOT / "fsm_definitions" / "scripts" / "small_talk.json", scripts)
    wrong_file(kind, scripts / "small_talk.txt")
    (tmp_path / "inputs.txt").write_text("hello\n", encoding="utf-8")
    return kind, {
        "bad": str(wrong_file(kind, tmp_path / "given.json")),
        "definition": str(DEFINITION),
        "inputs": str(tmp_path / "inputs.txt"),
        "scripts": str(scripts),
        "tests": str(ROOT / "fsm_definitions" / "tests" / "small_talk.test.json"),
    }


def filled(words: list[str], places: dict[str, str]) -> list[str]:
    for name, value in places.items():
        words = [word.replace(f"{{{name}}}", value) for word in words]
    return words


def test_every_reader_refuses_a_fifo_and_a_device_in_one_line(places, tmp_path):
    kind, where = places
    cases = [(name, filled(args, where), filled([typed], where)[0]) for name, args, typed, _ in CASES]
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), json.dumps(cases)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, preexec_fn=capped,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    outcomes = json.loads(child.stdout.splitlines()[-1])
    wrong = {}
    for name, _, _, code in CASES:
        exit_code, output, error = outcomes[name]
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        said = "FIFO (a named pipe)" if kind == "fifo" else "a character device"
        words = " ".join(output.split())  # chat's console wraps long lines
        if error or "Traceback" in output or exit_code != code or len(errors) != 1 or said not in words:
            wrong[name] = (exit_code, error, output[-600:])
    assert not wrong, "\n".join(f"{name}: exit {c}, {e}: {out}" for name, (c, e, out) in wrong.items())


def read_from_dev_zero(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    with open("/dev/zero", "rb") as endless:
        return subprocess.run(
            [sys.executable, str(ROOT / "cli.py"), *args],
            stdin=endless, capture_output=True, text=True, timeout=240, cwd=tmp_path, preexec_fn=capped,
        )  # fmt: skip


@pytest.mark.parametrize(
    "command, said",
    [("run", "line 1 of the input (stdin) is longer"), ("chat", "a line of the input (stdin) is longer")],
)
def test_stdin_is_read_a_bounded_line_at_a_time(command, said, tmp_path):
    # `--input -` (run's default) and chat's prompt read standard input line by line: < /dev/zero is one
    # endless line, refused at the limit
    done = read_from_dev_zero([command, str(DEFINITION), "-m", "simulated"], tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert errors == [f"error: {said} than 64 MiB (LLM_FSM_MAX_FILE_BYTES)"]


def test_eval_writes_its_scorecard_to_a_device_without_reading_it_first(tmp_path):
    # --json may name a file eval would replace: it reads it to make sure it is a scorecard. A device or a
    # FIFO holds no courses: it is written to, never read.
    args = ["eval", str(DEFINITION), "-m", "scripted", "--json", str(wrong_file("device", tmp_path / "card.json"))]
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, preexec_fn=capped,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
