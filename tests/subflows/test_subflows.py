"""Sub-conversations (llm_fsm.subflows): loading and checks, push/pop, pauses, stores, views."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Break, Conversation, Hooks
from llm_fsm.authoring.diagram import to_dot, to_mermaid
from llm_fsm.definition.loader import inspect
from llm_fsm.errors import ConversationError, DefinitionError, ResumeError
from llm_fsm.snapshot import Snapshot
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.store.test_store import url_for

DATA = Path(__file__).parents[1] / "data" / "subflows"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for path in DATA.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def write(folder: Path, name: str, data: dict[str, Any]) -> Path:
    path = folder / name
    path.write_text(json.dumps(data, indent=2))
    return path


def edit(folder: Path, name: str, change: Any) -> Path:
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))
    return path


def errors(path: Path) -> list[tuple[str, str, str]]:
    report = inspect(path)
    assert report.definition is None
    return [(p.path, p.code, p.message) for p in report.errors]


OPEN = reply("ask_policy", "Hi! Your policy number?")
TO_IDENTITY = reply("identity", "Thanks, let's check who you are.", policy_number="P1", customer_name="Ann")
DOB = reply("check", "What was your first pet's name?", dob="1990-01-01")


def claim(folder: Path, *replies: Any, hooks: Hooks | None = None) -> tuple[Conversation, ScriptedLLM]:
    llm = ScriptedLLM(list(replies))
    return Conversation(llm_fsm.load(folder / "claim.json"), llm, hooks=hooks), llm


def in_identity(folder: Path, *more: Any, hooks: Hooks | None = None) -> tuple[Conversation, ScriptedLLM]:
    conversation, llm = claim(folder, OPEN, TO_IDENTITY, *more, hooks=hooks)
    conversation.start()
    conversation.send("P1, I'm Ann")
    return conversation, llm


# -- loading ----------------------------------------------------------------------------------


def test_the_sub_definition_is_loaded_and_attached(folder: Path) -> None:
    definition = llm_fsm.load(folder / "claim.json")
    assert definition.subflow_definitions["identity_check.json"].name == "identity_check"


def test_a_bare_name_means_a_json_file_in_the_same_folder(folder: Path) -> None:
    path = edit(folder, "claim.json", lambda d: d["states"]["identity"]["subflow"].update(definition="identity_check"))
    assert llm_fsm.load(path).subflow_definitions["identity_check"].name == "identity_check"


def test_a_missing_sub_definition_is_an_error_naming_the_state(folder: Path) -> None:
    (folder / "identity_check.json").unlink()
    found = errors(folder / "claim.json")
    assert ("states.identity.subflow.definition", "subflow_invalid") in [(p, c) for p, c, _ in found]
    assert any(c == "unreadable" for _, c, _ in found)


def test_a_broken_sub_definition_reports_its_own_problems_with_its_file(folder: Path) -> None:
    edit(folder, "identity_check.json", lambda d: d["states"]["ask_dob"]["transitions"][0].update(target_state="nope"))
    report = inspect(folder / "claim.json")
    inner = [p for p in report.errors if p.code == "unknown_state"]
    assert inner and inner[0].source.endswith("identity_check.json")
    assert inner[0].path == "states.ask_dob.transitions[0].target_state"


def test_mapping_keys_the_sub_definition_does_not_use_are_errors(folder: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["states"]["identity"]["subflow"]["input"] = {"nmae": "customer_name"}
        d["states"]["identity"]["subflow"]["output"] = {"identity_verified": "verifed", "_secret": "dob"}

    found = errors(edit(folder, "claim.json", change))
    assert ("states.identity.subflow.input.nmae", "subflow_key") in [(p, c) for p, c, _ in found]
    unknown = [m for p, c, m in found if p == "states.identity.subflow.output.identity_verified"]
    assert unknown and "verifed" in unknown[0]
    assert ("states.identity.subflow.output._secret", "subflow_key") in [(p, c) for p, c, _ in found]
    hints = [p.hint for p in inspect(folder / "claim.json").errors if p.path.endswith("input.nmae")]
    assert hints and "name" in hints[0]


def test_an_input_our_definition_never_names_is_a_warning(folder: Path) -> None:
    path = edit(folder, "claim.json", lambda d: d["states"]["identity"]["subflow"]["input"].update(name="caller"))
    report = inspect(path)
    assert report.definition is not None
    assert [w.code for w in report.warnings] == ["subflow_input"]


def test_a_subflow_state_needs_a_transition_without_conditions(folder: Path) -> None:
    path = edit(folder, "claim.json", lambda d: d["states"]["identity"]["transitions"].pop())
    assert ("states.identity.transitions", "subflow_fallback") in [(p, c) for p, c, _ in errors(path)]


def test_a_terminal_subflow_state_is_an_error(folder: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["states"]["done"]["subflow"] = {"definition": "identity_check.json"}

    assert ("states.done.subflow", "subflow_terminal") in [
        (p, c) for p, c, _ in errors(edit(folder, "claim.json", change))
    ]


def test_a_cycle_of_subflows_is_an_error(folder: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["states"]["check"]["subflow"] = {"definition": "claim.json"}

    edit(folder, "identity_check.json", change)
    messages = [m for p, c, m in errors(folder / "claim.json") if c == "subflow_cycle"]
    assert messages and "claim.json → identity_check.json → claim.json" in messages[0]


def chain(folder: Path, length: int) -> Path:
    """level0.json runs level1.json ... up to level<length>.json (a plain two-state definition)."""
    for n in range(length, -1, -1):
        states: dict[str, Any] = {"talk": {"transitions": [{"target_state": "end"}]}, "end": {}}
        if n < length:
            states["talk"]["subflow"] = {"definition": f"level{n + 1}.json"}
        write(folder, f"level{n}.json", {"name": f"level{n}", "initial_state": "talk", "states": states})
    return folder / "level0.json"


def test_subflows_nest_at_most_max_depth(tmp_path: Path) -> None:
    from llm_fsm.subflows import MAX_DEPTH

    assert llm_fsm.load(chain(tmp_path, MAX_DEPTH))
    found = errors(chain(tmp_path, MAX_DEPTH + 1))
    assert [c for _, c, _ in found].count("subflow_depth") == 1


def test_a_definition_built_in_code_must_attach_its_subflows(folder: Path) -> None:
    data = json.loads((folder / "claim.json").read_text())
    data["states"] = {sid: {**state, "id": sid} for sid, state in data["states"].items()}
    definition = llm_fsm.FSMDefinition.model_validate(data)
    with pytest.raises(DefinitionError, match="runs subflow 'identity_check.json', which is not loaded"):
        Conversation(definition, ScriptedLLM())
    from llm_fsm import subflows

    subflows.attach(definition, {"identity_check.json": llm_fsm.load(folder / "identity_check.json")})
    assert Conversation(definition, ScriptedLLM()).state == "ask_policy"


def test_validate_cli_reports_subflow_problems(folder: Path) -> None:
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    edit(folder, "claim.json", lambda d: d["states"]["identity"]["subflow"]["output"].update(x="nothing_there"))
    result = CliRunner().invoke(app, ["validate", str(folder / "claim.json")])
    assert result.exit_code != 0 and "nothing_there" in result.output and "Traceback" not in result.output


# -- running ------------------------------------------------------------------------------------


def test_entering_a_subflow_state_pushes_it_with_the_input_mapping(folder: Path) -> None:
    conversation, _ = in_identity(folder)
    snapshot = conversation.snapshot()
    assert conversation.state == "identity" and len(snapshot.stack) == 1
    frame = snapshot.stack[0]
    assert (frame.definition, frame.state, frame.snapshot.state) == ("identity_check", "identity", "ask_dob")
    assert frame.snapshot.context == {"name": "Ann"}
    assert frame.snapshot.provenance["name"].by == "parent:claim"
    assert conversation.frames == [
        {"definition": "claim", "state": "identity"},
        {"definition": "identity_check", "state": "ask_dob"},
    ]


def test_turns_run_in_the_sub_definition(folder: Path) -> None:
    conversation, llm = in_identity(folder, DOB)
    result = conversation.send("1 Jan 1990")
    prompt = llm.requests[-1].messages[0]["content"]
    assert '"identity_check"' in prompt and "describe_loss" not in prompt
    assert llm.requests[-1].state == "ask_dob"
    assert result.ran_in == ("identity_check", "ask_dob")
    assert result.frames == (("claim", "identity"), ("identity_check", "check"))
    assert result.state == result.previous_state == "identity" and result.context_updates == {"dob": "1990-01-01"}
    assert conversation.snapshot().stack[0].snapshot.context["dob"] == "1990-01-01"
    assert "dob" not in conversation.context  # ours only on the way back
    assert [e.user for e in conversation.history][-1] == "1 Jan 1990"  # the root hears the exchange


@pytest.mark.parametrize(
    ("verified", "target"), [(True, "describe_loss"), (False, "refused")], ids=["verified", "not verified"]
)
def test_the_end_pops_with_the_output_and_the_move_its_results_choose(
    folder: Path, verified: bool, target: str
) -> None:
    end = reply("ok" if verified else "failed", "Identity confirmed." if verified else "Sorry.", verified=verified)
    conversation, llm = in_identity(folder, DOB, end)
    conversation.send("1 Jan 1990")
    calls = len(llm.requests)
    result = conversation.send("Rex")
    assert len(llm.requests) == calls + 1  # one model call: the runtime chose the move
    assert result.message == ("Identity confirmed." if verified else "Sorry.")
    assert (result.previous_state, result.state) == ("identity", target)
    assert result.frames == (("claim", target),) and result.ran_in == ("identity_check", "check")
    assert conversation.snapshot().stack == ()
    assert conversation.context["identity_verified"] is verified
    assert conversation.context["date_of_birth"] == "1990-01-01"
    assert conversation.provenance["identity_verified"]["by"] == "subflow:identity_check"
    assert conversation.ended is (target == "refused")


def test_handlers_of_the_move_after_a_pop_run(folder: Path) -> None:
    hooks, seen = Hooks(), []

    @hooks.on("state_enter", states=["describe_loss"])
    def entered(*, context: Any, **_: Any) -> None:
        seen.append(context["identity_verified"])

    conversation, _ = in_identity(folder, DOB, reply("ok", "Confirmed.", verified=True), hooks=hooks)
    conversation.send("1 Jan 1990")
    conversation.send("Rex")
    assert seen == [True]


def nested(folder: Path) -> Path:
    """outer -> middle (subflow inner) -> inner; inner's answer comes back through both."""
    write(
        folder,
        "inner.json",
        {
            "name": "inner",
            "initial_state": "ask",
            "states": {
                "ask": {"required_context_keys": ["answer"], "transitions": [{"target_state": "end"}]},
                "end": {},
            },
        },
    )
    write(folder, "middle.json", {"name": "middle", "initial_state": "run", "states": {
        "run": {"subflow": {"definition": "inner", "output": {"got": "answer"}},
                "transitions": [{"target_state": "end"}]},
        "end": {"required_context_keys": ["got"]}}})  # fmt: skip
    return write(folder, "outer.json", {"name": "outer", "initial_state": "run", "states": {
        "run": {"subflow": {"definition": "middle", "output": {"result": "got"}},
                "transitions": [{"target_state": "end"}]},
        "end": {"required_context_keys": ["result"]}}})  # fmt: skip


def test_two_levels_deep_the_opening_is_the_innermost_and_the_end_pops_both(tmp_path: Path) -> None:
    llm = ScriptedLLM([reply("ask", "What is the answer?"), reply("end", "Noted.", answer=42)])
    conversation = Conversation(llm_fsm.load(nested(tmp_path)), llm)
    assert [f["definition"] for f in conversation.frames] == ["outer", "middle", "inner"]
    opening = conversation.start()
    assert opening.message == "What is the answer?" and opening.ran_in == ("inner", "ask")
    assert opening.previous_state is None and opening.turn == 0
    result = conversation.send("42")
    assert result.message == "Noted." and result.frames == (("outer", "end"),)
    assert conversation.ended and conversation.context == {"result": 42}
    assert conversation.provenance["result"]["by"] == "subflow:middle"
    with pytest.raises(llm_fsm.ConversationEnded):
        conversation.send("more?")


def test_the_stack_never_grows_past_max_depth(tmp_path: Path) -> None:
    from llm_fsm.subflows import MAX_DEPTH

    conversation = Conversation(llm_fsm.load(chain(tmp_path, MAX_DEPTH)), ScriptedLLM())
    assert len(conversation.snapshot().stack) == MAX_DEPTH


def test_a_streamed_turn_inside_a_subflow(folder: Path) -> None:
    conversation, _ = in_identity(folder, DOB)
    events = list(conversation.stream("1 Jan 1990"))
    assert events[-1].ran_in == ("identity_check", "ask_dob")
    assert "".join(e.text for e in events if hasattr(e, "text")) == "What was your first pet's name?"


# -- pauses -------------------------------------------------------------------------------------


def pausing() -> Hooks:
    hooks = Hooks()

    @hooks.on("before_transition", states=["ask_dob"], targets=["check"])
    def hold(*, context: Any, **_: Any) -> None:
        raise Break("a person checks the date", {"dob": context["dob"]})

    return hooks


def test_a_break_inside_a_subflow_pauses_everything_and_resumes_once(folder: Path) -> None:
    conversation, _ = in_identity(folder, DOB, reply("check", "Checked. Your first pet?"), hooks=pausing())
    paused = conversation.send("1 Jan 1990")
    assert paused.paused and conversation.paused and conversation.pending.reason == "a person checks the date"
    assert conversation.snapshot().stack[0].snapshot.status == "paused"
    with pytest.raises(llm_fsm.ConversationPaused):
        conversation.send("hello?")
    token = conversation.pending.token
    resumed = conversation.resume(token, {"dob_ok": True})
    assert resumed.message == "Checked. Your first pet?" and resumed.ran_in == ("identity_check", "ask_dob")
    assert conversation.status == "active" and conversation.frames[-1]["state"] == "check"
    assert conversation.snapshot().stack[0].snapshot.context["dob_ok"] is True
    with pytest.raises(ResumeError, match="already used"):
        conversation.resume(token)


def test_an_async_resume_inside_a_subflow_works_once(folder: Path) -> None:
    async def run() -> None:
        llm = ScriptedLLM([OPEN, TO_IDENTITY, DOB, reply("check", "Checked.")])
        conversation = Conversation(llm_fsm.load(folder / "claim.json"), llm, hooks=pausing())
        await conversation.astart()
        await conversation.asend("P1, Ann")
        token = (await conversation.asend("1990")).pending.token
        assert (await conversation.aresume(token)).message == "Checked."
        with pytest.raises(ResumeError):
            await conversation.aresume(token)

    asyncio.run(run())


def test_a_resume_after_a_reload_from_sqlite_works_once(folder: Path, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'c.db'}"
    conversation, _ = in_identity(folder, DOB, hooks=pausing())
    token = conversation.send("1990").pending.token
    with open_store(url) as store:
        store.save("c1", conversation.snapshot())
    with open_store(url) as store:
        saved = store.load("c1")
    assert saved is not None
    definition, llm = llm_fsm.load(folder / "claim.json"), ScriptedLLM([reply("check", "Checked.")])
    again = Conversation.restore(saved.snapshot, definition, llm, hooks=pausing())
    assert again.paused and again.resume(token).message == "Checked."
    with open_store(url) as store:
        store.save("c1", again.snapshot())
        twice = Conversation.restore(store.load("c1").snapshot, definition, ScriptedLLM(), hooks=pausing())  # type: ignore[union-attr]
    with pytest.raises(ResumeError, match="already used"):
        twice.resume(token)


def test_a_tool_approval_inside_a_subflow_runs_the_tool_once(folder: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["tools"] = {"lookup": {"approval": "always", "result_key": "record"}}
        d["states"]["ask_dob"]["tools"] = ["lookup"]

    edit(folder, "identity_check.json", change)
    hooks, ran = Hooks(), []

    @hooks.tool()
    def lookup(name: str) -> dict[str, Any]:
        ran.append(name)
        return {"dob": "1990-01-01"}

    from llm_fsm.testing.scripted import tool_calls

    conversation, _ = in_identity(folder, tool_calls(("lookup", {"name": "Ann"})), DOB, hooks=hooks)
    paused = conversation.send("look me up")
    assert paused.pending is not None and paused.pending.kind == "tool_approval" and ran == []
    token = paused.pending.token
    result = conversation.resume(token, {"approved": True})
    assert ran == ["Ann"] and result.frames[-1] == ("identity_check", "check")
    assert conversation.snapshot().stack[0].snapshot.context["record"] == {"dob": "1990-01-01"}
    with pytest.raises(ResumeError):
        conversation.resume(token, {"approved": True})
    assert ran == ["Ann"]


# -- snapshots, stores, restore -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite", "redis"])
def test_the_stack_round_trips_through_every_store(folder: Path, tmp_path: Path, request: Any, kind: str) -> None:
    conversation, _ = in_identity(folder, DOB)
    conversation.send("1990")
    with open_store(url_for(kind, tmp_path, request)) as store:
        store.save("c1", conversation.snapshot())
        loaded = store.load("c1")
    assert loaded is not None and loaded.snapshot == conversation.snapshot()
    assert loaded.snapshot.stack[0].snapshot.context["dob"] == "1990-01-01"


def test_a_snapshot_without_a_stack_still_loads(folder: Path) -> None:
    data = json.loads(Conversation(llm_fsm.load(folder / "claim.json"), ScriptedLLM()).snapshot().model_dump_json())
    del data["stack"]
    snapshot = Snapshot.model_validate(data)
    assert snapshot.stack == ()
    restored = Conversation.restore(data, llm_fsm.load(folder / "claim.json"), ScriptedLLM())
    assert restored.frames == [{"definition": "claim", "state": "ask_policy"}]


def test_restore_refuses_a_stack_the_definition_does_not_run(folder: Path) -> None:
    conversation, _ = in_identity(folder)
    data = json.loads(conversation.snapshot().model_dump_json())
    data["stack"][0]["definition"] = "someone_else"
    with pytest.raises(ConversationError, match="sub-conversation #1"):
        Conversation.restore(data, llm_fsm.load(folder / "claim.json"), ScriptedLLM())


def test_restore_refuses_a_changed_sub_definition_unless_allowed(folder: Path) -> None:
    conversation, _ = in_identity(folder)
    saved = conversation.snapshot()
    edit(folder, "identity_check.json", lambda d: d["states"]["ask_dob"]["required_context_keys"].append("place"))
    changed = llm_fsm.load(folder / "claim.json")
    with pytest.raises(ConversationError, match="'identity_check' changed"):
        Conversation.restore(saved, changed, ScriptedLLM())
    assert (
        Conversation.restore(saved, changed, ScriptedLLM(), allow_changed_definition=True).frames[-1]["state"]
        == "ask_dob"
    )


# -- views --------------------------------------------------------------------------------------


def test_graph_exports_name_the_sub_definition(folder: Path) -> None:
    definition = llm_fsm.load(folder / "claim.json")
    assert "    s1 : runs subflow identity_check" in to_mermaid(definition).splitlines()
    assert '"identity" [label="identity\\nruns subflow identity_check", peripheries=2];' in to_dot(definition)


def test_the_run_jsonl_shape_names_the_frames(folder: Path) -> None:
    conversation, _ = in_identity(folder, DOB)
    data = conversation.send("1990").to_dict()
    assert data["frames"] == [["claim", "identity"], ["identity_check", "check"]]
    assert data["ran_in"] == ("identity_check", "ask_dob")


def test_server_get_shows_the_stack(folder: Path) -> None:
    from fastapi.testclient import TestClient

    from llm_fsm.server import create_app

    llm = ScriptedLLM([OPEN, TO_IDENTITY])
    http = TestClient(create_app([llm_fsm.load(folder / "claim.json")], llm, store="memory:"))
    cid = http.post("/conversations", json={"definition": "claim"}).json()["id"]
    http.post(f"/conversations/{cid}/messages", json={"message": "P1, Ann"})
    body = http.get(f"/conversations/{cid}").json()
    assert body["stack"] == [
        {"definition": "claim", "state": "identity"},
        {"definition": "identity_check", "state": "ask_dob"},
    ]
    assert body["state"] == "identity"


def test_the_turn_span_names_the_frame(folder: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llm_fsm import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    try:
        conversation, _ = in_identity(folder, DOB)
        conversation.send("1990")
    finally:
        telemetry.set_tracer_provider(None)
    turns = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent ")]
    assert [s.name for s in turns] == ["invoke_agent claim"] * 3
    last = turns[-1].attributes
    assert last["llm_fsm.frame.definition"] == "identity_check" and last["llm_fsm.frame.depth"] == 1
    assert last["llm_fsm.frame.state"] == "ask_dob" and last["llm_fsm.state.before"] == "identity"
    assert last["llm_fsm.state.after"] == "identity" and last["llm_fsm.turn.runner"] == 2
    assert turns[0].attributes["llm_fsm.frame.depth"] == 0
    calls = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(calls) == 3 and calls[-1].parent.span_id == turns[-1].context.span_id


def test_chat_state_and_why_show_the_stack(folder: Path, tmp_path: Path) -> None:
    from tests.cli.test_chat import chat

    result = chat(folder / "claim.json", tmp_path, [OPEN, TO_IDENTITY, DOB], "P1, Ann\n1990\n/state\n/why\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "in claim › identity_check: check" in result.output
    assert "check: Ask the security answer." in result.output
    assert "The last turn ran in the sub-conversation identity_check › ask_dob." in result.output


def test_validate_does_not_warn_about_keys_a_subflow_sets_or_reads(folder: Path) -> None:
    from llm_fsm.authoring.analysis import analyze

    assert analyze(folder / "claim.json") == []
    edit(folder, "claim.json", lambda d: d["states"]["identity"].pop("subflow"))  # now nothing sets it
    assert "key_never_set" in [d.code for d in analyze(folder / "claim.json")]


# -- found by a stranger's audit ------------------------------------------------------------------


def _run_cli(folder: Path, replies: list[Any], text: str, *extra: str) -> Any:
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    script = folder / "replies.json"
    script.write_text(json.dumps(replies))
    args = ["run", str(folder / "claim.json"), "-m", f"scripted:{script}", *extra]
    return CliRunner().invoke(app, args, input=text)


def test_run_continuing_a_stored_conversation_refuses_a_changed_sub_definition(folder: Path) -> None:
    store = ["--store", f"sqlite://{folder / 'store.db'}", "-c", "c1"]
    first = _run_cli(folder, [OPEN, TO_IDENTITY], "P1, I'm Ann\n", *store)
    assert first.exit_code == 0, first.output
    edit(folder, "identity_check.json", lambda d: d["states"]["ask_dob"]["required_context_keys"].append("place"))
    refused = _run_cli(folder, [DOB], "1990\n", *store)
    assert refused.exit_code == 2, refused.output
    assert "'identity_check' changed" in refused.stderr and "state 'ask_dob'" in refused.stderr
    assert "--allow-changed-definition" in refused.stderr and "allow_changed_definition=True" not in refused.stderr
    assert "Traceback" not in refused.output
    strict = _run_cli(folder, [DOB], "1990\n", *store, "--strict-definition")
    assert strict.exit_code == 2 and "'identity_check' changed" in strict.stderr
    allowed = _run_cli(folder, [DOB], "1990\n", *store, "--allow-changed-definition")
    assert allowed.exit_code == 0, allowed.output
    assert json.loads(allowed.stdout.splitlines()[0])["frames"][-1] == ["identity_check", "check"]


def test_restore_names_the_state_a_changed_sub_definition_lost(folder: Path) -> None:
    conversation, _ = in_identity(folder)
    saved = conversation.snapshot()

    def rename(data: dict[str, Any]) -> None:
        data["states"]["ask_birth_date"] = data["states"].pop("ask_dob")
        data["initial_state"] = "ask_birth_date"

    edit(folder, "identity_check.json", rename)
    changed = llm_fsm.load(folder / "claim.json")
    for allow in (False, True):
        with pytest.raises(ConversationError) as caught:
            Conversation.restore(saved, changed, ScriptedLLM(), allow_changed_definition=allow)
        assert "state 'ask_dob'" in str(caught.value) and "'identity_check'" in str(caught.value)


def test_an_unregistered_handler_in_a_sub_definition_names_the_sub_definition(folder: Path) -> None:
    edit(folder, "identity_check.json", lambda d: d["states"]["check"].update(handlers=["verify"]))
    with pytest.raises(DefinitionError) as caught:
        Conversation(llm_fsm.load(folder / "claim.json"), ScriptedLLM())
    assert [str(p) for p in caught.value.problems] == [
        "subflow 'identity_check': states.check.handlers[0]: state 'check' names handler 'verify', "
        "which is not registered"
    ]


def test_chat_state_inside_a_subflow_lists_the_parents_moves_from_anywhere(folder: Path, tmp_path: Path) -> None:
    from tests.cli.test_chat import chat

    cancel = {"target_state": "refused", "description": "The caller wants to stop", "priority": 5}
    edit(folder, "claim.json", lambda d: d.update(global_transitions=[cancel]))
    result = chat(folder / "claim.json", tmp_path, [OPEN, TO_IDENTITY], "P1, Ann\n/state\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "→ refused (from anywhere in 'claim') (priority 5) The caller wants to stop" in result.output
    assert result.output.index("→ refused") < result.output.index("→ check")


def test_chat_context_inside_a_subflow_shows_what_the_sub_conversation_holds(folder: Path, tmp_path: Path) -> None:
    from tests.cli.test_chat import chat

    result = chat(folder / "claim.json", tmp_path, [OPEN, TO_IDENTITY, DOB], "P1, Ann\n1990\n/context\n/quit\n")
    assert result.exit_code == 0, result.output
    shown = result.output.split("/context", 1)[-1] if "/context" in result.output else result.output
    assert "in identity_check" in shown and '"dob": "1990-01-01"' in shown


# -- a sub-definition's own opening -------------------------------------------------------------


def with_opening(folder: Path, opening: str) -> None:
    edit(folder, "identity_check.json", lambda d: d["states"]["ask_dob"].update(opening=opening))


def test_a_pushed_sub_conversation_writes_its_opening_after_the_move_with_no_model_call(folder: Path) -> None:
    with_opening(folder, "{{ name }}, your date of birth, please?")
    conversation, llm = claim(folder, OPEN, TO_IDENTITY, DOB)
    conversation.start()
    result = conversation.send("P1, I'm Ann")
    # the move's message, then the sub-conversation's opening: one turn, one model call (the move's)
    assert result.message == "Thanks, let's check who you are.\n\nAnn, your date of birth, please?"
    assert result.llm_calls == 1 and len(llm.requests) == 2
    assert result.frames == (("claim", "identity"), ("identity_check", "ask_dob"))
    frame = conversation.snapshot().stack[0].snapshot
    assert frame.status == "active" and frame.turns == 0
    assert [(e.user, e.assistant) for e in frame.history] == [(None, "Ann, your date of birth, please?")]
    assert conversation.history[-1].assistant == result.message  # the root heard what the user saw
    assert conversation.snapshot().turns == 1
    # the sub-conversation's first prompt shows its opening, answered by the user's message
    conversation.send("1 Jan 1990")
    system = llm.requests[-1].messages[0]["content"]
    assert "your date of birth, please?" in system and llm.requests[-1].state == "ask_dob"


def test_a_pushed_opening_streams_after_the_moves_message(folder: Path) -> None:
    with_opening(folder, "Your date of birth?")
    conversation, _ = claim(folder, OPEN, TO_IDENTITY)
    conversation.start()
    events = list(conversation.stream("P1, I'm Ann"))
    text = "".join(e.text for e in events if type(e).__name__ == "MessageDelta")
    assert text == events[-1].message == "Thanks, let's check who you are.\n\nYour date of birth?"


def test_a_pushed_opening_runs_the_sub_definitions_start_handlers_first(folder: Path) -> None:
    with_opening(folder, "Hello {{ name }} ({{ tier }}): your date of birth?")
    hooks = Hooks()
    hooks.on("start", states=["ask_dob"])(lambda **_: {"tier": "gold"})
    conversation, _ = claim(folder, OPEN, TO_IDENTITY, hooks=hooks)
    conversation.start()
    assert conversation.send("P1, I'm Ann").message.endswith("Hello Ann (gold): your date of birth?")


def test_a_pushed_opening_that_cannot_be_written_fails_the_turn_naming_the_sub_state_and_our_key(
    folder: Path,
) -> None:
    with_opening(folder, "{{ name }}, your date of birth?")
    move = reply("identity", "Thanks, let's check who you are.", policy_number="P1")  # no customer_name
    conversation, _ = claim(folder, OPEN, move)
    conversation.start()
    before = conversation.snapshot()
    with pytest.raises(llm_fsm.OpeningError) as caught:
        conversation.send("P1")
    said = str(caught.value)
    assert "state 'ask_dob' of the subflow 'identity_check'" in said and "state 'identity'" in said
    assert "'name' is undefined" in said and "'customer_name'" in said  # the key our context lacks
    assert "initial context" not in said  # that advice is for a conversation's own opening
    assert conversation.snapshot() == before  # the failed turn changed nothing


def test_a_conversation_opening_in_a_subflow_names_our_key_when_its_opening_fails(folder: Path) -> None:
    with_opening(folder, "{{ name }}, your date of birth?")
    edit(folder, "claim.json", lambda d: d.update(initial_state="identity"))
    conversation = Conversation(llm_fsm.load(folder / "claim.json"), ScriptedLLM([]))
    with pytest.raises(llm_fsm.OpeningError) as caught:
        conversation.start()
    said = str(caught.value)
    assert "state 'ask_dob' of the subflow 'identity_check'" in said and "'customer_name'" in said
    assert (
        Conversation(llm_fsm.load(folder / "claim.json"), ScriptedLLM([]), context={"customer_name": "Bo"})
        .start()
        .message
        == "Bo, your date of birth?"
    )
