"""The web page of ``llm-fsm serve``: how it is served (headers, files, what it may run), then the page itself in a
real headless Chromium (Debian's ``chromium``, driven by Playwright) on a real uvicorn server with a scripted
model, used as a person would.

Screenshots are kept in ``tests/artifacts/browser/`` (``$LLM_FSM_TEST_ARTIFACTS`` moves it), which git ignores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.errors import LLMUnavailableError
from llm_fsm.server import create_app
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM, tool_calls
from tests.conftest import ROOT, reply
from tests.server.test_server import ALICE, TOKENS, TOOLS, GatedLLM, client, error_of, live, pausing_hooks, signup
from tests.store.test_store import CHAT

CHROMIUM = os.environ.get("LLM_FSM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("LLM_FSM_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts") / "browser"
WAIT_MS = 15_000

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
STATIC = ROOT / "llm_fsm" / "server" / "static"


# -- how the page is served ------------------------------------------------------------------------


def test_the_page_and_its_files_are_served_without_a_token_with_a_strict_policy():
    http = client(ScriptedLLM(), tokens=TOKENS)
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    policy = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'" and policy["connect-src"] == "'self'"
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
    assert 'src="static/app.js"' in page.text and 'src="static/vendor/mermaid/mermaid.min.js"' in page.text
    for name, kind in [
        ("app.js", "javascript"),
        ("app.css", "text/css"),
        ("vendor/mermaid/mermaid.min.js", "javascript"),
    ]:
        response = http.get(f"/static/{name}")
        assert response.status_code == 200 and kind in response.headers["content-type"], name
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "MIT" in http.get("/static/vendor/mermaid/LICENSE").text
    error_of(http.get("/definitions"), 401, "unauthorized")  # the data still needs the token
    for path in ("/static/nope.js", "/static/../app.py", "/static/%2e%2e/app.py", "/static/"):
        error_of(http.get(path), 404, "not_found")
    assert "/" not in http.get("/openapi.json").json()["paths"]


def test_the_page_runs_no_inline_script_and_inserts_no_html_but_mermaids_drawing():
    html = (STATIC / "index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert len(scripts) == 2 and all("src=" in attributes and not body.strip() for attributes, body in scripts)
    assert not re.search(r"\son[a-z]+\s*=", html)  # no inline event handlers (the policy would refuse them)
    script = (STATIC / "app.js").read_text()
    assert script.count("innerHTML") == 1 and "target.innerHTML = svg;" in script
    for risky in ("eval(", "new Function", "insertAdjacentHTML", "outerHTML", "document.write", "localStorage"):
        assert risky not in script, risky


def test_definitions_say_which_mermaid_id_draws_each_state():
    http = client(ScriptedLLM())
    one = http.get("/definitions/signup").json()
    assert one["mermaid_ids"] == {"ask_name": "s0", "ask_email": "s1", "done": "s2"}
    for state, drawn in one["mermaid_ids"].items():
        assert f'state "{state}" as {drawn}' in one["mermaid"]


# -- the page in a browser -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' (it brings playwright)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Page:
    """A fresh tab on the server at ``base``, recording what the browser says went wrong."""

    def __init__(self, browser: Any, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(WAIT_MS)
        self.problems: list[str] = []
        self.tab.on("console", lambda m: m.type in ("error", "warning") and self.problems.append(m.text))
        self.tab.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.tab.goto(base + "/")

    def text(self, selector: str) -> str:
        return str(self.tab.locator(selector).inner_text())

    def wait_text(self, selector: str, pattern: str) -> None:
        """Wait until the element's text matches ``pattern`` (a regex)."""
        self.tab.wait_for_function(
            "([selector, pattern]) => { const node = document.querySelector(selector);"
            " return node !== null && new RegExp(pattern).test(node.textContent); }",
            arg=[selector, pattern],
        )

    def current_state(self) -> str:
        """The state the graph draws as the current one (its box's label), once the drawing is done."""
        self.tab.wait_for_selector("#graph[data-current] g.node.current")
        return str(self.tab.locator("#graph g.node.current").text_content()).strip()

    def wait_state(self, state: str) -> None:
        """Wait until the graph is drawn with ``state`` as the current one."""
        self.tab.wait_for_selector(f"#graph[data-current='{state}'] g.node.current")
        assert self.current_state() == state

    def send(self, text: str) -> None:
        self.tab.fill("#message", text)
        self.tab.press("#message", "Enter")

    def start(self, definition: str) -> None:
        self.tab.select_option("#definition", definition)
        self.tab.click("#start")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.tab.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def opened(browser: Any) -> Iterator[Any]:
    tabs: list[Page] = []

    def open_page(base: str) -> Page:
        tabs.append(Page(browser, base))
        return tabs[-1]

    yield open_page
    for tab in tabs:
        tab.close()


def browser_test(function: Any) -> Any:
    return pytest.mark.slow(needs_chromium(function))


@browser_test
def test_a_conversation_streams_moves_pauses_for_approval_and_shows_why(opened: Any, tmp_path: Path):
    llm = GatedLLM(
        [
            reply("ask_name", "Hi! What is your name?"),
            # name accepted, the gate key refused (only code sets it); entering ask_email pauses for staff
            reply("ask_email", "Thanks Ann! A person checks this first.", name="Ann", approved=True),
            reply("ask_email", "Approved. What is your email?"),  # after the resume
            reply("done", "Done already?"),  # refused: no email yet; the correction follows
            reply("done", "All set, Ann. Goodbye!", email="ann@example.com"),
        ],
        hold_first=False,
    )
    llm.gate.set()
    app = create_app([signup()], llm, hooks=pausing_hooks(), store=f"sqlite:{tmp_path / 'c.db'}")
    with live(app) as base:
        page = opened(base)
        page.wait_text("#definition", "signup")
        page.start("signup")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        assert page.text("#transcript li.assistant .text") == "Hi! What is your name?"
        assert page.current_state() == "ask_name"

        # message 1: the reply streams (held after its first six characters), then the state moves
        llm.gate.clear()
        page.send("I'm Ann")
        page.wait_text("#transcript li.assistant.streaming .text", "^Thanks$")
        assert page.current_state() == "ask_name"  # nothing is committed while the reply streams
        llm.gate.set()
        page.wait_text("#status", "paused")
        assert page.text("#transcript li.assistant:last-child .text") == "Thanks Ann! A person checks this first."
        assert page.current_state() == "ask_email"
        assert "staff must approve" in page.text("#pending-reason")
        assert json.loads(page.text("#pending-detail")) == {"name": "Ann"}
        assert page.tab.is_disabled("#message")  # paused: answer the pause first
        page.screenshot("approval")
        why = page.text("#why li[data-turn='1']")
        assert "context_key" in why and "approved" in why and "may only be set by code" in why

        # the approval
        page.tab.click("#approve")
        page.wait_text("#status", "active")
        assert page.tab.locator("#pending").is_hidden()
        assert page.text("#transcript li.assistant:last-child .text") == "Approved. What is your email?"

        # message 2: a refused move, then the corrected one ends the conversation
        page.send("ann@example.com")
        page.wait_text("#status", "ended")
        assert page.text("#transcript li.assistant:last-child .text") == "All set, Ann. Goodbye!"
        assert page.current_state() == "done"
        assert page.text("#path") == "ask_name → ask_email → done"
        visited = page.tab.locator("#graph g.node.visited").all_text_contents()
        assert sorted(t.strip() for t in visited) == ["ask_email", "ask_name"]
        assert page.tab.locator("#graph path.taken").count() == 4  # start → ask_name → ask_email → done → end
        assert "ended in state done" in page.text("#ended") and page.tab.is_disabled("#message")

        rows = {
            row.get_attribute("data-key"): row.inner_text().split("\t")
            for row in page.tab.locator("#context tbody tr").all()
        }
        assert rows == {
            "name": ["name", "Ann", "llm", "1"],
            "approved": ["approved", "true", "resume", "2"],
            "email": ["email", "ann@example.com", "llm", "3"],
        }
        why = page.text("#why li[data-turn='3']")
        assert "ask_email → done, 2 model calls" in why and "condition" in why and "email" in why
        assert page.text("#why li[data-turn='0']").endswith("nothing refused")

        shot = page.screenshot("conversation")
        assert shot.stat().st_size > 10_000
        assert page.problems == []  # no script error, no Content-Security-Policy violation


@browser_test
def test_model_and_user_text_is_shown_as_text_never_run_as_html(opened: Any):
    attack = '<img src=x onerror="document.title=\'owned\'"><script>document.title="owned"</script>'
    llm = ScriptedLLM([reply("ask_name", f"Hello {attack}"), reply("ask_email", f"Thanks {attack}", name=attack)])
    with live(create_app([signup()], llm, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "signup")
        page.start("signup")
        page.wait_text("#transcript", "Hello <img")
        page.send(f"I am {attack}")
        page.wait_text("#status", "ask_email")
        assert page.text("#transcript li.assistant:last-child .text") == f"Thanks {attack}"
        assert page.text("#transcript li.user .text") == f"I am {attack}"
        assert page.text("#context tr[data-key='name'] td.value") == attack
        for where in ("#transcript", "#context", "#why", "#status", "#path"):
            assert page.tab.locator(f"{where} img, {where} script").count() == 0
        assert page.tab.title() == "llm-fsm"
        assert page.problems == []


@browser_test
def test_a_token_is_asked_for_refused_readably_and_kept_out_of_the_url(opened: Any):
    with live(create_app([signup()], ScriptedLLM(), store="memory:", tokens=TOKENS)) as base:
        page = opened(base)
        page.wait_text("#token-reason", "needs a token")
        assert page.tab.is_visible("#token-form") and page.text("#definition") == ""
        page.tab.fill("#token", "not-a-known-token-at-all")
        page.tab.click("#token-form button")
        page.wait_text("#token-reason", "refused this token")
        assert "valid bearer token" in page.text("#token-reason")
        page.tab.fill("#token", "tökén with spaces 0123456789")  # no HTTP header can carry it: said at once
        page.tab.click("#token-form button")
        page.wait_text("#token-reason", "visible ASCII characters")
        page.tab.fill("#token", ALICE)
        page.tab.click("#token-form button")
        page.wait_text("#definition", "signup")
        assert page.tab.is_hidden("#token-form") and page.tab.is_hidden("#error")
        assert page.tab.evaluate("sessionStorage.getItem('llm-fsm-token')") == ALICE
        assert ALICE not in page.tab.url and page.tab.url == base + "/"


@browser_test
def test_a_failing_turn_is_shown_readably_and_its_message_kept(opened: Any):
    llm = ScriptedLLM(
        [reply("ask_name", "Hi! Your name?"), LLMUnavailableError("upstream 503 at 10.1.2.3", attempts=3)]
    )
    with live(create_app([signup()], llm, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "signup")
        page.tab.click("#start-form summary")
        page.tab.fill("#start-context", "{name: Ann}")
        page.start("signup")
        page.wait_text("#error-text", "the context is not JSON")
        assert page.tab.locator("#transcript li").count() == 0 and page.text("#status") == ""
        page.tab.fill("#start-context", "")
        page.start("signup")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        assert page.tab.is_hidden("#error")
        page.send("Ann")
        page.wait_text("#error-text", "provider")
        error = page.text("#error-text")
        assert error.startswith("Error (provider_error, HTTP 502): the model's provider is unavailable")
        assert "Traceback" not in error and "10.1.2.3" not in error
        assert page.tab.input_value("#message") == "Ann"  # nothing lost: the text is back in the box
        assert page.tab.locator("#transcript li.user.failed").count() == 1
        assert page.current_state() == "ask_name" and page.text("#status").endswith("active")
        page.screenshot("failed-turn")


@browser_test
def test_a_tool_call_waiting_for_approval_is_denied_with_a_reason(opened: Any):
    hooks = Hooks()
    ran: list[str] = []

    @hooks.tool()
    def find_order(order_id: str) -> dict[str, str]:
        ran.append(order_id)
        return {"status": "shipped"}

    definition = json.loads(json.dumps(TOOLS))
    definition["tools"]["find_order"]["approval"] = "always"
    llm = ScriptedLLM(
        [
            reply("help", "How can I help?"),
            tool_calls(("find_order", {"order_id": "A-17"})),
            reply("help", "I may not look orders up now, sorry."),
        ]
    )
    with live(create_app([llm_fsm.load(definition)], llm, hooks=hooks, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "orders")
        page.start("orders")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        page.send("Where is A-17?")
        page.wait_text("#status", "paused")
        assert page.text("#pending-reason").startswith("The model wants to call the tool find_order")
        assert json.loads(page.text("#pending-detail")) == {"arguments": {"order_id": "A-17"}}
        page.tab.fill("#deny-reason", "not during the audit")
        page.tab.click("#deny")
        page.wait_text("#status", "active")
        last = page.text("#transcript li.assistant:last-child")
        assert "I may not look orders up now, sorry." in last and "tool find_order failed" in last
        assert "not during the audit" in last
        assert ran == []  # denied: the tool never ran
        assert llm.requests[-1].messages[-1]["content"].count("not during the audit") == 1


@browser_test
def test_a_reloaded_page_shows_its_conversation_again(opened: Any):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?"), reply("ask_email", "Thanks Ann! Email?", name="Ann")])
    with live(create_app([signup()], llm, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "signup")
        page.start("signup")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        page.send("Ann")
        page.wait_text("#status", "ask_email")
        page.tab.reload()
        page.wait_text("#status", "ask_email")
        texts = page.tab.locator("#transcript li .text").all_inner_texts()
        assert texts == ["Hi! Your name?", "Ann", "Thanks Ann! Email?"]
        assert page.text("#path") == "ask_name → ask_email" and page.current_state() == "ask_email"
        assert re.search(r"\bAnn\b", page.text("#context"))


@browser_test
def test_the_working_memory_and_the_running_summary_are_shown(opened: Any):
    notes = {
        "name": "notes",
        "initial_state": "talk",
        "summaries": {"batch": 1},
        "memory": {"slots": {"facts": {"description": "Facts the user gave"}, "plans": {"description": "Plans"}}},
        "states": {"talk": {"purpose": "Talk", "transitions": [{"target_state": "bye"}]}, "bye": {"purpose": "Bye"}},
    }
    noted = reply("talk", "Noted.")
    noted["transition"]["memory_update"] = {"facts": "<b>flies</b> on Friday"}
    llm = ScriptedLLM([reply("talk", "Hi!"), noted, reply("talk", "Sure.")], summaries=lambda _: {"summary": "Talked."})
    window = llm_fsm.PromptBuilder(settings=llm_fsm.PromptSettings(history_window=1))
    app = create_app([llm_fsm.load(notes)], llm, store="memory:", conversation_options={"prompt": window})
    with live(app) as base:
        page = opened(base)
        page.wait_text("#definition", "notes")
        page.start("notes")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        assert page.tab.locator("#memory-section").is_visible() and page.text("#summary") == "none yet"
        page.send("I fly on Friday")
        page.wait_text("#memory", "on Friday")
        assert page.text('#memory tr[data-slot="facts"] td.value') == "<b>flies</b> on Friday"  # text, not HTML
        assert page.text('#memory tr[data-slot="plans"] td.value') == "(empty)"
        page.send("Thanks")
        page.wait_text("#summary", "Talked.")


@browser_test
def test_a_definition_without_memory_shows_no_memory_panel(opened: Any):
    llm = ScriptedLLM([reply("ask_name", "Hi! Your name?")])
    with live(create_app([signup()], llm, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "signup")
        page.start("signup")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        assert not page.tab.locator("#memory-section").is_visible()


@browser_test
def test_the_status_line_says_where_in_the_stack_a_sub_conversation_talks(opened: Any):
    from tests.subflows.test_subflows import DATA, OPEN, TO_IDENTITY

    llm = ScriptedLLM([OPEN, TO_IDENTITY])
    with live(create_app([llm_fsm.load(DATA / "claim.json")], llm, store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "claim")
        page.start("claim")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        assert "state " in page.text("#status") and "›" not in page.text("#status")
        page.send("P1, Ann")
        page.wait_text("#status", "claim › identity_check: ask_dob")
        # the graph is the root's: its current state is the one running the subflow (its box notes which)
        page.tab.wait_for_selector("#graph[data-current='identity'] g.node.current")
        assert page.current_state() == "identityruns subflow identity_check"


@browser_test
def test_the_page_loads_earlier_turns_as_you_scroll_up(opened: Any):
    kept = open_store("memory:")
    kept.tail = 3
    llm = ScriptedLLM([reply("chat", "hello"), *(reply("chat", f"reply {i}") for i in range(8))])
    with live(create_app([llm_fsm.load(CHAT)], llm, store=kept)) as base:
        page = opened(base)
        page.tab.set_viewport_size({"width": 900, "height": 300})  # short: the transcript scrolls
        page.wait_text("#definition", "chat")
        page.start("chat")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        for i in range(8):
            page.send(f"m{i}")
            page.wait_text("#transcript", f"reply {i}")
        page.tab.reload()
        page.wait_text("#transcript", "reply 7")
        assert page.tab.locator("#transcript li.older button").count() == 1
        assert "hello" not in page.text("#transcript"), "only the tail came with the conversation"
        page.tab.mouse.wheel(0, -10_000)  # up to the top: the page before loads, then the one before that
        page.wait_text("#transcript", "hello")
        page.tab.wait_for_selector("#transcript li.older", state="detached")
        texts = page.tab.locator("#transcript li .text").all_inner_texts()
        assert texts == ["hello", *[t for i in range(8) for t in (f"m{i}", f"reply {i}")]]
        assert not page.problems


@browser_test
def test_a_workflow_s_run_shows_a_bubble_per_step_as_it_happens(opened: Any):
    from tests.server.test_workflows import RUN, HeldLLM, outline_hooks, pipeline

    llm = HeldLLM(RUN, hold=1)  # the acting state's first model call waits
    with live(create_app([pipeline()], llm, hooks=outline_hooks(), store="memory:")) as base:
        page = opened(base)
        page.wait_text("#definition", "pipeline")
        page.start("pipeline")
        page.wait_text("#transcript li.assistant .meta", "turn 0")
        page.send("owls")
        try:  # the person's turn is shown, finished, while the acting state still works
            page.wait_text("#transcript", "turn 1 · in write")
            assert page.tab.locator("#transcript li.assistant").nth(1).inner_text().startswith("On it.")
            assert page.tab.locator("#transcript li.assistant.streaming").count() == 1
        finally:
            llm.gate.set()
        page.wait_text("#transcript li.assistant:last-child .text", "moved on to present")
        page.wait_state("present")
        texts = page.tab.locator("#transcript li.assistant .text").all_inner_texts()
        assert texts == ["Which topic?", "On it.", "Drafted.", "(moved on to present)"]
        metas = page.tab.locator("#transcript li.assistant .meta").all_inner_texts()
        assert metas[1:] == ["turn 1 · in write", "turn 2 · in write · act", "turn 2 · in present · automatic"]
        assert "tool outline" in page.tab.locator("#transcript li.assistant").nth(2).inner_text()
        assert page.text("#path") == "intake → write → present" and not page.tab.is_disabled("#message")
        assert page.problems == []
