"""examples/ (programs to copy), docs/python.md's "Embedding the runtime" snippets and ``llm-fsm new`` all run.

The examples run offline, as a reader would run them (subprocesses in a fresh folder) or through their
``main``/``create_app``, and the assertions are about what they promise: users' conversations kept apart,
every queued message answered and stored, an approved tool run once whichever process approves.
(tests/test_examples.py is about fsm_definitions/.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import llm_fsm
from llm_fsm.cli import app
from llm_fsm.store import advance, open_store
from llm_fsm.testing import SimulatedLLM
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
PROGRAMS = sorted(EXAMPLES.glob("*.py"))


@pytest.fixture(autouse=True)
def no_real_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples talk to LLM_FSM_MODEL when it is set: in tests, never."""
    monkeypatch.delenv("LLM_FSM_MODEL", raising=False)
    monkeypatch.delenv("HELPDESK_STORE", raising=False)


def example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """examples/NAME.py imported as a module (the folder is no package: a reader runs its files)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def run_program(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_FSM_MODEL", "HELPDESK_STORE")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


# ---------------------------------------------------------------- the folder


def test_every_program_is_in_the_readme_and_says_how_to_use_a_real_model():
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert {p.name for p in PROGRAMS} == {"fastapi_app.py", "worker.py", "approval_bot.py"}
    for program in PROGRAMS:
        assert f"({program.name})" in readme
        assert "LLM_FSM_MODEL" in program.read_text(encoding="utf-8").split('"""')[1], program.name
    assert "(examples/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_the_examples_definitions_load_strictly_without_warnings(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm_fsm.load(path, strict=True)
    checked = CliRunner().invoke(app, ["validate", "--strict", str(path)])
    assert checked.exit_code == 0, checked.output


# ---------------------------------------------------------------- fastapi_app.py


def test_the_fastapi_app_keeps_each_users_conversation_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    module = example("fastapi_app", monkeypatch)
    url = f"sqlite:{tmp_path / 'helpdesk.db'}"
    with TestClient(module.create_app(url)) as client:
        opening = client.post("/users/ann/messages", json={"text": None}).json()
        assert opening == {"reply": "Hello, I'm Pat from the help desk! What should I call you?", "state": "welcome"}
        assert client.post("/users/ann/messages", json={"text": "I am Ann"}).json()["state"] == "helping"
        assert client.post("/users/bob/messages", json={"text": None}).json()["state"] == "welcome"
        ann, bob = client.get("/users/ann").json(), client.get("/users/bob").json()
    assert (ann["state"], ann["version"], bob["state"], bob["version"]) == ("helping", 2, "welcome", 1)
    assert [e["user"] for e in ann["history"]] == [None, "I am Ann"]
    assert [e["user"] for e in bob["history"]] == [None] and bob["context"] == {}
    with TestClient(module.create_app(url)) as client:  # a restarted app finds them in the store
        assert client.get("/users/ann").json() == ann
        assert client.post("/users/ann/messages", json={"text": "Thanks, bye"}).json()["state"] == "goodbye"
        ended = client.post("/users/ann/messages", json={"text": "One more thing"})
        assert ended.status_code == 409 and "ended" in ended.json()["detail"]
        assert client.get("/users/nobody").status_code == 404
        assert client.post("/users/-bad/messages", json={"text": "hi"}).status_code == 400
        assert client.post("/users/bob/messages", json={"text": "  "}).status_code == 422  # no text
        assert client.get("/users/bob").json() == bob  # a refused turn changed nothing


def test_the_fastapi_app_serves_many_users_at_once(monkeypatch: pytest.MonkeyPatch):
    module = example("fastapi_app", monkeypatch)
    application = module.create_app("memory:")

    async def users() -> list[dict]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://t") as client:

            async def user(name: str, turns: int) -> dict:
                for text in [None, f"I am {name}"][:turns]:
                    response = await client.post(f"/users/{name}/messages", json={"text": text})
                    assert response.status_code == 200, response.text
                return (await client.get(f"/users/{name}")).json()

            return await asyncio.gather(*(user(f"u{n}", 1 + n % 2) for n in range(20)))

    for n, shown in enumerate(asyncio.run(users())):
        said = [None, f"I am u{n}"][: 1 + n % 2]
        assert [e["user"] for e in shown["history"]] == said  # only this user's messages
        assert shown["state"] == ("helping" if n % 2 else "welcome")


# ---------------------------------------------------------------- worker.py


def test_the_worker_loop_answers_every_message_and_stores_every_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    module = example("worker", monkeypatch)
    url = f"sqlite:{tmp_path / 'worker.db'}"
    assert module.main(["--users", "30", "--workers", "6", "--store", url, "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == "90 messages, 90 replies, 30 conversations stored"
    with open_store(url) as store:
        assert len(store.list()) == 30
        for n in range(1, 31):
            snapshot = store.load(f"user-{n}").snapshot
            # each user's messages were taken in the order they came, whichever worker took them; the
            # simulated model says goodbye on the second, so the third is answered without a turn
            assert [e.user for e in snapshot.history] == [f"Hi, I'm user-{n}.", "Where is my order?"]
            assert snapshot.status == "ended"


def test_the_worker_loop_gives_each_message_one_reply(monkeypatch: pytest.MonkeyPatch):
    module = example("worker", monkeypatch)
    with open_store("memory:") as store:
        messages = module.traffic(12)
        replies = asyncio.run(module.serve(module.Bot(store), messages, workers=5))
    assert Counter((r.user_id, r.text) for r in replies) == Counter((m.user_id, m.text) for m in messages)
    ended = [r for r in replies if r.state is None]
    assert len(ended) == 12 and all(r.reply.startswith("This conversation has ended") for r in ended)


def test_the_worker_runs_as_a_program(tmp_path: Path):
    done = run_program(str(EXAMPLES / "worker.py"), "--users", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "6 messages, 6 replies, 2 conversations stored"


# ---------------------------------------------------------------- approval_bot.py


def bot(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_program(str(EXAMPLES / "approval_bot.py"), *args, cwd=cwd)


def refunds(folder: Path) -> list[dict]:
    ledger = folder / "refunds.jsonl"
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def test_the_approval_bot_runs_the_tool_once_after_approval_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    asked = bot("say", "ann", "Please refund order A-17, 40 euros", cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    assert "waiting for approval: refund" in asked.stdout and refunds(tmp_path) == []  # nothing ran yet
    assert bot("say", "ann", "Hello?", cwd=tmp_path).returncode == 1  # paused: no turn until decided
    assert bot("pending", cwd=tmp_path).stdout.startswith("ann: refund ")
    with open_store(f"sqlite:{tmp_path / 'refunds.db'}") as store:
        token = store.load("ann").snapshot.pending.token

    # two approvals at once, from two processes: one resumes, the other finds it decided
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(EXAMPLES / "approval_bot.py"), "approve", "ann"]
    both = [subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [(process.wait(timeout=120), process.communicate()[0]) for process in both]
    assert sorted(code for code, _ in outputs) == [0, 1], outputs
    assert len(refunds(tmp_path)) == 1
    approved = next(out for code, out in outputs if code == 0)
    assert "refund(" in approved and ": approved, result" in approved

    # the same token once more, in this process: refused, and still one refund
    module = example("approval_bot", monkeypatch)
    definition = llm_fsm.load(module.DEFINITION)
    with open_store(f"sqlite:{tmp_path / 'refunds.db'}") as store:
        with pytest.raises(llm_fsm.ResumeError):
            advance(
                store, "ann", definition, SimulatedLLM(definition), None,
                hooks=module.make_hooks(tmp_path / "refunds.jsonl"),
                action=lambda c: c.resume(token, {"approved": True}),
            )  # fmt: skip
        snapshot = store.load("ann").snapshot
    assert snapshot.state == "refunded" and snapshot.pending is None
    assert snapshot.context["refund"]["reference"] == refunds(tmp_path)[0]["key"][-8:]
    assert len(refunds(tmp_path)) == 1
    assert bot("approve", "ann", cwd=tmp_path).stdout.startswith("nothing waits for approval")


def test_the_approval_bot_denied_runs_nothing(tmp_path: Path):
    assert bot("say", "bob", "refund please", cwd=tmp_path).returncode == 0
    denied = bot("deny", "bob", "not our order", cwd=tmp_path)
    assert denied.returncode == 0 and ": rejected" in denied.stdout
    assert refunds(tmp_path) == [] and bot("pending", cwd=tmp_path).stdout == ""


# ---------------------------------------------------------------- docs/python.md, "Embedding the runtime"


def test_the_embedding_snippets_run(tmp_path: Path):
    page = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    section = page[page.index("## Embedding the runtime") :]
    section = section[: m.start()] if (m := re.search(r"^## ", section[3:], re.MULTILINE)) else section
    headings = re.findall(r"^### (.*)$", section, re.MULTILINE)
    assert headings == [
        "A definition from a dict",
        "Hooks with `advance`",
        "What `store.load(id)` returns",
        "Resuming a stored paused conversation",
    ]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 4
    script = tmp_path / "snippets.py"
    script.write_text("\n".join(blocks), encoding="utf-8")  # they run in order, as a reader runs them
    done = run_program(str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not resumed again: this resume token was already used" in done.stdout


# ---------------------------------------------------------------- llm-fsm new


def test_new_writes_files_that_validate_and_test_pass(tmp_path: Path):
    folder = tmp_path / "bots"
    made = CliRunner().invoke(app, ["new", "helpdesk", "--dir", str(folder)])
    assert made.exit_code == 0, made.output
    assert sorted(p.name for p in folder.iterdir()) == ["helpdesk.json", "helpdesk.test.json", "helpdesk_hooks.py"]
    assert f"llm-fsm test {folder / 'helpdesk'}.test.json" in made.output
    checked = CliRunner().invoke(app, ["validate", "--strict", str(folder)])
    assert checked.exit_code == 0, checked.output
    assert "0 errors, 0 warnings" in checked.output
    tested = CliRunner().invoke(app, ["test", str(folder / "helpdesk.test.json")])
    assert tested.exit_code == 0, tested.output
    assert "2 passed, 0 failed" in tested.output


def test_new_files_pass_in_a_fresh_process_and_the_hooks_run(tmp_path: Path):
    """As an author runs them: the console command, in the folder; the test names the hooks, which must run."""
    assert run_program(str(ROOT / "cli.py"), "new", "my-bot", cwd=tmp_path).returncode == 0
    tested = run_program(str(ROOT / "cli.py"), "test", ".", "--verbose", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    hooks = tmp_path / "my-bot_hooks.py"
    hooks.write_text(hooks.read_text().replace(".title()", ""))  # the handler no longer capitalises "ada"
    broken = run_program(str(ROOT / "cli.py"), "test", ".", cwd=tmp_path)
    assert broken.returncode == 1 and "Ada" in broken.stdout


@pytest.mark.parametrize("name", ["my bot", "../escape", "1st", "", "_x", "a" * 65, "bot.json", "é"])
def test_new_refuses_a_name_that_is_not_a_plain_file_name(tmp_path: Path, name: str):
    refused = CliRunner().invoke(app, ["new", name, "--dir", str(tmp_path)])
    assert refused.exit_code == 2
    assert "is not a usable name" in refused.output and list(tmp_path.iterdir()) == []


def test_new_refuses_to_overwrite_unless_forced(tmp_path: Path):
    runner = CliRunner()
    assert runner.invoke(app, ["new", "shop", "--dir", str(tmp_path)]).exit_code == 0
    (tmp_path / "shop.json").write_text("{}")
    (tmp_path / "shop.test.json").unlink()
    again = runner.invoke(app, ["new", "shop", "--dir", str(tmp_path)])
    assert again.exit_code == 2
    assert "error: new: shop.json, shop_hooks.py already in" in again.output and "--force" in again.output
    assert (tmp_path / "shop.json").read_text() == "{}" and not (tmp_path / "shop.test.json").exists()
    forced = runner.invoke(app, ["new", "shop", "--dir", str(tmp_path), "--force"])
    assert forced.exit_code == 0, forced.output
    assert json.loads((tmp_path / "shop.json").read_text())["name"] == "shop"
    assert runner.invoke(app, ["test", str(tmp_path)]).exit_code == 0


def test_new_refuses_a_dir_that_is_a_file(tmp_path: Path):
    file = tmp_path / "taken"
    file.write_text("")
    refused = CliRunner().invoke(app, ["new", "shop", "--dir", str(file)])
    assert refused.exit_code == 2 and "is not a folder" in refused.output
