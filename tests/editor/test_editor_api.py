"""The editor's API (``llm_fsm.editor.app``) through TestClient: who may use it, the file, checks, saving, the chat."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from llm_fsm import Hooks
from llm_fsm import load as llm_fsm_load
from llm_fsm.cli import app as cli
from llm_fsm.editor.app import cookie_name, create_editor_app
from llm_fsm.editor.catalog import catalog
from llm_fsm.editor.checks import check, element
from llm_fsm.editor.document import EditedFile, LayoutError, checked_positions
from llm_fsm.errors import LLMUnavailableError
from llm_fsm.testing import ScriptedLLM, tool_calls
from tests.conftest import reply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "fsm_definitions"
PORT = 8765
COOKIE = cookie_name(PORT)
BASE = f"http://127.0.0.1:{PORT}"
TOKEN = "editor-token-" + "x" * 32
SECRET = "the-file-content-marker-7f3a"
runner = CliRunner()


def client_for(path: Path, *, authorized: bool = True, **options: Any) -> TestClient:
    application = create_editor_app(EditedFile(path), TOKEN, port=PORT, **options)
    client = TestClient(application, base_url=BASE)
    if authorized:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
    return client


def dead_end() -> dict[str, Any]:
    """A definition where 'confirm' can never be left (its only transition goes back to itself)."""
    needs_email = {"description": "the email is known", "requires_context_keys": ["email"]}
    return {
        "name": "signup",
        "description": "Sign a person up",
        "initial_state": "ask",
        "states": {
            "ask": {
                "description": "Ask for the email",
                "purpose": "Collect the email",
                "required_context_keys": ["email"],
                "transitions": [
                    {"target_state": "confirm", "description": "got the email", "conditions": [needs_email]},
                    {"target_state": "done", "description": "the person leaves", "priority": 200},
                ],
            },
            "confirm": {
                "description": "Confirm the email",
                "purpose": "Read the email back",
                "transitions": [{"target_state": "confirm", "description": "ask again"}],
            },
            "done": {"description": "Done", "purpose": "Say goodbye"},
        },
    }


@pytest.fixture
def order_flow(tmp_path: Path) -> Path:
    path = tmp_path / "order_flow.json"
    shutil.copy(EXAMPLES / "order_flow.json", path)
    return path


def validate_json(path: Path) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(cli, ["validate", "--strict", "--format", "json", str(path)])
    return result.exit_code, json.loads(result.stdout)


# -- who may use it ---------------------------------------------------------------------------------


def test_a_wrong_token_is_403_and_shows_nothing_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bot.json"
    path.write_text(json.dumps({**dead_end(), "description": SECRET}))
    client = client_for(path, authorized=False)
    for url in ("/?token=wrong", "/", f"/?token={TOKEN[:-1]}"):
        answer = client.get(url, follow_redirects=False)
        assert answer.status_code == 403, url
        assert SECRET not in answer.text and "llm-fsm edit" in answer.text
        assert "set-cookie" not in answer.headers


def test_the_api_without_the_cookie_is_401_json(order_flow: Path) -> None:
    client = client_for(order_flow, authorized=False)
    answer = client.get("/api/file")
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized" and "order_flow" not in answer.text
    client.cookies.set(COOKIE, "not-the-token")
    assert client.get("/api/file").status_code == 401
    assert client.post("/api/check", json={"value": {}}).status_code == 401
    client.cookies.clear()
    assert client.get("/api/file", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_token_sets_the_cookie_then_the_page_is_served(order_flow: Path) -> None:
    client = client_for(order_flow, authorized=False)
    moved = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/"
    cookie = moved.headers["set-cookie"]
    assert f"{COOKIE}={TOKEN}" in cookie and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    assert "Path=/" in cookie
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp and "connect-src 'self'" in csp
    assert client.get("/api/file").status_code == 200


@pytest.mark.parametrize("host", ["evil.example", f"evil.example:{PORT}", "127.0.0.1:9999", f"127.0.0.2:{PORT}"])
def test_a_request_naming_another_host_is_403(order_flow: Path, host: str) -> None:
    client = client_for(order_flow)
    for url in ("/", "/api/file", f"/?token={TOKEN}"):
        answer = client.get(url, headers={"Host": host}, follow_redirects=False)
        assert answer.status_code == 403, (url, answer.text)
        assert SECRET not in answer.text and "initial_state" not in answer.text
    assert client.get("/api/file", headers={"Host": f"localhost:{PORT}"}).status_code == 200


def test_a_post_from_another_origin_or_not_json_is_403(order_flow: Path) -> None:
    client = client_for(order_flow)
    value = client.get("/api/file").json()["value"]
    for origin in ("http://evil.example", f"http://localhost:{PORT + 1}", "null", f"https://127.0.0.1:{PORT}"):
        answer = client.post("/api/check", json={"value": value}, headers={"Origin": origin})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden_origin", origin
    form = client.post("/api/save", content=b"value=1", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 403
    text = client.post("/api/check", content=json.dumps({"value": value}), headers={"Content-Type": "text/plain"})
    assert text.status_code == 403
    same = client.post("/api/check", json={"value": value}, headers={"Origin": BASE})
    assert same.status_code == 200


# -- the file ---------------------------------------------------------------------------------------


def test_the_file_as_it_is_on_disk(order_flow: Path) -> None:
    answer = client_for(order_flow).get("/api/file").json()
    data = order_flow.read_bytes()
    assert answer["path"] == str(order_flow) and answer["name"] == "order_flow.json" and answer["exists"] is True
    assert answer["text"] == data.decode() and answer["value"] == json.loads(data)
    assert answer["sha"] == hashlib.sha256(data).hexdigest() and answer["parse_error"] is None
    assert answer["layout"] == {} and answer["layout_problem"] is None and answer["model"] == "simulated"
    assert answer["layout_direction"] == "auto"
    assert answer["schema"] == json.loads((ROOT / "schema" / "fsm.schema.json").read_text())
    assert answer["catalog"] == {"tools": [], "checks": [], "handlers": []}


def test_the_schema_is_what_llm_fsm_schema_prints(order_flow: Path) -> None:
    printed = runner.invoke(cli, ["schema"]).stdout
    assert client_for(order_flow).get("/api/file").json()["schema"] == json.loads(printed)


def test_a_new_file(tmp_path: Path) -> None:
    answer = client_for(tmp_path / "new.json").get("/api/file").json()
    assert answer["exists"] is False and answer["text"] == "" and answer["value"] is None and answer["sha"] == ""
    assert answer["parse_error"] is None


def test_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "x",\n  "states": {,\n}\n')
    answer = client_for(path).get("/api/file").json()
    assert answer["exists"] is True and answer["value"] is None and answer["text"] == path.read_text()
    problem = answer["parse_error"]
    assert problem["severity"] == "error" and problem["code"] == "json" and problem["line"] == 3
    assert problem["file"] == str(path) and problem["message"]


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    answer = client_for(path).get("/api/file").json()
    assert answer["value"] is None and answer["parse_error"]["code"] == "encoding"
    assert "not UTF-8" in answer["parse_error"]["message"]


# -- checks -----------------------------------------------------------------------------------------


def test_a_dead_end_warning_appears_and_disappears(tmp_path: Path) -> None:
    client = client_for(tmp_path / "signup.json")
    value = dead_end()
    found = client.post("/api/check", json={"value": value}).json()
    assert found["changed"] is True and json.loads(found["text"]) == value
    codes = {(d["code"], d["severity"]) for d in found["diagnostics"]}
    assert ("self_loop_no_exit", "warning") in codes
    dead = next(d for d in found["diagnostics"] if d["code"] == "self_loop_no_exit")
    assert dead["element"] == {"kind": "state", "state": "confirm"} and dead["line"] is not None
    value["states"]["confirm"]["transitions"].append({"target_state": "done", "description": "confirmed"})
    assert client.post("/api/check", json={"value": value}).json()["diagnostics"] == []


def test_the_words_are_those_of_validate_strict(tmp_path: Path) -> None:
    value = dead_end()
    value["states"]["ask"]["colour"] = "blue"  # an unknown field: an error under --strict
    value["states"]["ask"]["transitions"][0]["target_state"] = "nowhere"
    path = tmp_path / "signup.json"
    client = client_for(path)
    found = client.post("/api/check", json={"value": value}).json()
    path.write_text(found["text"])
    code, printed = validate_json(path)
    assert code == 1 and printed
    assert [{k: v for k, v in d.items() if k != "element"} for d in found["diagnostics"]] == printed
    assert check(found["text"], path) == found["diagnostics"]


def test_the_words_match_on_a_file_with_warnings_only(tmp_path: Path) -> None:
    path = tmp_path / "signup.json"
    path.write_text(json.dumps(dead_end(), indent=4))
    code, printed = validate_json(path)
    assert code == 1 and [d["code"] for d in printed] == ["self_loop_no_exit"]
    assert [{k: v for k, v in d.items() if k != "element"} for d in check(path.read_text(), path)] == printed


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", {"kind": "definition"}),
        ("initial_state", {"kind": "definition"}),
        ("tools.lookup", {"kind": "definition"}),
        ("states.greet", {"kind": "state", "state": "greet"}),
        ("states.greet.purpose", {"kind": "state", "state": "greet"}),
        ("states.greet.transitions", {"kind": "state", "state": "greet"}),
        ("states.greet.transitions[2]", {"kind": "transition", "state": "greet", "index": 2}),
        ("states.greet.transitions[0].conditions[1].logic", {"kind": "transition", "state": "greet", "index": 0}),
        ("global_transitions[3].target_state", {"kind": "global_transition", "index": 3}),
        ("states[1].id", {"kind": "state", "state": "second"}),
        ("states[5].id", {"kind": "definition"}),
    ],
)
def test_each_diagnostic_names_its_element(path: str, expected: dict[str, Any]) -> None:
    value = {"states": [{"id": "first"}, {"id": "second"}]}
    assert element(path, value) == expected


def test_states_written_as_a_list_are_named_by_id(tmp_path: Path) -> None:
    value = dead_end()
    value["states"] = [{"id": sid, **state} for sid, state in value["states"].items()]
    value["states"][2]["id"] = "ask"  # a duplicate id, reported at states[2].id
    found = client_for(tmp_path / "list.json").post("/api/check", json={"value": value}).json()["diagnostics"]
    duplicate = next(d for d in found if d["code"] == "duplicate_state")
    assert duplicate["path"] == "states[2].id" and duplicate["element"] == {"kind": "state", "state": "ask"}


# -- saving -----------------------------------------------------------------------------------------

EXAMPLE_FILES = sorted(p for p in EXAMPLES.rglob("*.json") if "tests" not in p.parts and "scripts" not in p.parts)


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=[p.name for p in EXAMPLE_FILES])
def test_open_and_save_an_example_unchanged_is_byte_identical(tmp_path: Path, example: Path) -> None:
    path = tmp_path / example.name
    shutil.copy2(example, path)
    before = path.stat()
    client = client_for(path)
    opened = client.get("/api/file").json()
    found = client.post("/api/check", json={"value": opened["value"]}).json()
    assert found["changed"] is False and found["text"] == opened["text"]
    saved = client.post("/api/save", json={"value": opened["value"], "sha": opened["sha"], "force": False})
    assert saved.status_code == 200
    assert saved.json() == {"sha": opened["sha"], "text": opened["text"], "unchanged": True}
    assert path.read_bytes() == example.read_bytes() and path.stat().st_mtime_ns == before.st_mtime_ns
    assert not (tmp_path / f"{example.stem}.layout").exists() and sorted(os.listdir(tmp_path)) == [example.name]


def test_a_new_definition_saved_passes_validate_strict(tmp_path: Path) -> None:
    path = tmp_path / "signup.json"
    client = client_for(path)
    opened = client.get("/api/file").json()
    value = dead_end()
    value["states"]["confirm"]["transitions"] = [{"target_state": "done", "description": "confirmed"}]
    saved = client.post("/api/save", json={"value": value, "sha": opened["sha"]})
    assert saved.status_code == 200 and saved.json()["unchanged"] is False
    assert path.read_text() == saved.json()["text"] and json.loads(path.read_text()) == value
    assert saved.json()["sha"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert validate_json(path) == (0, [])
    assert [p.name for p in tmp_path.iterdir()] == ["signup.json"], "no temporary file is left"


def test_a_save_after_an_edit_keeps_the_mode_and_validates(order_flow: Path) -> None:
    order_flow.chmod(0o640)
    client = client_for(order_flow)
    opened = client.get("/api/file").json()
    value = opened["value"]
    value["description"] = "Take an order, edited in the browser."
    saved = client.post("/api/save", json={"value": value, "sha": opened["sha"]}).json()
    assert saved["unchanged"] is False and json.loads(order_flow.read_text()) == value
    assert stat.S_IMODE(order_flow.stat().st_mode) == 0o640
    assert validate_json(order_flow) == (0, [])
    # the page goes on from what it saved: the next check compares with the saved text
    assert client.post("/api/check", json={"value": value}).json()["changed"] is False


def test_a_file_changed_on_disk_is_409_then_overwritten_by_force(order_flow: Path) -> None:
    client = client_for(order_flow)
    opened = client.get("/api/file").json()
    theirs = {**opened["value"], "description": "someone else's change"}
    order_flow.write_text(json.dumps(theirs, indent=2))
    disk_sha = hashlib.sha256(order_flow.read_bytes()).hexdigest()
    mine = {**opened["value"], "description": "my change"}
    refused = client.post("/api/save", json={"value": mine, "sha": opened["sha"]})
    assert refused.status_code == 409
    body = refused.json()
    assert (
        body["error"]["code"] == "changed_on_disk" and body["sha"] == disk_sha and "reload" in body["error"]["message"]
    )
    assert json.loads(order_flow.read_text()) == theirs, "nothing was written"
    forced = client.post("/api/save", json={"value": mine, "sha": opened["sha"], "force": True})
    assert forced.status_code == 200 and json.loads(order_flow.read_text()) == mine
    reloaded = client.get("/api/file").json()
    assert reloaded["sha"] == forced.json()["sha"] and reloaded["value"] == mine


def test_a_file_deleted_on_disk_is_409_missing_then_recreated_by_force(order_flow: Path) -> None:
    client = client_for(order_flow)
    opened = client.get("/api/file").json()
    order_flow.unlink()
    refused = client.post("/api/save", json={"value": opened["value"], "sha": opened["sha"]})
    assert refused.status_code == 409
    body = refused.json()
    assert body["sha"] == "" and body["error"]["code"] == "missing_on_disk"
    assert body["error"]["message"].startswith(f"{order_flow} is no longer on disk (moved or deleted)")
    assert not order_flow.exists(), "nothing was written"
    forced = client.post("/api/save", json={"value": opened["value"], "sha": opened["sha"], "force": True})
    assert forced.status_code == 200 and order_flow.read_bytes() == (EXAMPLES / "order_flow.json").read_bytes()


def test_a_file_read_then_deleted_reads_as_gone_not_new_until_written_again(order_flow: Path) -> None:
    client = client_for(order_flow)
    opened = client.get("/api/file").json()
    assert opened["exists"] and opened["gone"] is False
    order_flow.unlink()
    again = client.get("/api/file").json()
    assert again["gone"] is True and not again["exists"] and again["value"] is None and again["sha"] == ""
    assert client.get("/api/file").json()["gone"] is True, "a second reload still knows it was there"
    forced = client.post("/api/save", json={"value": opened["value"], "sha": opened["sha"], "force": True})
    assert forced.status_code == 200
    assert order_flow.read_bytes() == (EXAMPLES / "order_flow.json").read_bytes(), "written in the format it had"
    after = client.get("/api/file").json()
    assert after["gone"] is False and after["exists"] and after["value"] == opened["value"]


def test_a_file_that_never_existed_is_new_not_gone(tmp_path: Path) -> None:
    path = tmp_path / "bot.json"
    client = client_for(path)
    assert client.get("/api/file").json()["gone"] is False
    assert client.get("/api/file").json()["gone"] is False
    saved = client.post("/api/save", json={"value": dead_end(), "sha": ""})
    assert saved.status_code == 200
    path.unlink()
    assert client.get("/api/file").json()["gone"] is True, "saved by this editor, then deleted: gone"


def test_a_new_file_made_by_someone_else_meanwhile_is_changed_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "bot.json"
    client = client_for(path)
    assert client.get("/api/file").json()["sha"] == ""
    path.write_text(json.dumps(dead_end()))
    refused = client.post("/api/save", json={"value": dead_end(), "sha": ""})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "changed_on_disk"


def test_a_save_into_a_folder_that_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    client = client_for(folder / "bot.json")
    folder.rmdir()
    answer = client.post("/api/save", json={"value": dead_end(), "sha": ""})
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "file_error"
    assert "does not exist" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    "body", [{"value": {}}, {"sha": ""}, {"value": {}, "sha": 3}, {"value": {}, "sha": "", "force": "yes"}]
)
def test_a_malformed_save_is_400(tmp_path: Path, body: dict[str, Any]) -> None:
    answer = client_for(tmp_path / "bot.json").post("/api/save", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


def test_a_body_that_is_not_json_is_400(order_flow: Path) -> None:
    answer = client_for(order_flow).post("/api/check", content=b"{", headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "not JSON" in answer.json()["error"]["message"]


# -- layout -----------------------------------------------------------------------------------------


def test_positions_are_written_beside_the_file_and_read_back(order_flow: Path) -> None:
    client = client_for(order_flow)
    positions = {"select_product": {"x": 12.5, "y": 40}, "review": {"x": -3, "y": 1e3}}
    assert client.post("/api/layout", json={"positions": positions}).json() == {"ok": True}
    written = json.loads((order_flow.parent / "order_flow.layout").read_text())
    assert written == {"version": 1, "direction": "auto", "positions": positions}
    assert client.get("/api/file").json()["layout"] == positions
    assert order_flow.read_bytes() == (EXAMPLES / "order_flow.json").read_bytes()


def test_the_layout_direction_is_kept_in_the_side_file(order_flow: Path) -> None:
    client = client_for(order_flow)
    side = order_flow.parent / "order_flow.layout"
    assert client.get("/api/file").json()["layout_direction"] == "auto"
    positions = {"review": {"x": 1, "y": 2}}
    assert client.post("/api/layout", json={"positions": positions, "direction": "LR"}).json() == {"ok": True}
    assert json.loads(side.read_text()) == {"version": 1, "direction": "LR", "positions": positions}
    opened = client.get("/api/file").json()
    assert opened["layout_direction"] == "LR" and opened["layout"] == positions
    # positions sent without a direction keep the one chosen
    assert client.post("/api/layout", json={"positions": {}}).status_code == 200
    assert json.loads(side.read_text())["direction"] == "LR"
    assert client.post("/api/layout", json={"positions": {}, "direction": "TB"}).status_code == 200
    assert client.get("/api/file").json()["layout_direction"] == "TB"


@pytest.mark.parametrize("direction", ["BT", "lr", None, 1, ""])
def test_a_bad_layout_direction_is_refused(order_flow: Path, direction: Any) -> None:
    client = client_for(order_flow)
    answer = client.post("/api/layout", json={"positions": {}, "direction": direction})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_layout"
    assert '"auto", "TB", "LR"' in answer.json()["error"]["message"]
    assert not (order_flow.parent / "order_flow.layout").exists()


def test_an_old_side_file_without_a_direction_still_loads(order_flow: Path) -> None:
    positions = {"review": {"x": 5, "y": 6}}
    (order_flow.parent / "order_flow.layout").write_text(json.dumps({"version": 1, "positions": positions}))
    opened = client_for(order_flow).get("/api/file").json()
    assert opened["layout"] == positions and opened["layout_direction"] == "auto" and opened["layout_problem"] is None


def test_a_side_file_with_a_bad_direction_keeps_its_positions(order_flow: Path) -> None:
    positions = {"review": {"x": 5, "y": 6}}
    content = {"version": 1, "direction": "sideways", "positions": positions}
    (order_flow.parent / "order_flow.layout").write_text(json.dumps(content))
    opened = client_for(order_flow).get("/api/file").json()
    assert opened["layout"] == positions and opened["layout_direction"] == "auto"
    assert "direction" in opened["layout_problem"] and "sideways" in opened["layout_problem"]


@pytest.mark.parametrize(
    "positions",
    [
        [1, 2],
        {"a": {"x": 1}},
        {"a": {"x": 1, "y": "2"}},
        {"a": {"x": True, "y": 2}},
        {"a": {"x": 1, "y": 2, "z": 3}},
        {"a": [1, 2]},
        {"": {"x": 1, "y": 2}},
    ],
)
def test_bad_positions_are_refused(order_flow: Path, positions: Any) -> None:
    client = client_for(order_flow)
    answer = client.post("/api/layout", json={"positions": positions})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_layout"
    assert not (order_flow.parent / "order_flow.layout").exists()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_positions_that_are_not_finite_are_refused(order_flow: Path, number: float) -> None:
    with pytest.raises(LayoutError, match=r"positions\.a\.y must be a finite number"):
        checked_positions({"a": {"x": 1, "y": number}})
    body = json.dumps({"positions": {"a": {"x": 1, "y": number}}})  # NaN, Infinity: JSON as Python writes it
    answer = client_for(order_flow).post("/api/layout", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400


@pytest.mark.parametrize(
    "content", ["{not json", '{"version": 2, "positions": {}}', '{"version": 1, "positions": {"a": {"x": "no"}}}']
)
def test_a_bad_layout_file_is_ignored_with_a_warning(order_flow: Path, content: str) -> None:
    (order_flow.parent / "order_flow.layout").write_text(content)
    answer = client_for(order_flow).get("/api/file").json()
    assert answer["layout"] == {} and "order_flow.layout" in answer["layout_problem"]
    assert "ignored" in answer["layout_problem"] and answer["value"] is not None


# -- the chat ---------------------------------------------------------------------------------------


def test_a_chat_with_the_simulated_model_moves_along_the_graph(order_flow: Path) -> None:
    client = client_for(order_flow)
    value = client.get("/api/file").json()["value"]
    started = client.post("/api/chat/start", json={"value": value, "state": None, "context": None})
    assert started.status_code == 200, started.text
    opening = started.json()
    assert opening["state"] == "select_product" and opening["visited"] == ["select_product"]
    assert opening["edge"] is None and opening["message"].startswith("Welcome to Brewline")
    assert opening["ended"] is False and opening["paused"] is False and opening["context"] == {}
    turn = client.post("/api/chat/send", json={"text": "A burr grinder, please"}).json()
    assert turn["state"] != "select_product" and turn["visited"] == ["select_product", turn["state"]]
    assert turn["edge"] == {"from": "select_product", "to": turn["state"]} and turn["message"]


def test_a_chat_starts_from_a_state_that_still_exists(order_flow: Path) -> None:
    client = client_for(order_flow)
    value = client.get("/api/file").json()["value"]
    answer = client.post("/api/chat/start", json={"value": value, "state": "choose_quantity", "context": {"a": 1}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "choose_quantity" and answer.json()["visited"] == ["choose_quantity"]
    assert answer.json()["context"]["a"] == 1, "the initial context given"
    del value["states"]["choose_quantity"]  # the edit removed it: restarting there is refused
    gone = client.post("/api/chat/start", json={"value": value, "state": "choose_quantity"})
    assert gone.status_code == 422
    assert gone.json()["error"]["code"] in ("unknown_state", "definition_error")


def test_a_restart_uses_the_definition_as_edited(tmp_path: Path) -> None:
    client = client_for(tmp_path / "signup.json")
    value = dead_end()
    value["states"]["confirm"]["transitions"] = [{"target_state": "done", "description": "confirmed"}]
    assert client.post("/api/chat/start", json={"value": value}).json()["state"] == "ask"
    value["states"]["welcome"] = {
        "description": "Welcome",
        "purpose": "Say hello",
        "transitions": [{"target_state": "ask", "description": "hello said"}],
    }
    value["initial_state"] = "welcome"
    restarted = client.post("/api/chat/start", json={"value": value}).json()
    assert restarted["state"] == "welcome" and restarted["visited"] == ["welcome"]
    moved = client.post("/api/chat/send", json={"text": "hi"}).json()
    assert moved["visited"] == ["welcome", "ask"] and moved["edge"] == {"from": "welcome", "to": "ask"}


def test_a_definition_that_does_not_load_is_422_with_its_problems(tmp_path: Path) -> None:
    client = client_for(tmp_path / "signup.json")
    value = dead_end()
    value["states"]["ask"]["transitions"][0]["target_state"] = "nowhere"
    answer = client.post("/api/chat/start", json={"value": value})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "definition_error" and error["message"].startswith("fix the problems first")
    assert "nowhere" in error["message"] and "states.ask.transitions[0].target_state" in error["message"]
    bad: Any
    for bad in ([], "text", None):
        assert client.post("/api/chat/start", json={"value": bad}).status_code == 422


def test_a_message_before_a_chat_is_409(order_flow: Path) -> None:
    answer = client_for(order_flow).post("/api/chat/send", json={"text": "hello"})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "no_chat"


def test_a_bad_context_or_state_is_400(order_flow: Path) -> None:
    client = client_for(order_flow)
    value = client.get("/api/file").json()["value"]
    assert client.post("/api/chat/start", json={"value": value, "context": [1]}).status_code == 400
    assert client.post("/api/chat/start", json={"value": value, "state": 3}).status_code == 400
    client.post("/api/chat/start", json={"value": value})
    assert client.post("/api/chat/send", json={"text": 5}).status_code == 400


def test_the_model_factory_is_given_each_definition_tried(tmp_path: Path) -> None:
    made = []

    def factory(definition: Any) -> ScriptedLLM:
        made.append(definition.initial_state)
        opening = reply("ask", "What is your email?")
        return ScriptedLLM([opening, reply("confirm", "Got it, let me read it back.", email="a@b.example")])

    value = dead_end()
    client = client_for(tmp_path / "signup.json", client_factory=factory, model="scripted")
    assert client.get("/api/file").json()["model"] == "scripted"
    assert client.post("/api/chat/start", json={"value": value}).json()["message"] == "What is your email?"
    turn = client.post("/api/chat/send", json={"text": "a@b.example"}).json()
    assert turn["state"] == "confirm" and turn["context"]["email"] == "a@b.example"
    assert turn["message"] == "Got it, let me read it back." and made == ["ask"]


def test_a_failing_model_is_a_json_error_not_a_traceback(tmp_path: Path) -> None:
    def factory(definition: Any) -> ScriptedLLM:
        return ScriptedLLM([reply("ask", "Your email?"), LLMUnavailableError("the provider is down")])

    client = client_for(tmp_path / "signup.json", client_factory=factory)
    assert client.post("/api/chat/start", json={"value": dead_end()}).status_code == 200
    answer = client.post("/api/chat/send", json={"text": "hello"})
    assert answer.status_code == 502
    assert (
        answer.json()["error"]["code"] == "model_error" and "the provider is down" in answer.json()["error"]["message"]
    )
    assert "Traceback" not in answer.text
    failing = client_for(tmp_path / "signup.json", client_factory=lambda d: ScriptedLLM([LLMUnavailableError("down")]))
    opening = failing.post("/api/chat/start", json={"value": dead_end()})
    assert opening.status_code == 502 and opening.json()["error"]["code"] == "model_error"
    assert failing.post("/api/chat/send", json={"text": "hi"}).json()["error"]["code"] == "no_chat"


def test_a_handler_the_hooks_lack_is_422(tmp_path: Path) -> None:
    value = dead_end()
    value["states"]["ask"]["handlers"] = ["notify"]
    answer = client_for(tmp_path / "signup.json").post("/api/chat/start", json={"value": value})
    assert answer.status_code == 422 and "notify" in answer.json()["error"]["message"]


def order_hooks() -> Hooks:
    """Hooks with one tool, ``find_order``, that fails for the order id ``none``."""
    hooks = Hooks()

    @hooks.tool()  # type: ignore[untyped-decorator]
    def find_order(order_id: str) -> dict[str, str]:
        if order_id == "none":
            raise LookupError("no order 'none'")
        return {"order_id": order_id, "status": "shipped"}

    return hooks


def test_the_turns_tool_runs_are_in_the_answer(tmp_path: Path) -> None:
    hooks = order_hooks()
    value = dead_end()
    value["tools"] = {"find_order": {"description": "Find an order by its id"}}
    value["states"]["ask"]["tools"] = ["find_order"]
    script = [
        reply("ask", "Your email?"),
        tool_calls(("find_order", {"order_id": "A-17"}), ("find_order", {"order_id": "none"})),
        reply("ask", "A-17 has shipped."),
    ]
    client = client_for(tmp_path / "signup.json", hooks=hooks, client_factory=lambda d: ScriptedLLM(script))
    opening = client.post("/api/chat/start", json={"value": value})
    assert opening.status_code == 200, opening.text
    assert opening.json()["tool_calls"] == []
    turn = client.post("/api/chat/send", json={"text": "Where is A-17?"}).json()
    assert turn["message"] == "A-17 has shipped."
    first, second = turn["tool_calls"]
    assert first == {"name": "find_order", "arguments": {"order_id": "A-17"}, "ok": True, "error": None}
    assert second["name"] == "find_order" and second["ok"] is False and "no order 'none'" in second["error"]


def unbound() -> dict[str, Any]:
    """dead_end() naming a handler, a python check and a tool that the hooks of bound_hooks() lack."""
    value = dead_end()
    value["tools"] = {"lookup": {"description": "Look an order up"}}
    value["states"]["ask"]["handlers"] = ["notify"]
    value["states"]["confirm"]["checks"] = [{"kind": "python", "name": "polit"}]
    value["states"]["confirm"]["tools"] = ["lookup"]
    return value


def bound_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.check("polite")
    def polite(*, message: str) -> bool:
        return True

    return hooks


def test_with_hooks_a_check_adds_what_binding_to_them_refuses(tmp_path: Path) -> None:
    from llm_fsm.conversation import Conversation
    from llm_fsm.errors import DefinitionError

    path = tmp_path / "signup.json"
    answer = client_for(path, hooks=bound_hooks()).post("/api/check", json={"value": unbound()})
    assert answer.status_code == 200
    found = {d["code"]: d for d in answer.json()["diagnostics"] if d["code"].startswith("unbound_")}
    assert set(found) == {"unbound_handler", "unbound_check", "unbound_tool"}
    # the runtime's own words: what a conversation (llm-fsm chat --hooks) refuses the definition with
    with pytest.raises(DefinitionError) as refused:
        Conversation(llm_fsm_load(unbound()), ScriptedLLM([]), hooks=bound_hooks())
    assert {p.code: p.message for p in refused.value.problems} == {c: d["message"] for c, d in found.items()}
    handler, check_, tool = found["unbound_handler"], found["unbound_check"], found["unbound_tool"]
    assert handler["message"] == "state 'ask' names handler 'notify', which is not registered"
    assert handler["element"] == {"kind": "state", "state": "ask"} and handler["severity"] == "error"
    assert check_["element"] == {"kind": "state", "state": "confirm"} and "polite" in check_["hint"]
    assert tool["element"] == {"kind": "state", "state": "confirm"} and "'lookup'" in tool["message"]
    text = answer.json()["text"]
    line = text.splitlines()[handler["line"] - 1]
    assert '"notify"' in line[handler["column"] - 1 :] and handler["file"] == str(path)


def test_without_hooks_a_check_adds_no_binding_problems(tmp_path: Path) -> None:
    diagnostics = client_for(tmp_path / "signup.json").post("/api/check", json={"value": unbound()}).json()
    assert diagnostics["diagnostics"] == check(diagnostics["text"], tmp_path / "signup.json")
    assert not [d for d in diagnostics["diagnostics"] if d["code"].startswith("unbound_")]


def test_with_hooks_that_provide_everything_nothing_is_added(tmp_path: Path) -> None:
    hooks = bound_hooks()

    @hooks.handler("notify", on="after_transition")
    def notify(**_: Any) -> None:
        return None

    @hooks.tool("lookup")  # type: ignore[untyped-decorator]
    def lookup(order_id: str) -> dict[str, Any]:
        return {}

    value = unbound()
    value["states"]["confirm"]["checks"] = [{"kind": "python", "name": "polite"}]
    found = client_for(tmp_path / "signup.json", hooks=hooks).post("/api/check", json={"value": value}).json()
    assert found["diagnostics"] == check(found["text"], tmp_path / "signup.json")


def test_a_subflows_binding_problems_name_the_subflow(tmp_path: Path) -> None:
    sub = {
        "name": "verify",
        "description": "Verify the email",
        "initial_state": "check",
        "states": {
            "check": {"description": "Check", "purpose": "Check the email", "handlers": ["audit"],
                      "transitions": [{"target_state": "ok", "description": "checked"}]},
            "ok": {"description": "Verified", "purpose": "Say it is verified"},
        },
    }  # fmt: skip
    (tmp_path / "verify.json").write_text(json.dumps(sub))
    value = dead_end()
    value["states"]["confirm"] = {
        "description": "Verify", "purpose": "Verify the email", "subflow": {"definition": "verify.json"},
        "transitions": [{"target_state": "done", "description": "verified"}],
    }  # fmt: skip
    path = tmp_path / "signup.json"
    plain = client_for(path).post("/api/check", json={"value": value}).json()["diagnostics"]
    assert not [d for d in plain if d["code"] == "unbound_handler"], plain
    found = client_for(path, hooks=bound_hooks()).post("/api/check", json={"value": value}).json()["diagnostics"]
    (audit,) = [d for d in found if d["code"] == "unbound_handler"]
    assert "'audit'" in audit["message"] and "verify" in audit["file"]
    assert audit["element"] == {"kind": "definition"}


# -- the catalog ------------------------------------------------------------------------------------


def test_the_catalog_lists_what_the_hooks_and_the_definition_provide(tmp_path: Path) -> None:
    hooks = Hooks()

    @hooks.tool("lookup_order")  # type: ignore[untyped-decorator]
    def lookup_order(order_id: str, verbose: bool = False) -> dict[str, Any]:
        """Find an order by its id."""
        return {}

    @hooks.check("no_prices")
    def no_prices(*, message: str, context: Any) -> bool:
        return "$" not in message

    @hooks.handler("notify_staff", on="after_transition")
    def notify(*, state: str, target: str) -> None:
        return None

    @hooks.on("context_update", keys=["email"])
    def email_changed(**_: Any) -> None:
        return None

    value = {
        "tools": {"refund": {"description": "Refund an order", "parameters": {"type": "object", "required": ["id"]}}}
    }
    found = catalog(hooks, value)
    tools = {tool["name"]: tool for tool in found["tools"]}
    assert tools["refund"] == {
        "name": "refund", "description": "Refund an order", "parameters": {"type": "object", "required": ["id"]},
        "required": ["id"], "declared": True, "registered": False,
    }  # fmt: skip
    assert tools["lookup_order"]["description"] == "Find an order by its id." and tools["lookup_order"]["registered"]
    assert tools["lookup_order"]["required"] == ["order_id"]
    assert set(tools["lookup_order"]["parameters"]["properties"]) == {"order_id", "verbose"}
    assert found["checks"] == [{"name": "no_prices", "accepts": ["message", "context"]}]
    handlers = {h["name"]: h for h in found["handlers"]}
    assert handlers["notify_staff"]["named"] is True and handlers["notify_staff"]["timings"] == ["after_transition"]
    assert handlers["notify_staff"]["arguments"] == ["state", "target"]
    assert handlers["email_changed"]["keys"] == ["email"] and handlers["email_changed"]["arguments"] is None
    answer = client_for(tmp_path / "bot.json", hooks=hooks).get("/api/file").json()
    assert {t["name"] for t in answer["catalog"]["tools"]} == {"lookup_order"}


# -- errors -----------------------------------------------------------------------------------------


def test_an_unknown_route_is_a_json_404(order_flow: Path) -> None:
    answer = client_for(order_flow).get("/api/nosuch")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_two_editors_at_once_keep_their_own_cookies(tmp_path: Path) -> None:
    mine = create_editor_app(EditedFile(tmp_path / "a.json"), TOKEN, port=PORT)
    other = create_editor_app(EditedFile(tmp_path / "b.json"), "other-" + TOKEN, port=PORT + 1)
    moved = TestClient(other, base_url=f"http://127.0.0.1:{PORT + 1}").get(
        f"/?token=other-{TOKEN}", follow_redirects=False
    )
    assert moved.headers["set-cookie"].startswith(f"{cookie_name(PORT + 1)}=") and cookie_name(PORT + 1) != COOKIE
    # a browser sends both cookies to both editors (cookies are kept by host, not port): each reads its own
    both = {"Cookie": f"{COOKIE}={TOKEN}; {cookie_name(PORT + 1)}=other-{TOKEN}"}
    assert TestClient(mine, base_url=BASE).get("/api/file", headers=both).status_code == 200
    assert TestClient(other, base_url=f"http://127.0.0.1:{PORT + 1}").get("/api/file", headers=both).status_code == 200
    swapped = {"Cookie": f"{COOKIE}=other-{TOKEN}; {cookie_name(PORT + 1)}={TOKEN}"}
    assert TestClient(mine, base_url=BASE).get("/api/file", headers=swapped).status_code == 401


def test_a_value_with_nan_is_refused_before_it_is_written(order_flow: Path) -> None:
    client = client_for(order_flow)
    opened = client.get("/api/file").json()
    body = '{"value": {"name": NaN}, "sha": "' + opened["sha"] + '"}'
    answer = client.post("/api/save", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "NaN" in answer.json()["error"]["message"]
    assert order_flow.read_bytes() == (EXAMPLES / "order_flow.json").read_bytes()


def test_a_bug_in_the_analysis_is_one_problem_not_a_failed_request(
    order_flow: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr("llm_fsm.authoring.analysis.analyze_text", broken)
    found = check("{}", order_flow)
    assert [(d["code"], d["severity"], d["hint"]) for d in found] == [("internal", "error", "please report this")]
    assert "KeyError" in found[0]["message"] and found[0]["element"] == {"kind": "definition"}


def test_a_linked_file_is_saved_through_its_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    shutil.copy(EXAMPLES / "small_talk.json", real)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    client = client_for(link)
    opened = client.get("/api/file").json()
    value = {**opened["value"], "version": "2.0"}
    assert client.post("/api/save", json={"value": value, "sha": opened["sha"]}).status_code == 200
    assert link.is_symlink() and json.loads(real.read_text())["version"] == "2.0"


def test_a_file_with_crlf_and_no_final_newline_saves_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "crlf.json"
    data = json.dumps(dead_end(), indent=3).replace("\n", "\r\n").encode()
    path.write_bytes(data)
    client = client_for(path)
    opened = client.get("/api/file").json()
    assert opened["text"] == data.decode() and opened["sha"] == hashlib.sha256(data).hexdigest()
    saved = client.post("/api/save", json={"value": opened["value"], "sha": opened["sha"]}).json()
    assert saved["unchanged"] is True and path.read_bytes() == data


def test_a_check_before_the_file_was_read_compares_with_the_disk(order_flow: Path) -> None:
    value = json.loads(order_flow.read_text())
    found = client_for(order_flow).post("/api/check", json={"value": value}).json()
    assert found["changed"] is False and found["text"] == order_flow.read_text()


def test_the_words_are_those_the_llm_fsm_command_prints(tmp_path: Path) -> None:
    """As the author will run it: the console script, in a process of its own, on the file the editor saved."""
    import subprocess
    import sys

    value = dead_end()
    value["states"]["ask"]["transitions"][1]["priority"] = "high"
    path = tmp_path / "signup.json"
    client = client_for(path)
    saved = client.post("/api/save", json={"value": value, "sha": ""}).json()
    found = client.post("/api/check", json={"value": value}).json()
    assert found["text"] == saved["text"] == path.read_text()
    script = Path(sys.executable).parent / "llm-fsm"
    command = [str(script), "validate", "--strict", "--format", "json", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stderr
    printed = json.loads(done.stdout)
    assert printed and [{k: v for k, v in d.items() if k != "element"} for d in found["diagnostics"]] == printed
