"""The page of ``llm-fsm edit FILE`` in a real headless Chromium (Debian's ``chromium``, driven by Playwright),
on the real editor app (:func:`llm_fsm.editor.app.create_editor_app`) on a real uvicorn server, used as an
author would: drawing a definition from an empty file, saving examples unchanged, renaming, a file changed
on disk, a wrong token, hostile text. Screenshots go to ``tests/artifacts/browser/`` (``scripts/editor_screenshots.py``
writes the ones ``docs/editor.md`` shows).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.server.test_server import live
from tests.server.test_web_page import ARTIFACTS, WAIT_MS, browser, browser_test  # noqa: F401 (browser: a fixture)

STATIC = ROOT / "llm_fsm" / "editor" / "static"
EXAMPLES = sorted((ROOT / "fsm_definitions").glob("*.json"))
TOKEN = "t0ken-for-the-editor-tests"


class _Late:
    """An ASGI app made once the server's port is known (the editor answers only at its own host:port)."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@contextmanager
def editing(path: Path, **options: Any) -> Iterator[str]:
    """The editor of ``path`` on a real uvicorn server (``live()``): its base URL."""
    from llm_fsm.editor.app import create_editor_app
    from llm_fsm.editor.document import EditedFile

    late = _Late()
    with live(late) as base:
        port = int(base.rsplit(":", 1)[1])
        late.app = create_editor_app(EditedFile(path), TOKEN, port=port, **options)
        yield base


class Editor:
    """A fresh tab on the editor at ``base`` (opened with the token), recording what the browser says went wrong."""

    def __init__(self, chromium: Any, base: str, token: str = TOKEN) -> None:
        self.context = chromium.new_context(viewport={"width": 1400, "height": 1000})
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(WAIT_MS)
        self.problems: list[str] = []
        self.expected: list[str] = []  # what a test expects the browser to report (an answer's status)
        self.tab.on("console", self._console)
        self.tab.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.response = self.tab.goto(f"{base}/?token={token}")

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(message.text)

    def expect_status(self, status: int) -> None:
        """The browser reports an answer with this status as a console error: the test expects it."""
        self.expected.append(f"the server responded with a status of {status} ")

    def unexpected(self) -> list[str]:
        return [p for p in self.problems if not any(e in p for e in self.expected)]

    def ready(self) -> Editor:
        """Wait until the file is drawn and checked."""
        self.tab.wait_for_function("() => window.editor && window.editor.cy && window.editor.idle()")
        return self

    def js(self, expression: str, arg: Any = None) -> Any:
        return self.tab.evaluate(expression, arg)

    def settled(self) -> list[dict[str, Any]]:
        """The problems, once they are those of the definition as it is now."""
        self.tab.wait_for_function("() => window.editor.idle()")
        return list(self.js("window.editor.problems()"))

    def codes(self) -> list[str]:
        return [p["code"] for p in self.settled()]

    def doc(self) -> Any:
        return self.js("window.editor.doc()")

    def add_state(self, state_id: str) -> None:
        self.tab.click("#add-state")
        self.tab.fill("#new-state-id", state_id)
        self.tab.press("#new-state-id", "Enter")
        self.tab.wait_for_function("id => window.editor.cy.getElementById('s:' + id).length === 1", arg=state_id)

    def node_at(self, state_id: str) -> tuple[float, float]:
        """Where the state's node is on the screen (page coordinates)."""
        self.tab.wait_for_function("() => !window.editor.cy.animated()")  # a problem clicked pans to its element
        box = self.tab.locator("#graph").bounding_box()
        at = self.js("id => window.editor.cy.getElementById('s:' + id).renderedPosition()", state_id)
        return box["x"] + at["x"], box["y"] + at["y"]

    def drag_connect(self, source: str, target: str, *, shift: bool = False) -> None:
        """Draw a transition as an author does: Connect (or hold Shift), then drag from one state onto another."""
        if shift:
            self.tab.keyboard.down("Shift")
        else:
            self.tab.click("#connect")
        (x1, y1), (x2, y2) = self.node_at(source), self.node_at(target)
        mouse = self.tab.mouse
        mouse.move(x1, y1)
        mouse.down()
        for step in range(1, 11):
            mouse.move(x1 + (x2 - x1) * step / 10, y1 + (y2 - y1) * step / 10)
            time.sleep(0.02)
        time.sleep(0.15)  # edgehandles' hover delay
        mouse.move(x2 + 1, y2 + 1)
        mouse.up()
        if shift:
            self.tab.keyboard.up("Shift")
        else:
            self.tab.click("#connect")

    def save(self) -> None:
        saves = self.tab.get_attribute("#save-state", "data-saves") or "0"
        self.tab.keyboard.press("Control+s")
        self.tab.wait_for_function(
            "n => document.querySelector('#save-state').dataset.saves === String(n)", arg=int(saves) + 1
        )

    def wait_text(self, selector: str, pattern: str) -> None:
        """Wait until the element's text matches ``pattern`` (a regex)."""
        self.tab.wait_for_function(
            "([selector, pattern]) => { const node = document.querySelector(selector);"
            " return node !== null && new RegExp(pattern).test(node.textContent); }",
            arg=[selector, pattern],
        )

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.tab.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def opened(browser: Any) -> Iterator[Any]:  # noqa: F811 (browser is the fixture imported above)
    tabs: list[Editor] = []

    def open_editor(base: str, token: str = TOKEN) -> Editor:
        tabs.append(Editor(browser, base, token))
        return tabs[-1]

    yield open_editor
    for tab in tabs:
        assert tab.unexpected() == [], tab.unexpected()  # no page error nor console error in any test
        tab.close()


# -- how the page is built -------------------------------------------------------------------------


def test_the_page_runs_no_inline_script_and_inserts_no_html() -> None:
    html = (STATIC / "index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts and all("src=" in attributes and not body.strip() for attributes, body in scripts)
    assert not re.search(r"\son[a-z]+\s*=", html)  # no inline event handlers (the policy would refuse them)
    for name in ("editor.js", "vendor/lodash-shim/lodash-shim.js"):
        script = (STATIC / name).read_text()
        for risky in ("innerHTML", "eval(", "new Function", "insertAdjacentHTML", "outerHTML", "document.write"):
            assert risky not in script, (name, risky)
    for vendored in ("cytoscape", "cytoscape-edgehandles", "dagre"):
        folder = STATIC / "vendor" / vendored
        assert "Permission is hereby granted" in (folder / "LICENSE").read_text()  # MIT, each
        readme = (folder / "README.md").read_text()
        assert "sha256" in readme and "integrity" in readme and "npm pack" in readme, vendored


def validate_strict(path: Path) -> Any:
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    return CliRunner().invoke(app, ["validate", "--strict", str(path)])


# -- the page in a browser -------------------------------------------------------------------------


@browser_test
def test_a_definition_drawn_from_an_empty_file_warns_of_a_dead_end_and_validates(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "signup.json"  # not there yet: a new definition
    with editing(path) as base:
        page = opened(base).ready()
        assert page.doc() == {"name": "signup", "states": {}}  # the name from the file, no states yet
        assert "a new file" in page.tab.inner_text("#notice-text")
        assert {"missing_field", "no_states"} <= set(page.codes())
        assert page.tab.inner_text("#save-state") == "unsaved"

        page.add_state("ask_email")
        page.add_state("done")
        page.tab.click("#add-state")
        page.tab.fill("#new-state-id", "9lives")  # the id pattern and uniqueness are checked as you type
        assert "letters, digits and underscores" in page.tab.inner_text("#new-state-error")
        page.tab.fill("#new-state-id", "done")
        assert "already a state 'done'" in page.tab.inner_text("#new-state-error")
        page.tab.press("#new-state-id", "Escape")
        assert page.doc()["initial_state"] == "ask_email"  # the first state added starts the conversation
        assert page.js("() => window.editor.cy.getElementById('s:done').hasClass('terminal')")

        page.js("() => window.editor.select('state', 'done')")  # its form, from the schema (forms.js)
        page.tab.fill("#form [data-key='purpose'] textarea", "Say goodbye")
        assert page.doc()["states"]["done"] == {"purpose": "Say goodbye"}
        assert page.tab.is_visible("#rename-id") and page.tab.input_value("#rename-id") == "done"

        page.drag_connect("ask_email", "done")  # drawn with the mouse: Connect, then drag
        assert page.doc()["states"]["ask_email"]["transitions"] == [{"target_state": "done", "priority": 100}]
        assert page.js("() => window.editor.selection()") == {"kind": "transition", "state": "ask_email", "index": 0}
        page.js(
            """() => window.editor.change(d => {
                d.states.ask_email.required_context_keys = ["email"];
                d.states.ask_email.transitions[0].conditions = [{requires_context_keys: ["email"]}];
            })"""
        )
        assert page.codes() == []
        assert page.js("() => window.editor.cy.getElementById('t:ask_email:0').data('label')") == "100 · needs email"

        # a state once entered never left: the warning appears on it, and goes when a way out is drawn
        page.add_state("stuck")
        page.drag_connect("ask_email", "stuck")
        page.js("() => window.editor.connect('stuck', 'stuck')")
        assert page.doc()["states"]["ask_email"]["transitions"][1] == {"target_state": "stuck", "priority": 110}
        assert "self_loop_no_exit" in page.codes()
        assert page.js("() => window.editor.cy.getElementById('s:stuck').hasClass('has-warning')")
        page.tab.click("#problems li.warning")  # a problem selects what it is about
        assert page.js("() => window.editor.selection()") == {"kind": "state", "state": "stuck"}
        page.drag_connect("stuck", "done", shift=True)
        assert "self_loop_no_exit" not in page.codes()
        assert not page.js("() => window.editor.cy.getElementById('s:stuck').hasClass('has-warning')")

        # undo and redo walk the changes back and forth (the buttons and the keys)
        before = page.doc()
        page.tab.click("#graph")
        page.tab.keyboard.press("Control+z")
        assert page.doc()["states"]["stuck"]["transitions"] == [{"target_state": "stuck", "priority": 100}]
        assert "self_loop_no_exit" in page.codes()
        page.tab.keyboard.press("Control+Shift+z")
        assert page.doc() == before
        page.tab.click("#undo")
        page.tab.keyboard.press("Control+y")
        assert page.doc() == before and page.codes() == []

        leaving = "() => { const e = new Event('beforeunload', {cancelable: true}); return !window.dispatchEvent(e); }"
        assert page.js(leaving)  # unsaved: leaving the page asks first
        page.save()
        assert page.tab.inner_text("#save-state") == "saved"
        assert not page.js(leaving)
        assert json.loads(path.read_text()) == before
        result = validate_strict(path)
        assert result.exit_code == 0, result.output
        assert not path.with_suffix(".layout").exists()  # nothing was moved by hand


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of ``fsm_definitions/`` (its subflows, hooks and tests beside the examples, as they are read)."""
    folder = tmp_path / "fsm_definitions"
    shutil.copytree(ROOT / "fsm_definitions", folder)
    return folder


@browser_test
@pytest.mark.parametrize("example", [p.name for p in EXAMPLES])
def test_an_example_opened_and_saved_unchanged_keeps_every_byte(opened: Any, examples: Path, example: str) -> None:
    path = examples / example
    original = path.read_bytes()
    with editing(path) as base:
        page = opened(base).ready()
        assert page.doc() == json.loads(original)
        assert page.tab.inner_text("#save-state") == "saved"
        page.save()
        assert "saved" in page.tab.inner_text("#save-state")
    assert path.read_bytes() == original
    assert not path.with_suffix(".layout").exists()  # opening and saving never makes the side file


def references(doc: Any, state: str) -> int:
    """How many fields of ``doc`` name ``state`` (targets, initial_state, except_states, fallback_state)."""
    count = int(doc.get("initial_state") == state)
    for body in doc["states"].values():
        count += sum(t["target_state"] == state for t in body.get("transitions", []))
        count += int(body.get("fallback_state") == state)
    for move in doc.get("global_transitions", []):
        count += int(move["target_state"] == state) + move.get("except_states", []).count(state)
    return count


@browser_test
def test_renaming_a_state_renames_every_reference_and_its_kept_position(opened: Any, examples: Path) -> None:
    path = examples / "order_flow.json"
    original = path.read_text()
    before = json.loads(original)
    used = references(before, "review")
    assert used >= 3
    with editing(path) as base:
        page = opened(base).ready()
        # an author moves the state: its place is kept in the side file, and stays after a new layout
        x, y = page.node_at("review")
        page.tab.mouse.move(x, y)
        page.tab.mouse.down()
        page.tab.mouse.move(x + 40, y + 30, steps=5)
        page.tab.mouse.up()
        layout = path.with_suffix(".layout")
        page.tab.wait_for_function("() => Object.keys(window.editor.positions()).length === 1")
        for _ in range(100):
            if layout.exists():
                break
            time.sleep(0.05)
        kept = json.loads(layout.read_text())["positions"]["review"]
        page.tab.click("#layout")
        at = page.js("() => window.editor.cy.getElementById('s:review').position()")
        assert (round(at["x"], 1), round(at["y"], 1)) == (kept["x"], kept["y"])

        page.js("() => window.editor.select('state', 'review')")
        page.tab.fill("#rename-id", "9lives")
        page.tab.click("#rename-apply")
        assert "letters, digits and underscores" in page.tab.inner_text("#rename-error")
        page.tab.fill("#rename-id", "choose_quantity")
        page.tab.click("#rename-apply")
        assert "already a state 'choose_quantity'" in page.tab.inner_text("#rename-error")
        page.tab.fill("#rename-id", "check_order")
        page.tab.press("#rename-id", "Enter")
        doc = page.doc()
        assert references(doc, "review") == 0 and references(doc, "check_order") == used
        assert list(doc["states"]) == [("check_order" if s == "review" else s) for s in before["states"]]  # same place
        assert page.codes() == []
        assert page.js("() => window.editor.cy.getElementById('s:check_order').length") == 1
        page.tab.click("#undo")  # the kept place goes back and forth with the name
        assert "review" in page.doc()["states"] and list(page.js("() => window.editor.positions()")) == ["review"]
        page.tab.click("#redo")
        assert page.doc() == doc and list(page.js("() => window.editor.positions()")) == ["check_order"]
        page.save()
        saved = json.loads(path.read_text())
        assert saved == doc
        old_lines, new_lines = original.splitlines(), path.read_text().splitlines()
        assert len(old_lines) == len(new_lines)  # only the lines naming the state were rewritten
        assert [o for o, n in zip(old_lines, new_lines, strict=True) if o != n] == [
            o for o in old_lines if '"review"' in o
        ]
        assert validate_strict(path).exit_code == 0
        assert set(json.loads(layout.read_text())["positions"]) == {"check_order"}  # the kept place follows
        again = opened(base).ready()  # opened again, the moved state is where the author put it
        at = again.js("() => window.editor.cy.getElementById('s:check_order').position()")
        assert (round(at["x"], 1), round(at["y"], 1)) == (kept["x"], kept["y"])


@browser_test
def test_a_file_changed_on_disk_is_not_overwritten_unless_the_author_says_so(opened: Any, examples: Path) -> None:
    path = examples / "small_talk.json"
    with editing(path) as base:
        page = opened(base).ready()
        page.expect_status(409)
        page.add_state("mine")
        theirs = json.loads(path.read_text())
        theirs["description"] = "changed by someone else"
        path.write_text(json.dumps(theirs, indent=2) + "\n")

        page.tab.keyboard.press("Control+s")
        page.tab.wait_for_selector("#conflict-dialog[open]")
        page.tab.click("#conflict-cancel")  # nothing happens: the edits stay, unsaved
        assert page.tab.inner_text("#save-state") == "unsaved" and "mine" in page.doc()["states"]
        assert json.loads(path.read_text()) == theirs

        page.tab.click("#save")
        page.tab.wait_for_selector("#conflict-dialog[open]")
        page.tab.click("#conflict-overwrite")
        page.tab.wait_for_function("() => document.querySelector('#save-state').textContent === 'saved'")
        mine = json.loads(path.read_text())
        assert "mine" in mine["states"] and mine["description"] != "changed by someone else"

        theirs = dict(mine, description="changed again")
        path.write_text(json.dumps(theirs, indent=2) + "\n")
        page.add_state("lost")
        page.tab.click("#save")
        page.tab.wait_for_selector("#conflict-dialog[open]")
        page.tab.click("#conflict-reload")  # the disk wins: the page shows what it holds, edits and undo gone
        page.tab.wait_for_function("() => window.editor.doc().description === 'changed again'")
        assert page.doc() == theirs and page.tab.inner_text("#save-state") == "saved"
        assert page.tab.is_disabled("#undo")
        page.add_state("after_reload")
        page.save()  # saved over the text it reloaded: no conflict
        assert "after_reload" in json.loads(path.read_text())["states"]


@browser_test
def test_a_wrong_or_missing_token_gets_a_short_page_and_none_of_the_file(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"name": "secret", "description": "the-secret-words", "states": {"a": {}}}))
    with editing(path) as base:
        for token in ("wrong", ""):
            page = opened(base, token=token)
            assert page.response.status == 403
            body = page.tab.inner_text("body")
            assert "llm-fsm edit printed" in body and "the-secret-words" not in body
            assert page.tab.evaluate("() => typeof window.editor") == "undefined"  # the page's script never ran
            page.expect_status(403)  # the refusal itself
            page.expect_status(404)  # and the favicon the browser asks the refusal's page for
        page = opened(base).ready()  # the right token still opens it
        assert page.doc()["description"] == "the-secret-words"


HOSTILE = '<img src=x onerror="window.__pwned = 1">'


@browser_test
def test_every_text_of_the_file_is_shown_as_text(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "hostile.json"
    definition = {
        "name": "hostile",
        "description": HOSTILE,
        "initial_state": "start",
        "states": {
            "start": {
                "purpose": HOSTILE,
                "opening": "Hello " + HOSTILE,
                "transitions": [
                    {"target_state": "end", "description": HOSTILE, "conditions": [{"description": HOSTILE}]}
                ],
            },
            "end": {"purpose": "bye"},
            HOSTILE: {"purpose": HOSTILE},  # not an id: the problem's message quotes it
        },
    }
    path.write_text(json.dumps(definition, indent=2))
    with editing(path) as base:
        page = opened(base).ready()
        problems = page.settled()
        assert any(HOSTILE in p["message"] for p in problems)
        shown = page.tab.inner_text("#problems")
        assert HOSTILE in shown
        page.js("() => window.editor.select('state', 'start')")
        page.js("() => window.editor.select('transition', 'start', 0)")
        assert page.js("() => window.editor.cy.getElementById('t:start:0').data('label')").startswith("100 · <img")
        page.expect_status(422)
        page.tab.click("#chat-start")  # it does not load: the chat says why, quoting the id
        page.wait_text("#chat-error", "fix the problems first")
        assert HOSTILE in page.tab.inner_text("#chat-error")

        page.js("() => window.editor.select('state', 'start')")
        page.tab.keyboard.press("Delete")
        page.tab.wait_for_selector("#confirm-dialog[open]")
        assert "Delete the state 'start' and the 0" not in page.tab.inner_text("#confirm-text")
        page.tab.click("#confirm-cancel")  # nothing deleted
        assert "start" in page.doc()["states"]
        page.js("id => window.editor.select('state', id)", HOSTILE)
        page.tab.click("#delete")
        assert HOSTILE in page.tab.inner_text("#confirm-text")
        page.tab.click("#confirm-ok")
        page.tab.wait_for_function("() => Object.keys(window.editor.doc().states).length === 2")
        assert set(page.doc()["states"]) == {"start", "end"} and page.codes() == []
        page.tab.click("#chat-start")
        page.tab.wait_for_selector("#transcript li.assistant")
        assert page.tab.inner_text("#transcript li.assistant") == "Hello " + HOSTILE
        assert page.js("() => document.querySelectorAll('img').length") == 0
        assert page.js("() => window.__pwned") is None
        page.screenshot("editor-hostile")


CHAT = {
    "name": "greeting",
    "initial_state": "greet",
    "states": {
        "greet": {
            "purpose": "Greet the user",
            "opening": "Hello!",
            "transitions": [{"target_state": "chat", "priority": 10}],
        },
        "chat": {"purpose": "Talk a little", "transitions": [{"target_state": "bye", "priority": 10}]},
        "bye": {"purpose": "Say goodbye"},
    },
}


@browser_test
def test_the_chat_beside_the_graph_lights_the_path_and_restarts_after_an_edit(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "greeting.json"
    path.write_text(json.dumps(CHAT, indent=2))
    with editing(path) as base:
        page = opened(base).ready()
        assert "simulated" in page.tab.inner_text("#chat-model")
        page.tab.click("#chat-start")
        page.tab.wait_for_selector("#transcript li.assistant")
        assert page.tab.inner_text("#transcript li.assistant") == "Hello!"
        current = "() => window.editor.cy.nodes('.current').map(n => n.data('state'))"
        assert page.js(current) == ["greet"]
        page.tab.fill("#chat-message", "hi there")
        page.tab.press("#chat-message", "Enter")
        page.tab.wait_for_selector("#transcript li.user ~ li.assistant")
        moved_to = page.tab.inner_text("#chat-state").split()[1]
        assert page.js(current) == [moved_to] and moved_to in ("chat", "bye")
        assert page.tab.inner_text("#transcript li.user") == "hi there"
        if moved_to == "chat":
            assert page.js("() => window.editor.cy.getElementById('t:greet:0').hasClass('visited')")

        # an edit: the chat offers to start again, from the initial state or from where it is
        assert page.tab.is_hidden("#chat-restart")
        page.add_state("extra")
        assert page.tab.is_visible("#chat-restart")
        assert page.tab.inner_text("#chat-restart-current") == f"Restart from {moved_to}"
        page.tab.click("#chat-restart-current")
        page.tab.wait_for_function("() => document.querySelector('#chat-restart').hidden")
        assert page.js(current) == [moved_to]
        page.js("() => window.editor.select('state', 'greet')")
        page.tab.click("#delete")
        page.tab.click("#confirm-ok")
        page.tab.wait_for_function("() => !('greet' in window.editor.doc().states)")
        if moved_to != "greet":
            assert page.tab.is_visible("#chat-restart-current")
        page.js("() => window.editor.select('state', 'extra')")
        page.tab.fill("#rename-id", "renamed")
        page.tab.click("#rename-apply")
        page.tab.wait_for_function("() => 'renamed' in window.editor.doc().states")


def inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    """Whether the box ``inner`` lies wholly within ``outer`` (bounding boxes, page pixels; 1px of rounding)."""
    return (
        inner["x"] >= outer["x"] - 1
        and inner["y"] >= outer["y"] - 1
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 1
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 1
    )


@browser_test
@pytest.mark.parametrize("size", [(1400, 900), (1280, 800)])
def test_the_chat_input_stays_in_view_as_the_transcript_grows(
    opened: Any, examples: Path, size: tuple[int, int]
) -> None:
    width, height = size
    with editing(examples / "order_flow.json") as base:
        page = opened(base).ready()
        page.tab.set_viewport_size({"width": width, "height": height})
        page.js("() => window.editor.select('state', 'shipping_address')")  # a long form above the chat
        page.tab.click("#chat-start")
        page.tab.wait_for_selector("#transcript li.assistant")
        # a long conversation: turns as the page writes them (an item per line, its text as text)
        page.js(
            "() => { const list = document.querySelector('#transcript');"
            " for (let n = 0; n < 20; n++) { const item = document.createElement('li');"
            " item.className = n % 2 ? 'assistant' : 'user'; item.textContent = 'turn ' + n + ' of a long talk';"
            " list.appendChild(item); item.scrollIntoView({ block: 'nearest' }); } }"
        )
        last = page.tab.locator("#transcript li").last.bounding_box()
        assert inside(last, page.tab.locator("#transcript").bounding_box()), "the newest line is shown"
        page.add_state("extra")  # the restart offer shows too
        viewport = {"x": 0, "y": 0, "width": width, "height": height}
        pane = page.tab.locator("#chat").bounding_box()
        assert inside(pane, viewport), (pane, viewport)
        for part in ("#chat-message", "#chat-send", "#chat-start"):
            box = page.tab.locator(part).bounding_box()
            assert inside(box, viewport) and inside(box, pane), (part, box, pane, viewport)
        transcript = page.js(
            "() => { const t = document.querySelector('#transcript'); return [t.scrollHeight, t.clientHeight]; }"
        )
        assert transcript[0] > transcript[1], "the transcript scrolls inside its pane"
        page.screenshot(f"editor-chat-{width}x{height}")


@browser_test
def test_the_state_form_reorders_transitions_by_rewriting_their_priorities(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "order.json"
    definition = {
        "name": "order",
        "initial_state": "a",
        "states": {
            "a": {
                "transitions": [
                    {"target_state": "b", "priority": 20},
                    {"target_state": "c", "priority": 10},
                    {"target_state": "d"},
                ]
            },
            "b": {},
            "c": {},
            "d": {},
        },
    }
    path.write_text(json.dumps(definition, indent=2))
    with editing(path) as base:
        page = opened(base).ready()
        page.js("() => window.editor.select('state', 'a')")
        rows = "() => [...document.querySelectorAll('#transition-list li .link')].map(b => b.textContent)"
        assert page.js(rows) == ["10 → c", "20 → b", "100 → d"]
        page.tab.click("#transition-list li:nth-child(3) button[title^='Earlier']")  # d before b

        def moves() -> list[tuple[str, Any]]:
            return [(t["target_state"], t.get("priority")) for t in page.doc()["states"]["a"]["transitions"]]

        assert moves() == [("b", 100), ("c", 10), ("d", 20)]  # the same numbers, in the new order
        assert page.js(rows) == ["10 → c", "20 → d", "100 → b"]
        page.tab.drag_and_drop("#transition-list li:nth-child(3)", "#transition-list li:nth-child(1)")  # b first
        assert page.js(rows) == ["10 → b", "20 → c", "100 → d"]
        assert page.js("() => window.editor.cy.getElementById('t:a:0').data('label')") == "10"
        page.tab.click("#undo")
        page.tab.click("#undo")
        assert page.doc() == definition


@browser_test
def test_llm_fsm_edit_opens_the_page_at_the_address_it_prints(opened: Any, examples: Path) -> None:
    from tests.editor.test_edit_cli import start_editor, stop

    path = examples / "quiz.json"
    original = path.read_bytes()
    child, printed = start_editor(str(path), "--no-browser", "--port", "0", cwd=examples)
    try:
        page = opened(printed["url"].split("/?")[0], token=printed["token"]).ready()
        assert page.doc() == json.loads(original) and page.codes() == []
        page.add_state("extra_question")
        assert page.tab.inner_text("#save-state") == "unsaved"
        page.tab.click("#undo")
        page.save()
    finally:
        stop(child)
    assert path.read_bytes() == original


def label_overlaps(page: Editor) -> list[list[str]]:
    """Pairs of labels (node boxes with their label, edge labels) whose boxes overlap on the drawn graph."""
    return list(
        page.js(
            """() => {
            const cy = window.editor.cy;
            const only = {includeNodes: false, includeEdges: false, includeLabels: true, includeMainLabels: true,
                          includeSourceLabels: false, includeTargetLabels: false, includeOverlays: false,
                          includeUnderlays: false};
            const boxes = [];
            cy.nodes().forEach(n => boxes.push([n.id(), n.boundingBox({includeLabels: true, includeOverlays: false,
                                                                         includeUnderlays: false})]));
            cy.edges().forEach(e => boxes.push([e.id(), e.boundingBox(only)]));
            const hits = [];
            for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const [a, p] = boxes[i], [b, q] = boxes[j];
                if (p.w > 0 && q.w > 0 && p.x1 < q.x2 && q.x1 < p.x2 && p.y1 < q.y2 && q.y1 < p.y2) hits.push([a, b]);
            }
            return hits;
        }"""
        )
    )


@browser_test
@pytest.mark.parametrize("example", ["order_flow", "insurance_claim"])
def test_the_laid_out_graph_has_no_overlapping_labels(opened: Any, examples: Path, example: str) -> None:
    with editing(examples / f"{example}.json") as base:
        page = opened(base).ready()
        edges = page.js("() => window.editor.cy.edges().map(e => e.data('label'))")
        assert len(edges) >= 10 and all(edges)  # every transition is drawn, with its label
        for direction in ("LR", "TB"):
            page.tab.select_option("#rank-dir", direction)
            assert label_overlaps(page) == [], direction
        page.screenshot(f"editor-{example}")


@browser_test
def test_global_transitions_are_drawn_from_any_state_and_follow_a_rename(opened: Any, examples: Path) -> None:
    path = examples / "insurance_claim.json"
    with editing(path) as base:
        page = opened(base).ready()
        drawn = page.js("() => window.editor.cy.edges('.global').map(e => [e.source().id(), e.target().id()])")
        assert sorted(drawn) == [["any", "s:cancelled"], ["any", "s:handover"], ["any", "s:help"]]
        page.js("() => window.editor.rename('confirm', 'final_check')")
        doc = page.doc()
        assert doc["global_transitions"][1]["except_states"] == ["final_check"]
        assert references(doc, "confirm") == 0 and page.codes() == []
        page.js("() => window.editor.connect('any', 'incident')")  # a drag from "any state": a global transition
        assert page.doc()["global_transitions"][3] == {"target_state": "incident", "priority": 60}
        assert page.js("() => window.editor.selection()") == {"kind": "global_transition", "index": 3}
        page.tab.keyboard.press("Delete")  # an edge goes without a question
        page.tab.wait_for_function("() => window.editor.doc().global_transitions.length === 3")


def test_the_vendored_files_are_the_ones_their_readmes_name() -> None:
    import hashlib

    readmes = sorted((STATIC / "vendor").glob("*/README.md"))
    assert {r.parent.name for r in readmes} == {"cytoscape", "cytoscape-edgehandles", "dagre", "lodash-shim"}
    for readme in readmes:
        named = re.findall(r"`sha256sum ([\w.-]+)`: `([0-9a-f]{64})`", readme.read_text())
        assert named or readme.parent.name == "lodash-shim", readme  # the shim is this project's own code
        for name, digest in named:
            assert hashlib.sha256((readme.parent / name).read_bytes()).hexdigest() == digest, name


@browser_test
def test_a_file_that_is_not_json_is_shown_with_its_error_and_can_start_over(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "broken",\n  "states": {,\n}\n')
    with editing(path) as base:
        page = opened(base)
        page.wait_text("#notice-text", "not a definition the editor can read")
        problem = page.tab.inner_text("#problems li")
        assert re.search(r"\b3:\d+\b", problem), problem  # where in the file
        assert page.tab.is_disabled("#save") and page.js("() => window.editor.doc()") is None
        page.tab.click("#start-empty")
        assert page.doc() == {"name": "broken", "states": {}}
        page.add_state("only")
        page.save()
    assert json.loads(path.read_text()) == {"name": "broken", "states": {"only": {}}, "initial_state": "only"}


@browser_test
def test_the_layout_goes_around_a_state_the_author_put_somewhere(opened: Any, examples: Path) -> None:
    with editing(examples / "order_flow.json") as base:
        page = opened(base).ready()
        (x1, y1), (x2, y2) = page.node_at("review"), page.node_at("payment")
        page.tab.mouse.move(x1, y1)
        page.tab.mouse.down()
        page.tab.mouse.move(x2, y2, steps=8)  # dropped onto another state
        page.tab.mouse.up()
        page.tab.wait_for_function("() => 'review' in window.editor.positions()")
        page.tab.click("#layout")
        boxes = page.js(
            "() => ['review', 'payment'].map(id => window.editor.cy.getElementById('s:' + id).boundingBox())"
        )
        review, payment = boxes
        apart = review["x2"] <= payment["x1"] or payment["x2"] <= review["x1"]
        assert apart or review["y2"] <= payment["y1"] or payment["y2"] <= review["y1"], boxes
        at = page.js("() => window.editor.cy.getElementById('s:review').position()")
        kept = page.js("() => window.editor.positions().review")
        assert (round(at["x"], 1), round(at["y"], 1)) == (kept["x"], kept["y"])


@browser_test
def test_states_written_as_a_list_stay_a_list(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "listed.json"
    definition = {
        "name": "listed",
        "initial_state": "ask",
        "states": [
            {"id": "ask", "purpose": "Ask", "transitions": [{"target_state": "end", "priority": 10}]},
            {"id": "end", "purpose": "End"},
        ],
    }
    path.write_text(json.dumps(definition, indent=2))
    with editing(path) as base:
        page = opened(base).ready()
        assert page.codes() == []
        page.add_state("loop")
        page.js("() => { window.editor.connect('ask', 'loop'); window.editor.connect('loop', 'loop'); }")
        assert "self_loop_no_exit" in page.codes()
        assert page.js("() => window.editor.cy.getElementById('s:loop').hasClass('has-warning')")
        page.js("() => window.editor.rename('loop', 'again')")
        doc = page.doc()
        assert [s["id"] for s in doc["states"]] == ["ask", "end", "again"]
        assert doc["states"][2]["transitions"] == [{"target_state": "again", "priority": 100}]
        assert doc["states"][0]["transitions"][1] == {"target_state": "again", "priority": 20}
        assert "self_loop_no_exit" in page.codes()  # checked again: the warning is on the renamed state
        assert page.js("() => window.editor.cy.getElementById('s:again').hasClass('has-warning')")


# -- round 2: what a stranger's audit found ----------------------------------------------------------------------

TWO_STATES = {
    "name": "two",
    "initial_state": "greet",
    "states": {
        "greet": {"purpose": "Greet the user", "opening": "Hello!", "transitions": [{"target_state": "bye"}]},
        "bye": {"purpose": "Say goodbye"},
    },
}


@browser_test
def test_text_not_applied_yet_is_kept_counted_and_refused_at_save(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(TWO_STATES, indent=2) + "\n")
    original = path.read_bytes()
    with editing(path) as base:
        page = opened(base).ready()
        # a new selection shows its form from the top (item 7)
        page.js("() => window.editor.select('state', 'greet')")
        page.js("() => { document.querySelector('#selection').scrollTop = 400; }")
        assert page.js("() => document.querySelector('#selection').scrollTop") > 0
        page.js("() => window.editor.select('state', 'bye')")
        assert page.js("() => document.querySelector('#selection').scrollTop") == 0

        page.js("() => window.editor.select('definition')")
        box = '#form [data-field="context_schema"]'
        page.tab.fill(box, '{"email": ')  # not JSON yet: kept in the field, not applied
        page.wait_text("#save-state", r"^unsaved: 1 field holds text not applied yet$")
        assert page.doc() == TWO_STATES and page.js("() => window.editor.pending()") == [
            {"selection": {"kind": "definition"}, "path": "context_schema"}
        ]
        leaving = "() => { const e = new Event('beforeunload', {cancelable: true}); return !window.dispatchEvent(e); }"
        assert page.js(leaving)  # the definition is as saved, but leaving would lose the text: asked first

        page.js("() => window.editor.select('state', 'greet')")  # elsewhere, the text is still counted
        assert page.tab.inner_text("#save-state").startswith("unsaved: 1 field")
        page.tab.keyboard.press("Control+s")  # refused: the save would not hold that text
        page.wait_text("#notice-text", "Not saved: 1 field holds text that is not valid yet")
        assert path.read_bytes() == original
        page.screenshot("editor-save-refused")
        page.tab.click("#notice-links button")  # the field named: its element selected, the text back in it
        assert page.js("() => window.editor.selection()") == {"kind": "definition"}
        assert page.tab.input_value(box) == '{"email": '
        assert page.js("() => document.activeElement.dataset.field") == "context_schema"
        page.tab.fill(box, '{"email": {"type": "string"}}')
        page.wait_text("#save-state", "^unsaved$")
        assert page.js("() => window.editor.pending()") == []
        page.save()
        assert page.tab.is_hidden("#notice")  # "not saved" is not true any more
        assert json.loads(path.read_text())["context_schema"] == {"email": {"type": "string"}}


@browser_test
def test_new_keys_go_at_their_schema_place_and_a_tool_added_to_a_state_is_declared(opened: Any, tmp_path: Path) -> None:
    from llm_fsm.hooks import Hooks

    hooks = Hooks()

    @hooks.tool(description="Find an order by its id.")  # type: ignore[untyped-decorator]
    def lookup(order_id: str) -> dict[str, str]:
        return {"order_id": order_id}

    path = tmp_path / "shop.json"  # a new file
    with editing(path, hooks=hooks) as base:
        page = opened(base).ready()
        page.add_state("ask")
        page.add_state("done")
        assert list(page.doc()) == ["name", "initial_state", "states"]
        page.js("() => window.editor.select('definition')")
        page.tab.fill("#form [data-field='description']", "A shop")
        assert list(page.doc()) == ["name", "description", "initial_state", "states"]
        page.js("() => window.editor.connect('ask', 'done')")
        page.js("() => window.editor.select('state', 'ask')")
        page.tab.fill("#form [data-key='purpose'] textarea", "Ask for the order")
        assert list(page.doc()["states"]["ask"]) == ["purpose", "transitions"]  # before it, as the schema says
        page.tab.fill("#form [data-field='description']", "Asks")
        assert list(page.doc()["states"]["ask"]) == ["description", "purpose", "transitions"]
        before = page.doc()
        page.tab.click('[data-catalog="tools"] [data-name="lookup"] [data-action="use"]')
        doc = page.doc()
        assert doc["states"]["ask"]["tools"] == ["lookup"]
        assert doc["tools"] == {"lookup": {}}  # declared at the top level, the least the loader takes
        keys = list(doc)
        assert keys.index("tools") > keys.index("states")  # where the schema puts it
        assert "unknown_tool" not in page.codes()
        page.tab.click("#undo")  # one step: the state's tool and its declaration
        assert page.doc() == before
        page.tab.click("#redo")
        assert page.tab.is_visible("#notice") and "a new file" in page.tab.inner_text("#notice-text")
        page.save()
        assert page.tab.is_hidden("#notice")  # "a new file" is not true any more (item 8)
        saved = json.loads(path.read_text())
        assert saved["tools"] == {"lookup": {}} and validate_strict(path).exit_code == 0


@browser_test
def test_a_file_gone_from_disk_is_saved_again_not_reloaded_empty(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(TWO_STATES, indent=2) + "\n")
    with editing(path) as base:
        page = opened(base).ready()
        page.expect_status(409)
        page.add_state("extra")
        path.unlink()  # moved or deleted by someone else
        page.tab.keyboard.press("Control+s")
        page.tab.wait_for_selector("#missing-dialog[open]")
        assert "no longer on disk" in page.tab.inner_text("#missing-dialog")
        buttons = page.tab.locator("#missing-dialog button").all_inner_texts()
        assert page.tab.is_hidden("#conflict-dialog") and buttons == ["Save it again here", "Keep editing"]  # no Reload
        page.screenshot("editor-missing-on-disk")
        page.tab.click("#missing-keep")  # nothing happens: the edits stay
        assert not path.exists() and "extra" in page.doc()["states"]
        assert page.tab.inner_text("#save-state") == "unsaved"
        page.tab.click("#save")
        page.tab.wait_for_selector("#missing-dialog[open]")
        page.tab.click("#missing-save")
        page.wait_text("#save-state", "^saved$")
        assert json.loads(path.read_text()) == page.doc() and "extra" in page.doc()["states"]


@browser_test
def test_a_file_gone_before_a_reload_is_said_gone_not_saved_empty_unless_chosen(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(TWO_STATES, indent=2) + "\n")
    with editing(path) as base:
        page = opened(base).ready()
        path.unlink()  # moved or deleted by someone else, then the author reloads the page
        page.tab.reload()
        page.wait_text("#notice-text", "no longer on disk")
        said = page.tab.inner_text("#notice")
        assert "two.json is no longer on disk (moved or deleted)" in said and "new file" not in said, said
        assert page.tab.inner_text("#save-state") != "unsaved" and page.tab.is_disabled("#save")
        assert page.js("() => window.editor.doc()") is None and page.js("() => window.editor.cy.nodes().length") == 0
        assert "missing_on_disk" in [p["code"] for p in page.js("window.editor.problems()")]
        page.screenshot("editor-gone-on-reload")
        page.tab.keyboard.press("Control+s")
        page.tab.click("#add-state")  # explains instead of adding to nothing
        page.wait_text("#notice-text", "no longer on disk")
        time.sleep(0.3)
        assert not path.exists(), "no empty definition written without the explicit choice"
        page.tab.click("#notice-links button:text('Start a new definition at this path')")
        assert page.doc() == {"name": "two", "states": {}} and page.tab.inner_text("#save-state") == "unsaved"
        page.add_state("only")
        page.save()
        assert json.loads(path.read_text())["states"] == {"only": {}}
        assert page.tab.is_hidden("#notice")


@browser_test
def test_reload_from_the_conflict_dialog_keeps_the_definition_when_the_file_is_gone(
    opened: Any, tmp_path: Path
) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(TWO_STATES, indent=2) + "\n")
    with editing(path) as base:
        page = opened(base).ready()
        page.expect_status(409)
        page.add_state("mine")
        path.write_text(json.dumps(dict(TWO_STATES, description="theirs"), indent=2) + "\n")
        page.tab.keyboard.press("Control+s")
        page.tab.wait_for_selector("#conflict-dialog[open]")
        path.unlink()  # and then gone, before the author chooses Reload
        page.tab.click("#conflict-reload")
        page.wait_text("#notice-text", "no longer on disk")
        assert "mine" in page.doc()["states"] and page.js("() => window.editor.cy.getElementById('s:mine').length") == 1
        assert page.tab.inner_text("#save-state") == "unsaved"
        page.tab.click("#save")  # asks before writing it again
        page.tab.wait_for_selector("#missing-dialog[open]")
        page.tab.click("#missing-save")
        page.wait_text("#save-state", "^saved$")
        assert "mine" in json.loads(path.read_text())["states"]


@browser_test
def test_deleting_empties_no_list_the_file_did_not_hold_and_the_initial_state_is_named(
    opened: Any, tmp_path: Path
) -> None:
    path = tmp_path / "two.json"
    path.write_text(json.dumps(TWO_STATES, indent=2) + "\n")
    with editing(path) as base:
        page = opened(base).ready()
        page.js("() => window.editor.connect('bye', 'greet')")  # bye had no transitions key
        page.js("() => window.editor.connect('any', 'bye')")  # nor the definition global_transitions
        assert page.doc()["states"]["bye"]["transitions"] == [{"target_state": "greet", "priority": 100}]
        page.js("() => window.editor.select('transition', 'bye', 0)")
        page.tab.click("#delete")
        page.tab.wait_for_function("() => !('transitions' in window.editor.doc().states.bye)")
        page.js("() => window.editor.select('global_transition', 0)")
        page.tab.click("#delete")
        page.tab.wait_for_function("() => !('global_transitions' in window.editor.doc())")
        page.js("() => window.editor.select('transition', 'greet', 0)")  # greet's list was in the file: it stays
        page.tab.click("#delete")
        page.tab.wait_for_function("() => window.editor.doc().states.greet.transitions.length === 0")
        page.tab.click("#undo")
        page.js("() => window.editor.select('state', 'greet')")
        page.tab.click("#delete")
        page.tab.wait_for_selector("#confirm-dialog[open]")
        assert "It is the initial state" in page.tab.inner_text("#confirm-text")
        page.tab.click("#confirm-cancel")
        page.js("() => window.editor.select('state', 'bye')")
        page.tab.click("#delete")
        page.tab.wait_for_selector("#confirm-dialog[open]")
        assert "initial state" not in page.tab.inner_text("#confirm-text")
        page.tab.click("#confirm-ok")
        # greet's only transition went with bye; greet's file held the list, so it stays (empty)
        page.tab.wait_for_function("() => !('bye' in window.editor.doc().states)")
        assert page.doc()["states"]["greet"]["transitions"] == []


@browser_test
def test_the_layout_direction_and_positions_are_kept_and_written_with_the_save(opened: Any, examples: Path) -> None:
    path = examples / "order_flow.json"
    layout = path.with_suffix(".layout")
    with editing(path) as base:
        page = opened(base).ready()
        assert page.tab.input_value("#rank-dir") == "auto"
        page.tab.select_option("#rank-dir", "LR")  # nothing unsaved: written at once
        for _ in range(100):
            if layout.exists():
                break
            time.sleep(0.05)
        assert json.loads(layout.read_text())["direction"] == "LR"

        page.add_state("extra")  # now unsaved: a moved state waits for the save
        x, y = page.node_at("review")
        page.tab.mouse.move(x, y)
        page.tab.mouse.down()
        page.tab.mouse.move(x + 40, y + 30, steps=5)
        page.tab.mouse.up()
        page.tab.wait_for_function("() => 'review' in window.editor.positions()")
        page.js("() => window.editor.rename('review', 'check_order')")
        time.sleep(0.3)
        assert json.loads(layout.read_text())["positions"] == {}  # the file on disk has no 'check_order' yet
        page.save()
        kept = json.loads(layout.read_text())
        assert set(kept["positions"]) == {"check_order"} and kept["direction"] == "LR"

        again = opened(base).ready()  # opened again: the direction and the place are back
        assert again.tab.input_value("#rank-dir") == "LR"
        at = again.js("() => window.editor.cy.getElementById('s:check_order').position()")
        place = kept["positions"]["check_order"]
        assert (round(at["x"], 1), round(at["y"], 1)) == (place["x"], place["y"])


@browser_test
def test_a_file_that_is_not_json_says_to_start_it_empty_first(opened: Any, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": "broken", "states": {,}}\n')
    with editing(path) as base:
        page = opened(base)
        page.wait_text("#notice-text", "not a definition the editor can read")
        assert page.tab.get_attribute("#save-state", "class") == "broken"  # not the green of "saved"
        page.tab.click("#add-state")
        assert page.tab.is_hidden("#add-state-form")
        assert "start it empty first" in page.tab.inner_text("#notice-text")
        page.tab.click("#chat-start")
        error = page.tab.inner_text("#chat-error")
        assert "start it empty first" in error and "null" not in error


def wait_file(path: Path) -> None:
    for _ in range(100):
        if path.exists():
            return
        time.sleep(0.05)


RETURNS = {
    "name": "returns",
    "initial_state": "ask",
    "states": {
        "ask": {
            "purpose": "Ask",
            "transitions": [{"target_state": "help", "priority": 10}, {"target_state": "end", "priority": 20}],
        },
        "help": {"purpose": "Help", "transitions": [{"target_state": "$return", "priority": 10}]},
        "end": {"purpose": "End"},
    },
}


@browser_test
def test_the_chat_shows_tool_calls_lights_a_return_and_forgets_stale_words(opened: Any, tmp_path: Path) -> None:
    from llm_fsm.testing import ScriptedLLM, reply, tool_calls
    from tests.editor.test_editor_api import order_hooks

    hooks = order_hooks()
    value = json.loads(json.dumps(RETURNS))
    value["tools"] = {"find_order": {"description": "Find an order by its id"}}
    value["states"]["help"]["tools"] = ["find_order"]
    path = tmp_path / "returns.json"
    path.write_text(json.dumps(value, indent=2) + "\n")
    script = [
        reply("help", "How can I help?"),  # the start: ask moves to help at once
        tool_calls(("find_order", {"order_id": "A-17"}), ("find_order", {"order_id": "none"})),
        reply("$return", "A-17 has shipped."),
    ]
    with editing(path, hooks=hooks, client_factory=lambda d: ScriptedLLM(list(script))) as base:
        page = opened(base).ready()
        page.tab.click("#chat-start")
        page.tab.wait_for_selector("#transcript li.assistant")
        page.tab.fill("#chat-message", "where is A-17?")
        page.tab.press("#chat-message", "Enter")
        page.wait_text("#transcript", "A-17 has shipped")
        lines = page.tab.locator("#transcript li.tool").all_inner_texts()
        assert lines[0] == 'tool find_order({"order_id":"A-17"}) → ok'
        assert lines[1].startswith('tool find_order({"order_id":"none"}) → failed') and "no order" in lines[1]
        # help went back where it came from: the edge to the "back" node is lit (the API names the state)
        visited = "() => window.editor.cy.edges('.visited').map(e => e.id())"
        assert "t:help:0" in page.js(visited), page.js(visited)
        assert page.js("() => window.editor.cy.getElementById('back').hasClass('visited')")
        page.screenshot("editor-chat-tools")

        # the restart offer follows every change, undo included; a rename of the current state too
        assert page.tab.is_hidden("#chat-restart")
        current = page.tab.inner_text("#chat-state").split()[1]
        page.js("id => window.editor.rename(id, 'renamed')", current)
        assert page.tab.inner_text("#chat-restart-current") == "Restart from renamed"
        page.tab.click("#undo")
        assert page.tab.is_hidden("#chat-restart")  # the definition the chat runs on again

        page.expect_status(422)
        page.js("() => window.editor.change(d => { d.initial_state = 'nowhere'; })")
        page.tab.click("#chat-start")
        page.wait_text("#chat-error", "fix the problems first")
        page.tab.click("#undo")  # the words were about the definition before: gone
        assert page.tab.inner_text("#chat-error") == ""


@browser_test
def test_a_move_drawn_from_any_state_leaves_nothing_off_the_canvas(opened: Any, examples: Path) -> None:
    with editing(examples / "insurance_claim.json") as base:
        page = opened(base).ready()
        page.tab.wait_for_function("() => !window.editor.cy.animated()")
        box = page.tab.locator("#graph").bounding_box()
        at = page.js("() => window.editor.cy.getElementById('any').renderedPosition()")
        x1, y1 = box["x"] + at["x"], box["y"] + at["y"]
        x2, y2 = page.node_at("incident")
        page.tab.click("#connect")
        mouse = page.tab.mouse
        mouse.move(x1, y1)
        mouse.down()
        for step in range(1, 11):
            mouse.move(x1 + (x2 - x1) * step / 10, y1 + (y2 - y1) * step / 10)
            time.sleep(0.02)
        time.sleep(0.15)
        mouse.move(x2 + 1, y2 + 1)
        mouse.up()
        page.tab.click("#connect")
        page.tab.wait_for_function("() => window.editor.doc().global_transitions.length === 4")
        assert page.doc()["global_transitions"][3]["target_state"] == "incident"
        time.sleep(0.2)
        inside = """() => { const cy = window.editor.cy; const b = cy.elements().renderedBoundingBox();
            return [b.x1 >= -1, b.y1 >= -1, b.x2 <= cy.width() + 1, b.y2 <= cy.height() + 1]; }"""
        assert page.js(inside) == [True, True, True, True]
