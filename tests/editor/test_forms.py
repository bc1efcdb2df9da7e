"""The editor's schema forms (``llm_fsm/editor/static/forms.js``) alone, in Debian's Chromium driven by Playwright.

A tiny starlette app serves the editor's static folder, a harness page (``forms_harness.html`` and its script, which
records every ``onChange``/``onRename``) and the schema ``llm-fsm schema`` prints, under the same
Content-Security-Policy as serve's page (scripts from the server only, no eval). One browser and one tab for the
module: each test draws a fresh form into it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.definition.json_schema import json_schema
from tests.conftest import ROOT
from tests.server.test_server import live
from tests.server.test_web_page import Page, browser, browser_test  # noqa: F401  (browser: the fixture)

HERE = Path(__file__).parent
STATIC = ROOT / "llm_fsm" / "editor" / "static"
SCHEMA = json_schema()
DEFS = SCHEMA["$defs"]
DEFINITIONS = sorted([*(ROOT / "fsm_definitions").glob("*.json"), *(ROOT / "examples").glob("*.json")])


def harness_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from llm_fsm.server.page import PAGE_HEADERS

    async def page(request: Any) -> Any:
        return FileResponse(HERE / "forms_harness.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    async def script(request: Any) -> Any:
        return FileResponse(HERE / "forms_harness.js", media_type="text/javascript")

    async def schema(request: Any) -> Any:
        return JSONResponse(SCHEMA)

    return Starlette(
        routes=[
            Route("/", page),
            Route("/forms_harness.js", script),
            Route("/schema.json", schema),
            Mount("/static", StaticFiles(directory=STATIC)),
        ]
    )


@pytest.fixture(scope="module")
def tab(browser: Any) -> Iterator[Page]:  # noqa: F811  (the imported fixture)
    with live(harness_app()) as base:
        page = Page(browser, base)
        dialogs: list[str] = []

        def dismissed(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.tab.on("dialog", dismissed)
        page.tab.wait_for_selector("body[data-ready=yes]", state="attached")
        yield page
        page.close()
        assert not dialogs, dialogs


@pytest.fixture
def form(tab: Page) -> Iterator[Any]:
    """draw(type, value, **options): a fresh form in the tab; the test then reads ``changes()``."""

    def draw(type_: str, value: Any, **options: Any) -> Any:
        made = tab.tab.evaluate("([type, value, extra]) => harness.render(type, value, extra)", [type_, value, options])
        assert made == 0  # drawing a form never calls onChange
        return tab.tab

    tab.tab.evaluate("() => { harness.drafts = {}; }")  # the page's store of text not applied, fresh per test
    yield draw
    assert not tab.problems, tab.problems  # no script error, no CSP refusal while the test ran
    tab.problems.clear()


def changes(tab: Page) -> list[Any]:
    return list(tab.tab.evaluate("() => harness.changes"))


def drafts(tab: Page) -> dict[str, Any]:
    return dict(tab.tab.evaluate("() => harness.drafts"))


def invalids(tab: Page) -> list[list[str]]:
    """Every onInvalid call's paths (sorted: the order within a call is not part of the contract)."""
    return [sorted(paths) for paths in tab.tab.evaluate("() => harness.invalids")]


def events(tab: Page) -> list[str]:
    return list(tab.tab.evaluate("() => harness.events"))


def field(name: str) -> str:
    return f'[data-field="{name}"]'


def error_of(tab: Page, key: str) -> str:
    """The error of the form's own field KEY (not of the cards drawn inside it)."""
    return str(tab.tab.locator(f'#form > .sf-form > .sf-field[data-key="{key}"] > .sf-error').inner_text())


def fields_shown(tab: Page) -> list[dict[str, Any]]:
    return list(
        tab.tab.evaluate(
            """() => Array.from(document.querySelectorAll('#form .sf-form > .sf-field')).map((box) => ({
                key: box.dataset.key,
                label: box.querySelector('label').textContent,
                help: (box.querySelector('.sf-help') || {}).textContent || null,
                title: box.title,
                required: box.querySelector('.sf-required') !== null,
                inputs: Array.from(box.querySelectorAll('[data-field]')).map((node) => node.dataset.field),
                labelled: document.getElementById(box.querySelector('label').htmlFor) !== null,
            }))"""
        )
    )


def test_the_forms_script_inserts_no_html_and_runs_no_code_from_text() -> None:
    script = (STATIC / "forms.js").read_text()
    for risky in ("innerHTML", "eval(", "new Function", "insertAdjacentHTML", "outerHTML", "document.write"):
        assert risky not in script, risky
    assert not re.search(r"\bon[a-z]+\s*=", script)  # handlers through addEventListener only
    html = (HERE / "forms_harness.html").read_text()
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html)  # the harness too: scripts from files only


# -- every field, from the schema --------------------------------------------------------------------------


@browser_test
@pytest.mark.parametrize("type_", ["definition", *sorted(DEFS)])
def test_every_property_of_a_type_has_an_input_in_schema_order_with_its_title_and_description(
    tab: Page, form: Any, type_: str
) -> None:
    schema = SCHEMA if type_ == "definition" else DEFS[type_]
    form(type_, {})
    shown = fields_shown(tab)
    assert [box["key"] for box in shown] == list(schema["properties"])
    for box in shown:
        prop = schema["properties"][box["key"]]
        assert box["label"] == prop.get("title", box["key"].capitalize()), box
        description = prop.get("description")
        if description is None and "anyOf" in prop:  # a $ref'd object's description is its own
            description = next(
                (DEFS[b["$ref"].rsplit("/", 1)[1]].get("description") for b in prop["anyOf"] if "$ref" in b), None
            )
        if description:
            assert box["help"] == description and box["title"] == description, box
        assert box["required"] == (box["key"] in schema.get("required", [])), box
        assert box["labelled"] and box["inputs"], box
        assert box["inputs"][0].split(".")[0] == box["key"], box
    assert changes(tab) == []


@browser_test
def test_omitted_fields_are_left_out_and_a_prefix_names_the_inputs_by_their_path(tab: Page, form: Any) -> None:
    form("State", {"purpose": "p", "transitions": []}, omit=["transitions", "id"])
    keys = [box["key"] for box in fields_shown(tab)]
    assert "transitions" not in keys and "id" not in keys and keys[0] == "description"
    form("Transition", {"target_state": "b", "priority": 5}, prefix="transitions.0.", stateIds=["a", "b"])
    assert tab.tab.input_value(field("transitions.0.priority")) == "5"
    assert tab.tab.input_value(field("transitions.0.target_state")) == "b"
    tab.tab.fill(field("transitions.0.priority"), "-1")
    assert changes(tab)[-1] == {"target_state": "b", "priority": -1}


@browser_test
def test_an_enum_is_a_select_of_exactly_the_schemas_choices_and_unset_removes_the_key(tab: Page, form: Any) -> None:
    page = form("State", {"purpose": "p"})
    choices = page.eval_on_selector_all(
        f"select{field('on_exhausted')} option:not([data-unset])", "options => options.map(o => o.value)"
    )
    assert choices == DEFS["State"]["properties"]["on_exhausted"]["enum"]
    assert page.input_value(field("on_exhausted")) == ""  # absent: the default shows, nothing is written
    page.select_option(field("on_exhausted"), "raise")
    assert changes(tab)[-1] == {"purpose": "p", "on_exhausted": "raise"}
    page.select_option(field("on_exhausted"), "")
    assert changes(tab)[-1] == {"purpose": "p"}
    form("definition", {"name": "x"})
    choices = page.eval_on_selector_all(
        f"select{field('tool_error_detail')} option:not([data-unset])", "options => options.map(o => o.value)"
    )
    assert choices == ["message", "type"]


# -- the value: only what the author changed ---------------------------------------------------------------


@browser_test
def test_editing_a_text_field_changes_only_that_key_in_place_and_a_new_key_goes_last(tab: Page, form: Any) -> None:
    state = {"description": "d", "purpose": "p", "instructions": "i", "transitions": [{"target_state": "b"}]}
    page = tab.tab
    page.evaluate(
        "(state) => { window.given = state; harness.render('State', state, {omit: ['transitions']}); }", state
    )
    page.fill(field("purpose"), "Ask for the email")
    last = changes(tab)[-1]
    assert list(last) == list(state) and last == {**state, "purpose": "Ask for the email"}
    page.fill(field("opening"), "Hello {{ name }}")
    last = changes(tab)[-1]
    assert list(last) == [*state, "opening"] and last["opening"] == "Hello {{ name }}"
    # emptied and typed again, the key is back where the file had it
    page.fill(field("description"), "")
    assert "description" not in changes(tab)[-1]
    page.fill(field("description"), "again")
    assert list(changes(tab)[-1]) == [*state, "opening"]
    assert page.evaluate("() => harness.handle.value()") == changes(tab)[-1]
    assert page.evaluate("() => window.given") == state  # the object the page gave is not changed under it
    page.evaluate("() => { harness.changes[0].purpose = 'scribbled'; }")  # nor does a change share its parts
    assert page.evaluate("() => harness.handle.value().purpose") == "Ask for the email"


# Every state and transition of a definition drawn as a form and read back, in the page: what differs.
UNTOUCHED = """(definition) => {
  const differs = [];
  const states = Array.isArray(definition.states) ? definition.states : Object.values(definition.states);
  const catalog = {tools: [], checks: [], handlers: []};
  for (const state of states) {
    harness.render("State", state, {stateIds: ["a"], catalog});
    if (JSON.stringify(harness.handle.value()) !== JSON.stringify(state)) differs.push(state);
    for (const transition of state.transitions || []) {
      harness.render("Transition", transition, {stateIds: ["a"]});
      if (JSON.stringify(harness.handle.value()) !== JSON.stringify(transition)) differs.push(transition);
    }
  }
  return differs;
}"""


@browser_test
def test_an_untouched_form_changes_nothing_even_when_focused_and_left(tab: Page, form: Any) -> None:
    for path in DEFINITIONS:
        definition = json.loads(path.read_text())
        form("definition", definition, omit=["states"])
        for name in ("name", "description", "context_schema", "max_tool_rounds"):
            tab.tab.focus(field(name))
            tab.tab.keyboard.press("Tab")
        assert changes(tab) == [], path.name
        assert json.dumps(tab.tab.evaluate("() => harness.handle.value()")) == json.dumps(definition), path.name
        assert tab.tab.evaluate(UNTOUCHED, definition) == [], path.name
        assert changes(tab) == [], path.name


@browser_test
def test_clearing_an_optional_field_removes_its_key_and_a_default_is_never_written(tab: Page, form: Any) -> None:
    page = form("State", {"purpose": "p", "max_retries": 3, "acts": True, "tools": ["t"]})
    page.fill(field("purpose"), "")
    assert changes(tab)[-1] == {"max_retries": 3, "acts": True, "tools": ["t"]}
    page.fill(field("max_retries"), "")
    assert changes(tab)[-1] == {"acts": True, "tools": ["t"]}
    page.click('[data-clear="acts"]')
    assert changes(tab)[-1] == {"tools": ["t"]}
    assert not page.is_checked(field("acts"))  # redrawn: the default (false) shows
    page.click('.sf-field[data-key="tools"] [data-action="remove"]')
    assert changes(tab)[-1] == {}
    # a checkbox turned on and off again on a key the file did not have leaves no key
    page.check(field("acts"))
    assert changes(tab)[-1] == {"acts": True}
    page.uncheck(field("acts"))
    assert changes(tab)[-1] == {}
    # unchecked back to the default: the key goes, unless the file itself spelled the default out
    page = form("Transition", {"target_state": "b", "automatic": False})
    page.check(field("automatic"))
    page.uncheck(field("automatic"))
    assert changes(tab) == [{"target_state": "b", "automatic": True}, {"target_state": "b", "automatic": False}]
    # what the file had as empty stays as it was (null stays null, not removed)
    page = form("State", {"opening": None})
    page.fill(field("opening"), "Hi")
    page.fill(field("opening"), "")
    assert changes(tab) == [{"opening": "Hi"}, {"opening": None}]


@browser_test
def test_numbers_keep_to_the_schemas_range_and_type(tab: Page, form: Any) -> None:
    page = form("State", {"max_retries": 1})
    assert page.get_attribute(field("max_retries"), "min") == "0"
    assert page.get_attribute(field("max_retries"), "max") == "10"
    page.fill(field("max_retries"), "11")
    assert "max_retries: at most 10" in error_of(tab, "max_retries") and changes(tab) == []
    page.fill(field("max_retries"), "1.5")
    assert "max_retries: expected integer, got number" in error_of(tab, "max_retries") and changes(tab) == []
    assert page.input_value(field("max_retries")) == "1.5"  # kept as typed
    page.fill(field("max_retries"), "4")
    assert changes(tab) == [{"max_retries": 4}]
    assert not page.is_visible('.sf-field[data-key="max_retries"] .sf-error')


@browser_test
def test_a_pattern_is_checked_as_you_type(tab: Page, form: Any) -> None:
    page = form("State", {"id": "greet", "purpose": "p"})
    page.fill(field("id"), "not an id")
    assert '"not an id" does not match' in error_of(tab, "id") and changes(tab) == []
    page.fill(field("id"), "welcome")
    assert changes(tab) == [{"id": "welcome", "purpose": "p"}]


@browser_test
def test_the_id_field_of_a_state_form_renames_through_on_rename_once_typed(tab: Page, form: Any) -> None:
    page = form("State", {"purpose": "p"}, rename=True, id="greet", stateIds=["greet", "done"])
    assert page.input_value(field("id")) == "greet"
    page.fill(field("id"), "done")
    page.press(field("id"), "Enter")
    page.fill(field("id"), "bad id")
    page.locator(field("id")).blur()
    assert "already a state" not in error_of(tab, "id") and "does not match" in error_of(tab, "id")
    page.fill(field("id"), "welcome")
    page.locator(field("id")).blur()
    assert tab.tab.evaluate("() => harness.renames") == ["welcome"] and changes(tab) == []


@browser_test
def test_a_list_of_strings_adds_moves_and_removes_items(tab: Page, form: Any) -> None:
    page = form("State", {"required_context_keys": ["name"]})
    page.fill(field("required_context_keys.new"), "email")
    page.press(field("required_context_keys.new"), "Enter")
    assert changes(tab)[-1] == {"required_context_keys": ["name", "email"]}
    page.click('.sf-field[data-key="required_context_keys"] li:nth-child(2) [data-action="up"]')
    assert changes(tab)[-1] == {"required_context_keys": ["email", "name"]}
    page.fill(field("required_context_keys.1"), "full_name")
    assert changes(tab)[-1] == {"required_context_keys": ["email", "full_name"]}
    page.click('.sf-field[data-key="required_context_keys"] li:nth-child(1) [data-action="remove"]')
    assert changes(tab)[-1] == {"required_context_keys": ["full_name"]}


@browser_test
def test_state_fields_choose_among_the_definitions_states(tab: Page, form: Any) -> None:
    page = form("Transition", {"target_state": "gone"}, stateIds=["greet", "done"])
    choices = page.eval_on_selector_all(
        f"select{field('target_state')} option:not([data-unset])", "options => options.map(o => o.value)"
    )
    assert choices == ["greet", "done", "$return", "gone"]  # the file's unknown target kept, with a warning
    assert "gone: no such state" in page.locator('.sf-field[data-key="target_state"] .sf-notes').inner_text()
    page.select_option(field("target_state"), "$return")
    assert changes(tab)[-1] == {"target_state": "$return"}
    page = form("GlobalTransition", {"target_state": "done"}, stateIds=["greet", "done"])
    page.fill(field("except_states.new"), "nowhere")
    page.press(field("except_states.new"), "Enter")
    assert changes(tab)[-1] == {"target_state": "done", "except_states": ["nowhere"]}
    assert "no such state" in page.locator('.sf-field[data-key="except_states"] li').inner_text()
    page = form("definition", {"name": "n", "initial_state": "greet"}, stateIds=["greet", "done"])
    assert page.input_value(field("initial_state")) == "greet"
    choices = page.eval_on_selector_all(
        f"select{field('initial_state')} option:not([data-unset])", "options => options.map(o => o.value)"
    )
    assert choices == ["greet", "done"]


# -- JSON fields --------------------------------------------------------------------------------------------


@browser_test
def test_bad_json_in_conditions_says_line_and_column_keeps_the_text_and_applies_nothing(tab: Page, form: Any) -> None:
    page = form("Transition", {"target_state": "b", "conditions": []})
    text = '[\n  {"description": "has email",\n  }\n]'
    page.fill(field("conditions"), text)
    assert "conditions: not JSON, line 3:3" in error_of(tab, "conditions")
    assert page.input_value(field("conditions")) == text and changes(tab) == []
    assert page.get_attribute(field("conditions"), "aria-invalid") == "true"
    assert tab.tab.evaluate("() => harness.handle.invalid()") == ["conditions"]
    page.fill(field("conditions"), '[{"description": "x"')
    assert "line 1:21" in error_of(tab, "conditions") and changes(tab) == []


@browser_test
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"description": "x", "colour": 1}]', "conditions[0].colour: not allowed (Condition has no such field"),
        ('[{"requires_context_keys": "email"}]', "conditions[0].requires_context_keys: expected array, got string"),
        (
            '[{"requires_context_keys": ["a", 2]}]',
            "conditions[0].requires_context_keys[1]: expected string, got integer",
        ),
        ('[{"logic": "yes"}]', "conditions[0].logic: expected object, boolean or null, got string"),
        ('{"description": "x"}', "conditions: expected array, got object"),
    ],
)
def test_a_condition_the_schema_refuses_names_the_path_and_is_not_applied(
    tab: Page, form: Any, text: str, message: str
) -> None:
    page = form("Transition", {"target_state": "b"})
    page.fill(field("conditions"), text)
    assert message in error_of(tab, "conditions")
    assert changes(tab) == []


@browser_test
def test_a_valid_condition_applies_and_clears_the_error(tab: Page, form: Any) -> None:
    page = form("Transition", {"target_state": "b", "priority": 10})
    page.fill(field("conditions"), "[1")
    page.fill(field("conditions"), '[{"requires_context_keys": ["email"], "logic": {"==": [{"var": "ok"}, true]}}]')
    assert changes(tab) == [
        {
            "target_state": "b",
            "priority": 10,
            "conditions": [{"requires_context_keys": ["email"], "logic": {"==": [{"var": "ok"}, True]}}],
        }
    ]
    assert not page.is_visible('.sf-field[data-key="conditions"] .sf-error')
    page.fill(field("conditions"), "")
    assert changes(tab)[-1] == {"target_state": "b", "priority": 10}


@browser_test
def test_json_fields_check_their_refd_types(tab: Page, form: Any) -> None:
    page = form("State", {})
    page.fill(field("checks"), '[{"kind": "regex"}]')
    assert "checks[0].pattern: required (missing)" in error_of(tab, "checks")
    page.fill(field("checks"), '[{"kind": "nope"}]')
    assert 'checks[0].kind: must be one of "judge"' in error_of(tab, "checks")
    page.fill(field("checks"), '[{"kind": "max_length", "max": 0}]')
    assert "checks[0].max: at least" in error_of(tab, "checks") or "checks[0].max" in error_of(tab, "checks")
    assert changes(tab) == []
    page = form("definition", {"name": "n"}, omit=["states"])
    page.fill(field("memory"), '{"slots": {"notes": {"max_chars": "many"}}}')
    assert "memory.slots.notes.max_chars: expected integer, got string" in error_of(tab, "memory")
    page.fill(field("tools"), '{"lookup": {"timeout": 0}}')
    assert "tools.lookup.timeout: more than 0" in error_of(tab, "tools")
    assert changes(tab) == []


@browser_test
def test_validate_accepts_every_example_and_names_what_is_wrong(tab: Page, form: Any) -> None:
    form("State", {})
    for path in DEFINITIONS:
        problems = tab.tab.evaluate(
            "(value) => SchemaForms.validate(harness.schema, 'definition', value)", json.loads(path.read_text())
        )
        assert problems == [], (path.name, problems)
    problems = tab.tab.evaluate(
        "() => SchemaForms.validate(harness.schema, 'Transition', {priority: 'high', extra: 1})"
    )
    assert problems == [
        "target_state: required (missing)",
        "priority: expected integer, got string",
        "extra: not allowed (Transition has no such field; fields: target_state, description, priority, conditions,"
        " clear_keys, automatic)",
    ]


# -- text stays text; what --hooks provides ----------------------------------------------------------------

HOSTILE = "<img src=x onerror=alert(1)>"


@browser_test
def test_every_text_is_inserted_as_text(tab: Page, form: Any) -> None:
    page = form(
        "State",
        {"purpose": HOSTILE, "description": HOSTILE, "tools": [HOSTILE], HOSTILE: HOSTILE, "on_exhausted": HOSTILE},
        catalog={"tools": [{"name": HOSTILE, "description": HOSTILE, "parameters": {"properties": {HOSTILE: {}}}}]},
        stateIds=[HOSTILE],
    )
    assert page.input_value(field("purpose")) == HOSTILE
    assert page.input_value(field("tools.0")) == HOSTILE
    assert HOSTILE in page.locator(f'.sf-field[data-key="{HOSTILE}"]').inner_text()
    assert HOSTILE in page.locator('[data-catalog="tools"]').inner_text()
    page = form("Transition", {"target_state": HOSTILE}, stateIds=[HOSTILE])
    assert page.input_value(field("target_state")) == HOSTILE
    assert page.evaluate("() => document.querySelectorAll('img').length") == 0


# llm_fsm.editor.catalog's shape (editor-api), written out: the forms read only these members
CATALOG = {
    "tools": [
        {
            "name": "lookup_order",
            "description": "Find an order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
                "required": ["order_id"],
            },
            "required": ["order_id"],
            "declared": True,
            "registered": True,
        },
        {
            "name": "refund",
            "description": "",
            "parameters": None,
            "required": [],
            "declared": False,
            "registered": True,
        },
        {
            "name": "mcp_only",
            "description": "",
            "parameters": None,
            "required": [],
            "declared": True,
            "registered": False,
        },
    ],
    "checks": [{"name": "polite", "accepts": ["message", "context"]}, {"name": "anything", "accepts": None}],
    "handlers": [
        {
            "name": "audit",
            "timings": ["post_transition"],
            "named": True,
            "states": None,
            "targets": None,
            "keys": ["email"],
            "arguments": ["context"],
            "policy": "raise",
        }
    ],
}


@browser_test
def test_the_catalogs_tools_handlers_and_checks_show_with_what_they_need(tab: Page, form: Any) -> None:
    state = {
        "tools": ["lookup_order", "ghost", "mcp_only"],
        "handlers": ["audit", "nobody"],
        "checks": [{"kind": "python", "name": "nope"}],
    }
    page = form("State", state, catalog=CATALOG)
    tools = page.locator('[data-catalog="tools"] [data-name="lookup_order"]').inner_text()
    assert (
        "Find an order by its id." in tools and "order_id (string, required)" in tools and "verbose (boolean)" in tools
    )
    assert "no parameters" in page.locator('[data-catalog="tools"] [data-name="refund"]').inner_text()
    notes = page.locator('.sf-field[data-key="tools"] .sf-list').inner_text()
    assert "ghost: not provided by --hooks" in notes and "parameters: order_id (string, required)" in notes
    assert "mcp_only: declared in the definition's tools but not provided by --hooks" in notes
    handlers = page.locator('.sf-field[data-key="handlers"]').inner_text()
    assert (
        "runs on post_transition · when these keys change: email · takes: context" in handlers
        and "nobody: not provided by --hooks" in handlers
    )
    checks = page.locator('.sf-field[data-key="checks"]').inner_text()
    assert (
        "check nope: not provided by --hooks" in checks and "polite" in checks and "takes: message, context" in checks
    )
    assert changes(tab) == []
    page.click('[data-catalog="tools"] [data-name="refund"] [data-action="use"]')
    assert changes(tab)[-1]["tools"] == ["lookup_order", "ghost", "mcp_only", "refund"]
    page.click('[data-catalog="checks"] [data-name="polite"] [data-action="use"]')
    assert changes(tab)[-1]["checks"] == [{"kind": "python", "name": "nope"}, {"kind": "python", "name": "polite"}]
    assert list(changes(tab)[-1]) == ["tools", "handlers", "checks"]


@browser_test
def test_a_catalog_keyed_by_name_or_a_list_of_names_is_read_too(tab: Page, form: Any) -> None:
    page = form("State", {"tools": ["a"]}, catalog={"tools": {"a": {"description": "Tool A"}}, "handlers": ["h"]})
    assert "Tool A" in page.locator('[data-catalog="tools"] [data-name="a"]').inner_text()
    assert page.locator('[data-catalog="handlers"] [data-name="h"]').count() == 1
    for nothing_known in (None, {}, {"checks": []}):  # no word on tools: nothing to warn about
        form("State", {"tools": ["a"]}, catalog=nothing_known)
        assert "not provided" not in page.locator('.sf-field[data-key="tools"]').inner_text()
    form("State", {"tools": ["a"]}, catalog={"tools": []})
    assert "a: not provided by --hooks" in page.locator('.sf-field[data-key="tools"]').inner_text()


@browser_test
def test_conditions_are_also_edited_one_by_one_in_step_with_their_json(tab: Page, form: Any) -> None:
    transition = {"target_state": "b", "conditions": [{"description": "has email", "requires_context_keys": ["email"]}]}
    page = form("Transition", transition, prefix="transitions.0.")
    assert page.input_value(field("transitions.0.conditions.0.description")) == "has email"
    page.fill(field("transitions.0.conditions.0.description"), "knows the email")
    page.fill(field("transitions.0.conditions.0.requires_context_keys.new"), "name")
    page.press(field("transitions.0.conditions.0.requires_context_keys.new"), "Enter")
    assert changes(tab)[-1] == {
        "target_state": "b",
        "conditions": [{"description": "knows the email", "requires_context_keys": ["email", "name"]}],
    }
    assert json.loads(page.input_value(field("transitions.0.conditions"))) == changes(tab)[-1]["conditions"]
    page.fill(field("transitions.0.conditions.0.logic"), '"yes"')
    assert (
        "transitions[0].conditions[0].logic: expected object, boolean or null, got string"
        in page.locator('.sf-card .sf-field[data-key="logic"] .sf-error').inner_text()
    )
    assert tab.tab.evaluate("() => harness.handle.invalid()") == ["transitions.0.conditions.0.logic"]
    count = len(changes(tab))
    page.fill(field("transitions.0.conditions.0.logic"), '{"==": [{"var": "ok"}, true]}')
    assert len(changes(tab)) == count + 1 and changes(tab)[-1]["conditions"][0]["logic"] == {
        "==": [{"var": "ok"}, True]
    }
    page.click('[data-cards="transitions.0.conditions"] [data-action="add-item"]')
    assert changes(tab)[-1]["conditions"][1] == {}
    page.click('[data-cards="transitions.0.conditions"] .sf-card[data-index="0"] [data-action="remove"]')
    assert changes(tab)[-1] == {"target_state": "b", "conditions": [{}]}
    # the JSON box redraws the cards; while it holds what is not applied, the cards cannot overwrite it
    page.fill(field("transitions.0.conditions"), '[{"description": "typed"}, {"description": "two"}]')
    assert page.input_value(field("transitions.0.conditions.1.description")) == "two"
    page.fill(field("transitions.0.conditions"), '[{"description": "typ')
    assert page.is_disabled(field("transitions.0.conditions.0.description"))
    page.fill(field("transitions.0.conditions"), "")
    assert changes(tab)[-1] == {"target_state": "b"}
    assert page.locator('[data-cards="transitions.0.conditions"] .sf-card').count() == 0


@browser_test
def test_a_field_of_several_kinds_is_json_checked_against_each_kind(tab: Page, form: Any) -> None:
    page = form("State", {"purpose": "p"})
    page.fill(field("corrections"), '"email"')
    assert "corrections: expected boolean, a list of strings or null, got string" in error_of(tab, "corrections")
    page.fill(field("corrections"), '["email"]')
    page.fill(field("corrections"), "true")
    assert changes(tab) == [{"purpose": "p", "corrections": ["email"]}, {"purpose": "p", "corrections": True}]


@browser_test
def test_an_optional_boolean_without_a_default_is_unset_true_or_false(tab: Page, form: Any) -> None:
    schema = {
        "$defs": {
            "Flags": {
                "type": "object",
                "properties": {
                    "strict": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "description": "Be strict."}
                },
            }
        }
    }
    page = form("Flags", {}, schema=schema)
    assert page.eval_on_selector_all(f"{field('strict')} option", "options => options.map(o => o.value)") == [
        "",
        "true",
        "false",
    ]
    page.select_option(field("strict"), "false")
    page.select_option(field("strict"), "")
    assert changes(tab) == [{"strict": False}, {}]


@browser_test
def test_the_catalog_the_editor_serves_shows_beside_the_fields_that_name_it(tab: Page, form: Any) -> None:
    catalog = pytest.importorskip("llm_fsm.editor.catalog", reason="the editor's API (branch editor-api)").catalog
    from llm_fsm import Hooks

    hooks = Hooks()

    @hooks.tool(description="Find an order by its id.")
    def lookup_order(order_id: str, verbose: bool = False) -> dict[str, Any]:
        return {}

    @hooks.check("polite")
    def polite(message: str) -> bool:
        return True

    @hooks.handler("audit", on="after_reply")
    def audit(context: dict[str, Any]) -> None:
        return None

    served = json.loads(json.dumps(catalog(hooks, {"tools": {"lookup_order": {}}})))
    page = form("State", {"tools": ["lookup_order", "ghost"], "handlers": ["audit"]}, catalog=served)
    tools = page.locator('.sf-field[data-key="tools"]').inner_text()
    assert "order_id (string, required)" in tools and "Find an order by its id." in tools
    assert "ghost: not provided by --hooks" in tools
    handlers = page.locator('.sf-field[data-key="handlers"]').inner_text()
    assert "runs on after_reply" in handlers and "takes: context" in handlers
    assert "takes: message" in page.locator('.sf-field[data-key="checks"]').inner_text()


# -- text not applied yet: the page's drafts (editor-fixes, forms 1) ---------------------------------------


@browser_test
def test_text_not_applied_is_kept_in_the_pages_drafts_and_comes_back_with_its_error(tab: Page, form: Any) -> None:
    state = {"purpose": "p", "max_retries": 1}
    page = form("State", state, drafts=True)
    page.fill(field("max_retries"), "11")
    page.fill(field("checks"), '[{"kind": "regex"')
    assert drafts(tab) == {"max_retries": "11", "checks": '[{"kind": "regex"'}
    assert invalids(tab) == [[], ["max_retries"], ["checks", "max_retries"]]  # once drawn, then each change
    assert changes(tab) == []
    form("Transition", {"target_state": "b"}, drafts=True)  # another element selected (its form knows no drafts)
    assert page.input_value(field("target_state")) == "b" and invalids(tab) == [[]]
    form("State", state, drafts=True)  # and back: the text is there again, with its error
    assert page.input_value(field("max_retries")) == "11" and "max_retries: at most 10" in error_of(tab, "max_retries")
    assert page.input_value(field("checks")) == '[{"kind": "regex"'
    assert "checks: not JSON, line 1:18" in error_of(tab, "checks")
    assert invalids(tab) == [["checks", "max_retries"]]  # told once, as drawn
    assert sorted(page.evaluate("() => harness.handle.invalid()")) == ["checks", "max_retries"]
    assert changes(tab) == [] and page.evaluate("() => harness.handle.value()") == state
    page.fill(field("max_retries"), "4")
    assert changes(tab) == [{"purpose": "p", "max_retries": 4}]
    assert drafts(tab) == {"checks": '[{"kind": "regex"'} and invalids(tab)[-1] == ["checks"]
    page.fill(field("checks"), "")  # emptied: nothing held any more, nothing written
    assert drafts(tab) == {} and invalids(tab)[-1] == [] and changes(tab) == [{"purpose": "p", "max_retries": 4}]
    # a field's key removed with its × forgets what it held
    page.fill(field("purpose"), "")
    page.fill(field("max_retries"), "-1")
    assert drafts(tab) == {"max_retries": "-1"}
    page.click('[data-clear="max_retries"]')
    assert drafts(tab) == {} and invalids(tab)[-1] == [] and changes(tab)[-1] == {}
    assert page.input_value(field("max_retries")) == ""


@browser_test
def test_a_value_the_file_holds_wrongly_is_shown_but_is_no_draft(tab: Page, form: Any) -> None:
    page = form("State", {"max_retries": "many", "purpose": 3}, drafts=True)
    assert "not a number" in error_of(tab, "max_retries") and "not a text" in error_of(tab, "purpose")
    assert page.evaluate("() => harness.handle.invalid()") == [] and drafts(tab) == {} and invalids(tab) == [[]]
    page.fill(field("max_retries"), "20")  # typed: now it is the author's text
    assert drafts(tab) == {"max_retries": "20"} and invalids(tab) == [[], ["max_retries"]]


@browser_test
def test_a_restored_draft_the_schema_accepts_is_applied_once_drawn_never_while_drawing(tab: Page, form: Any) -> None:
    tab.tab.evaluate("() => { harness.drafts = {max_retries: '5', purpose: 'typed'}; }")
    made = tab.tab.evaluate("() => harness.render('State', {purpose: 'p'}, {drafts: true})")
    assert made == 0
    assert changes(tab) == [{"purpose": "typed", "max_retries": 5}] and drafts(tab) == {}
    assert tab.tab.input_value(field("max_retries")) == "5"


@browser_test
def test_drafts_of_a_list_and_of_the_rename_field(tab: Page, form: Any) -> None:
    schema = {
        "$defs": {
            "Names": {
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}},
            }
        }
    }
    page = form("Names", {"names": ["ann"]}, schema=schema, drafts=True)
    page.fill(field("names.new"), "Bob")
    page.press(field("names.new"), "Enter")
    assert drafts(tab) == {"names": ["ann", "Bob"]} and changes(tab) == []
    form("Names", {"names": ["ann"]}, schema=schema, drafts=True)
    assert page.input_value(field("names.1")) == "Bob" and '"Bob" does not match' in error_of(tab, "names")
    page.fill(field("names.1"), "bob")
    assert changes(tab) == [{"names": ["ann", "bob"]}] and drafts(tab) == {}
    page = form("State", {"purpose": "p"}, rename=True, id="greet", stateIds=["greet"], drafts=True)
    page.fill(field("id"), "bad id")
    assert drafts(tab) == {"id": "bad id"} and invalids(tab) == [[], ["id"]]
    form("State", {"purpose": "p"}, rename=True, id="greet", stateIds=["greet"], drafts=True)
    assert page.input_value(field("id")) == "bad id" and "does not match" in error_of(tab, "id")
    assert tab.tab.evaluate("() => harness.renames") == []


@browser_test
def test_a_cards_draft_follows_its_card_and_goes_when_the_json_box_replaces_the_list(tab: Page, form: Any) -> None:
    transition = {"target_state": "b", "conditions": [{"description": "one"}, {"description": "two"}]}
    page = form("Transition", transition, drafts=True)
    page.fill(field("conditions.1.logic"), '"yes"')
    assert drafts(tab) == {"conditions.1.logic": '"yes"'} and invalids(tab) == [[], ["conditions.1.logic"]]
    page.click('[data-cards="conditions"] .sf-card[data-index="0"] [data-action="remove"]')
    assert changes(tab)[-1] == {"target_state": "b", "conditions": [{"description": "two"}]}
    assert drafts(tab) == {"conditions.0.logic": '"yes"'} and invalids(tab)[-1] == ["conditions.0.logic"]
    assert page.input_value(field("conditions.0.description")) == "two"
    assert page.input_value(field("conditions.0.logic")) == '"yes"'
    form("Transition", {"target_state": "b", "conditions": [{"description": "two"}]}, drafts=True)
    assert page.input_value(field("conditions.0.logic")) == '"yes"' and invalids(tab) == [["conditions.0.logic"]]
    logic = page.locator('.sf-card .sf-field[data-key="logic"] .sf-error').inner_text()
    assert "expected object, boolean or null" in logic
    page.fill(field("conditions"), '[{"description": "new"}]')
    assert drafts(tab) == {} and invalids(tab)[-1] == []
    assert changes(tab)[-1] == {"target_state": "b", "conditions": [{"description": "new"}]}


# -- tools: declared at the top level (forms 2) ------------------------------------------------------------


@browser_test
def test_a_tool_added_in_a_state_is_declared_through_on_use_tool(tab: Page, form: Any) -> None:
    page = form("State", {"tools": []}, catalog=CATALOG, useTool=True)
    page.click('[data-catalog="tools"] [data-name="refund"] [data-action="use"]')
    assert changes(tab) == [{"tools": ["refund"]}] and events(tab) == ["invalid", "change", "tool refund"]
    page.fill(field("tools.new"), "lookup_order")  # a name the catalog knows, typed
    page.press(field("tools.new"), "Enter")
    assert changes(tab)[-1] == {"tools": ["refund", "lookup_order"]}
    assert events(tab)[-2:] == ["change", "tool lookup_order"]
    page.fill(field("tools.new"), "ghost")  # a name nobody knows (a typo?): not declared on its own
    page.press(field("tools.new"), "Enter")
    assert changes(tab)[-1] == {"tools": ["refund", "lookup_order", "ghost"]} and events(tab)[-1] == "change"
    row = page.locator('.sf-field[data-key="tools"] .sf-list li:nth-child(3)')
    assert "ghost: not provided by --hooks" in row.inner_text()
    row.locator('[data-action="declare"]').click()  # unless the author asks
    assert tab.tab.evaluate("() => harness.tools") == ["refund", "lookup_order", "ghost"]
    form("State", {"tools": ["ghost"]}, catalog=CATALOG)  # no onUseTool: no Declare offered
    assert page.locator('[data-action="declare"]').count() == 0


@browser_test
def test_the_top_level_tools_offer_the_catalogs_tools_to_declare_minimally(tab: Page, form: Any) -> None:
    import llm_fsm

    definition = {
        "name": "n",
        "initial_state": "a",
        "tools": {"lookup_order": {}},
        "states": {"a": {"purpose": "p", "tools": ["lookup_order", "refund"]}},
    }
    page = form("definition", definition, omit=["states"], catalog=CATALOG)
    offered = '.sf-field[data-key="tools"] [data-catalog="tools"]'
    assert page.eval_on_selector_all(f"{offered} li", "rows => rows.map(r => r.dataset.name)") == [
        "lookup_order",
        "refund",
    ]  # what --hooks provides (mcp_only is only declared)
    lookup = page.locator(f'{offered} [data-name="lookup_order"]')
    assert "declared here" in lookup.inner_text() and "order_id (string, required)" in lookup.inner_text()
    assert lookup.locator('[data-action="declare"]').count() == 0
    page.click(f'{offered} [data-name="refund"] [data-action="declare"]')
    declared = changes(tab)[-1]
    assert declared["tools"] == {"lookup_order": {}, "refund": {}} and list(declared) == list(definition)
    assert json.loads(page.input_value(field("tools"))) == declared["tools"]
    assert "declared here" in page.locator(f'{offered} [data-name="refund"]').inner_text()
    loaded = llm_fsm.load(declared)  # the minimal declaration is one the loader takes: no unknown tool
    assert sorted(loaded.tools) == ["lookup_order", "refund"]
    with pytest.raises(Exception, match="unknown tool 'refund'"):
        llm_fsm.load({**definition, "tools": {"lookup_order": {}}})
    page = form("definition", {"name": "n"}, omit=["states"], catalog=CATALOG)
    page.fill(field("tools"), "{")
    page.click(f'{offered} [data-name="refund"] [data-action="declare"]')
    assert "tools: fix the JSON first (an object of tools by name)" in error_of(tab, "tools")
    assert page.input_value(field("tools")) == "{" and changes(tab) == []


# -- notes, unset choices, key order (forms 3-5) -----------------------------------------------------------


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@browser_test
def test_catalog_notes_are_each_on_their_own_line(tab: Page, form: Any) -> None:
    page = form("State", {"tools": ["ghost"], "checks": [{"kind": "python", "name": "nope"}]}, catalog=CATALOG)
    text = page.locator('#form > .sf-form > .sf-field[data-key="checks"] > .sf-notes').inner_text()
    assert lines(text)[:2] == ["check nope: not provided by --hooks", "Checks --hooks provides:"]
    assert "--hooksChecks" not in text and "takes: message, context" in lines(text)
    assert "ghost: not provided by --hooks" in lines(page.locator(".sf-list li").inner_text())
    row = lines(page.locator('[data-catalog="tools"] [data-name="lookup_order"]').inner_text())
    assert row[0] == "lookup_order — Find an order by its id." and row[1].startswith("parameters: order_id")


@browser_test
def test_choosing_the_unset_option_removes_the_key_and_never_writes_an_empty_text(tab: Page, form: Any) -> None:
    page = form("definition", {"name": "n", "initial_state": "greet"}, stateIds=["greet", "done"])
    page.select_option(field("initial_state"), "")
    assert changes(tab) == [{"name": "n"}]
    page = form("GlobalTransition", {"target_state": "done", "priority": 1}, stateIds=["greet", "done"])
    page.select_option(field("target_state"), "")
    assert changes(tab) == [{"priority": 1}]
    schema = {
        "$defs": {
            "Pick": {
                "type": "object",
                "required": ["mode"],
                "properties": {
                    "mode": {"enum": ["a", "b"]},
                    "strict": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
                },
            }
        }
    }
    page = form("Pick", {"strict": None}, schema=schema)
    page.select_option(field("mode"), "a")
    page.select_option(field("mode"), "")
    page.select_option(field("strict"), "true")
    page.select_option(field("strict"), "")  # the file's null stays null
    assert changes(tab) == [{"strict": None, "mode": "a"}, {"strict": None}, {"strict": True}, {"strict": None}]


@browser_test
def test_a_new_key_goes_at_its_schema_order_place_and_no_key_moves(tab: Page, form: Any) -> None:
    page = form("State", {"purpose": "p", "tools": ["t"]})
    page.fill(field("description"), "d")
    assert list(changes(tab)[-1]) == ["description", "purpose", "tools"]
    page.fill(field("max_retries"), "3")
    assert list(changes(tab)[-1]) == ["description", "purpose", "tools", "max_retries"]
    page.fill(field("instructions"), "i")
    assert list(changes(tab)[-1]) == ["description", "purpose", "instructions", "tools", "max_retries"]
    page = form("State", {"tools": ["t"], "purpose": "p", "zzz": 1})  # the author's own order, a stray key
    page.fill(field("instructions"), "i")
    assert list(changes(tab)[-1]) == ["tools", "purpose", "instructions", "zzz"]
    page.fill(field("description"), "d")
    assert list(changes(tab)[-1]) == ["description", "tools", "purpose", "instructions", "zzz"]
    page = form("definition", {"name": "n", "states": {}}, omit=["states"])
    page.fill(field("description"), "d")
    page.fill(field("context_schema"), '{"email": {"type": "string"}}')
    assert list(changes(tab)[-1]) == ["name", "description", "states", "context_schema"]


# -- checks, one card each (forms 6) -----------------------------------------------------------------------

CHECK_KINDS = list(DEFS["State"]["properties"]["checks"]["items"]["discriminator"]["mapping"])


@browser_test
def test_checks_are_edited_one_card_each_with_their_kind_in_step_with_their_json(tab: Page, form: Any) -> None:
    state = {"purpose": "p", "checks": [{"kind": "max_length", "max": 200, "description": "short"}]}
    page = form("State", state, catalog=CATALOG, drafts=True)
    kinds = page.eval_on_selector_all(
        f"select{field('checks.0.kind')} option:not([data-unset])", "options => options.map(o => o.value)"
    )
    assert kinds == CHECK_KINDS and page.input_value(field("checks.0.kind")) == "max_length"
    assert page.locator(field("checks.0.max")).count() == 1 and page.locator(field("checks.0.pattern")).count() == 0
    page.fill(field("checks.0.max"), "120")
    assert changes(tab)[-1]["checks"] == [{"kind": "max_length", "max": 120, "description": "short"}]
    # another kind: the fields both kinds have stay, the others go; not applied until complete
    page.select_option(field("checks.0.kind"), "regex")
    assert "checks[0].pattern: required (missing)" in error_of(tab, "checks") and len(changes(tab)) == 1
    assert json.loads(page.input_value(field("checks"))) == [{"kind": "regex", "description": "short"}]
    assert drafts(tab) == {"checks": page.input_value(field("checks"))}
    page.fill(field("checks.0.pattern"), "^Hi")
    assert changes(tab)[-1]["checks"] == [{"kind": "regex", "description": "short", "pattern": "^Hi"}]
    assert drafts(tab) == {} and not page.is_visible('#form > .sf-form > .sf-field[data-key="checks"] > .sf-error')
    page.click('[data-cards="checks"] [data-action="add-item"]')
    assert page.input_value(field("checks.1.kind")) == "" and len(changes(tab)) == 2
    page.select_option(field("checks.1.kind"), "python")
    page.fill(field("checks.1.name"), "polite")
    assert changes(tab)[-1]["checks"][1] == {"kind": "python", "name": "polite"}
    assert json.loads(page.input_value(field("checks"))) == changes(tab)[-1]["checks"]
    # the JSON box redraws the cards
    page.fill(field("checks"), '[{"kind": "required_keys", "keys": ["email"]}]')
    assert page.input_value(field("checks.0.kind")) == "required_keys"
    assert page.input_value(field("checks.0.keys.0")) == "email"
    assert changes(tab)[-1] == {"purpose": "p", "checks": [{"kind": "required_keys", "keys": ["email"]}]}
    assert page.locator('[data-cards="checks"] .sf-card').count() == 1


@browser_test
def test_a_number_box_with_text_the_browser_cannot_read_is_reported_but_holds_no_draft(tab: Page, form: Any) -> None:
    page = form("State", {"max_retries": 1}, drafts=True)
    page.fill(field("max_retries"), "")
    page.focus(field("max_retries"))
    page.keyboard.type("1e")  # an unfinished exponent: the input's value reads "" (badInput)
    assert "max_retries: not a number" in error_of(tab, "max_retries")
    assert invalids(tab)[-1] == ["max_retries"] and drafts(tab) == {}  # the text cannot be read back to keep
    assert changes(tab) == [{}, {"max_retries": 1}]  # "1" applied as typed, then "1e" refused


# -- the cards show and edit only the applied value, never the JSON box's draft (fix-forms2) ------------------


def cards_locked(tab: Page, path: str) -> bool:
    """The cards of PATH are disabled with the note saying the JSON box holds text not applied yet."""
    return bool(
        tab.tab.evaluate(
            """(path) => {
                const note = document.querySelector(`[data-locked="${path}"]`);
                const cards = document.querySelector(`[data-cards="${path}"]`);
                return Boolean(note && !note.hidden && note.textContent.includes("holds text not applied yet")
                    && cards && cards.disabled);
            }""",
            path,
        )
    )


@browser_test
def test_a_refused_json_list_leaves_the_condition_cards_on_the_applied_value_and_applies_nothing(
    tab: Page, form: Any
) -> None:
    transition = {
        "target_state": "b",
        "conditions": [{"description": "the name is known", "requires_context_keys": ["user_name"]}],
    }
    page = form("Transition", transition, prefix="transitions.0.", drafts=True)
    refused = '[{"description": 5, "logic": {"==": [1,1]}}]'
    page.fill(field("transitions.0.conditions"), refused)
    assert "transitions[0].conditions[0].description" in error_of(tab, "conditions") and changes(tab) == []
    # the card shows what the file holds, not the refused text, and says nothing false about the file
    assert page.input_value(field("transitions.0.conditions.0.description")) == "the name is known"
    assert page.input_value(field("transitions.0.conditions.0.requires_context_keys.0")) == "user_name"
    card = page.locator('[data-cards="transitions.0.conditions"] .sf-card').inner_text()
    assert "the file holds" not in card
    assert cards_locked(tab, "transitions.0.conditions")
    assert page.is_disabled(field("transitions.0.conditions.0.description"))
    # nothing typed in the card reaches the value while the box holds its draft (forced past the disabling)
    page.eval_on_selector(
        field("transitions.0.conditions.0.description"),
        "node => { node.disabled = false; node.value = 'edited'; node.dispatchEvent(new Event('input')); }",
    )
    assert changes(tab) == [] and page.input_value(field("transitions.0.conditions")) == refused
    assert drafts(tab) == {"transitions.0.conditions": refused}
    # drawn again with the draft, the cards are still the file's and still locked
    page = form("Transition", transition, prefix="transitions.0.", drafts=True)
    assert page.input_value(field("transitions.0.conditions")) == refused
    assert page.input_value(field("transitions.0.conditions.0.description")) == "the name is known"
    assert cards_locked(tab, "transitions.0.conditions")
    # fixed in the box: applied, the cards follow it and take edits again
    page.fill(field("transitions.0.conditions"), '[{"description": "five", "logic": {"==": [1,1]}}]')
    assert changes(tab)[-1]["conditions"] == [{"description": "five", "logic": {"==": [1, 1]}}]
    assert not cards_locked(tab, "transitions.0.conditions")
    page.fill(field("transitions.0.conditions.0.description"), "six")
    assert changes(tab)[-1]["conditions"] == [{"description": "six", "logic": {"==": [1, 1]}}]


@browser_test
def test_a_refused_json_list_leaves_the_check_cards_on_the_applied_value_and_applies_nothing(
    tab: Page, form: Any
) -> None:
    state = {"purpose": "p", "checks": [{"kind": "max_length", "max": 200, "description": "short"}]}
    page = form("State", state, catalog=CATALOG, drafts=True)
    refused = '[{"kind": "regex", "pattern": 5}]'
    page.fill(field("checks"), refused)
    assert "checks[0].pattern" in error_of(tab, "checks") and changes(tab) == []
    assert page.input_value(field("checks.0.kind")) == "max_length"
    assert page.input_value(field("checks.0.max")) == "200"
    assert page.input_value(field("checks.0.description")) == "short"
    assert "the file holds" not in page.locator('[data-cards="checks"] .sf-card').inner_text()
    assert cards_locked(tab, "checks") and page.is_disabled(field("checks.0.max"))
    page.eval_on_selector(
        field("checks.0.max"),
        "node => { node.disabled = false; node.value = '120'; node.dispatchEvent(new Event('input')); }",
    )
    assert changes(tab) == [] and page.input_value(field("checks")) == refused
    # a catalog Add does not build on (nor apply) the draft either
    page.click('[data-catalog="checks"] [data-action="use"]')
    assert changes(tab) == [] and page.input_value(field("checks")) == refused
    assert "checks: fix the JSON first (a list of checks) to add polite" in error_of(tab, "checks")
    # text that is not JSON locks them the same way; cleared, the cards are free again
    page.fill(field("checks"), "[{")
    assert cards_locked(tab, "checks") and changes(tab) == []
    page.fill(field("checks"), "")
    assert changes(tab)[-1] == {"purpose": "p"} and not cards_locked(tab, "checks")
