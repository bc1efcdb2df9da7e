"""Global transitions (moves from anywhere) and "$return" (back where the conversation came from):
the format and its errors, the engine's decisions, the way back in snapshots and stores, prompts,
reply schemas, the analysis and the graph."""

from __future__ import annotations

import json
import random
import uuid

import pytest

import llm_fsm
from llm_fsm.authoring.analysis import analyze
from llm_fsm.authoring.diagram import to_dot, to_mermaid
from llm_fsm.definition.models import RETURN
from llm_fsm.errors import DefinitionError
from llm_fsm.guided.schema import guided_schema
from llm_fsm.snapshot import Snapshot
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM, SimulatedLLM
from llm_fsm.testing.conversation_tests import CaseOutcome, coverage
from llm_fsm.turn.engine import way_back
from llm_fsm.turn.requests import state_reply_schemas
from tests.conftest import ROOT, reply

FORM = {
    "name": "form",
    "initial_state": "ask_name",
    "global_transitions": [
        {
            "target_state": "cancelled",
            "description": "The user wants to stop",
            "priority": 5,
            "except_states": ["confirm"],
        },
        {"target_state": "help", "description": "The user asks a question"},
    ],
    "states": {
        "ask_name": {
            "required_context_keys": ["name"],
            "transitions": [{"target_state": "ask_email", "conditions": [{"requires_context_keys": ["name"]}]}],
        },
        "ask_email": {
            "required_context_keys": ["email"],
            "transitions": [{"target_state": "confirm", "conditions": [{"requires_context_keys": ["email"]}]}],
        },
        "confirm": {"transitions": [{"target_state": "done"}, {"target_state": "ask_name", "priority": 100}]},
        "help": {
            "purpose": "Answer the question",
            "transitions": [{"target_state": RETURN, "description": "The question is answered"}],
        },
        "cancelled": {},
        "done": {},
    },
}


def form(**changes):
    return llm_fsm.load({**json.loads(json.dumps(FORM)), **changes})


def targets(definition, state, back_to=None):
    return [t.target_state for t in definition.moves(state, back_to)]


def run(definition, replies, lines):
    llm = ScriptedLLM(replies)
    conversation = llm_fsm.Conversation(definition, llm)
    results = [conversation.start(), *(conversation.send(line) for line in lines)]
    return conversation, results, llm


def problems(data):
    with pytest.raises(DefinitionError) as caught:
        llm_fsm.load(data)
    return {(p.path, p.code): p for p in caught.value.problems}


# -- the format -------------------------------------------------------------------------------------


def test_global_moves_apply_everywhere_but_terminal_excepted_states_and_their_own_target():
    definition = form()
    assert targets(definition, "ask_name") == ["cancelled", "ask_email", "help"]  # by priority: 5, then 100s
    assert targets(definition, "confirm") == ["done", "ask_name", "help"]  # cancel is excepted there
    assert targets(definition, "help") == ["cancelled"]  # not to itself; "$return" left out: nowhere to go
    assert targets(definition, "help", "ask_email") == ["cancelled", "ask_email"]
    assert targets(definition, "done") == [] and definition.states["done"].terminal


def test_on_equal_priorities_a_states_own_transitions_come_first():
    data = json.loads(json.dumps(FORM))
    data["global_transitions"].insert(0, {"target_state": "done", "description": "skip", "priority": 100})
    definition = llm_fsm.load(data)
    assert targets(definition, "ask_name") == ["cancelled", "ask_email", "done", "help"]


def test_unknown_targets_and_excepted_states_are_errors_naming_where():
    data = json.loads(json.dumps(FORM))
    data["global_transitions"][0]["target_state"] = "canceled"
    data["global_transitions"][1]["except_states"] = ["confrim"]
    data["states"]["help"]["transitions"][0]["target_state"] = "return"
    data["global_transitions"].append({"target_state": "done", "conditions": [{"logic": {"nope": [1]}}]})
    found = problems(data)
    target = found[("global_transitions[0].target_state", "unknown_state")]
    assert target.message == "unknown state 'canceled'" and "cancelled" in target.hint
    assert "confirm" in found[("global_transitions[1].except_states[0]", "unknown_state")].hint
    back = found[("states.help.transitions[0].target_state", "unknown_state")]
    assert RETURN in back.hint
    assert ("global_transitions[2].conditions[0].logic", "logic") in found


def test_a_global_transition_of_the_wrong_shape_is_named_with_its_line():
    text = json.dumps({**FORM, "global_transitions": [{"target_state": "done", "except_states": "confirm"}]}, indent=1)
    report = llm_fsm.definition.loader.load_text(text, source="f.json")
    (problem,) = report.errors
    assert problem.path == "global_transitions[0].except_states" and problem.line is not None
    assert "list" in problem.message


def test_an_unknown_field_of_a_global_transition_is_reported():
    data = json.loads(json.dumps(FORM))
    data["global_transitions"][0]["expect_states"] = ["confirm"]
    with pytest.warns(
        llm_fsm.definition.loader.DefinitionWarning, match=r"global_transitions\[0\]\.expect_states.*except_states"
    ):
        llm_fsm.load(data)
    assert "unknown_field" in {p[1] for p in problems_strict(data)}


def problems_strict(data):
    with pytest.raises(DefinitionError) as caught:
        llm_fsm.load(data, strict=True)
    return {(p.path, p.code) for p in caught.value.problems}


def test_a_terminal_reached_only_by_a_global_move_counts_for_the_loader():
    data = json.loads(json.dumps(FORM))
    data["states"]["confirm"]["transitions"] = [{"target_state": "ask_name"}]
    del data["states"]["done"]
    assert llm_fsm.load(data).initial_state == "ask_name"  # "cancelled", by the global move, ends it
    data["global_transitions"][0]["except_states"] = ["ask_name", "ask_email", "confirm", "help"]
    assert ("initial_state", "no_terminal") in problems(data)  # excepted everywhere: no end left


def test_definitions_without_global_transitions_keep_their_hash():
    data = json.loads(json.dumps(FORM))
    del data["global_transitions"]
    data["states"]["help"]["transitions"] = [{"target_state": "ask_name"}]
    assert llm_fsm.load(data).content_hash == llm_fsm.load({**data, "global_transitions": []}).content_hash


def test_restoring_names_a_change_of_the_global_transitions_and_lets_prose_edits_through():
    definition = form()
    conversation, _, _ = run(definition, [reply("ask_name", "Hi")], [])
    saved = conversation.snapshot()
    data = json.loads(json.dumps(FORM))
    data["global_transitions"][1]["description"] = "The user asks anything"  # prose
    assert llm_fsm.Conversation.restore(saved, llm_fsm.load(data), ScriptedLLM([])).state == "ask_name"
    data["global_transitions"][1]["except_states"] = ["confirm"]  # structure
    with pytest.raises(llm_fsm.ConversationError, match="global transitions changed"):
        llm_fsm.Conversation.restore(saved, llm_fsm.load(data), ScriptedLLM([]))
    data["global_transitions"] = []
    with pytest.raises(llm_fsm.ConversationError, match="global transitions changed"):
        llm_fsm.Conversation.restore(saved, llm_fsm.load(data), ScriptedLLM([]))


# -- the engine -------------------------------------------------------------------------------------


def test_a_global_move_is_taken_from_any_state_and_refused_where_it_is_excepted():
    definition = form()
    conversation, results, _ = run(
        definition,
        [reply("ask_name", "Hi"), reply("cancelled", "Bye")],
        ["stop"],
    )
    assert results[-1].state == "cancelled" and conversation.ended
    replies = [
        reply("ask_name", "Hi"),
        reply("ask_email", "Email?", name="Ann"),
        reply("confirm", "Sure?", email="a@b.c"),
        reply("cancelled", "Bye"),
        reply("cancelled", "Bye"),
    ]
    conversation, results, _ = run(definition, replies, ["Ann", "a@b.c", "stop"])
    assert conversation.state == "confirm"  # both replies refused: the move is excepted in confirm
    assert "'confirm' has no transition to it (allowed: 'done', 'ask_name', 'help')" in results[-1].rejected[0].reason


def test_the_conditions_of_a_global_move_are_checked_like_a_states_own():
    data = json.loads(json.dumps(FORM))
    gate = {"description": "the user asked twice", "logic": {"==": [{"var": "insists"}, True]}}
    data["global_transitions"].append({"target_state": "done", "description": "a person", "conditions": [gate]})
    definition = llm_fsm.load(data)
    replies = [reply("ask_name", "Hi"), reply("done", "Bye"), reply("done", "Bye"), reply("done", "Bye", insists=True)]
    conversation, results, _ = run(definition, replies, ["a person", "a person, now"])
    assert "condition 'the user asked twice' does not hold" in results[1].rejected[0].reason
    assert conversation.state == "done" and conversation.context["insists"] is True  # its key is writable here


def test_return_goes_back_where_the_conversation_came_from():
    definition = form()
    replies = [
        reply("ask_name", "Hi"),
        reply("ask_email", "Email?", name="Ann"),
        reply("help", "It is free"),
        reply("ask_email", "Your email?"),
        reply("confirm", "Sure?", email="a@b.c"),
        reply("help", "Yes, you can"),
        reply(RETURN, "So, sure?"),  # the move's name works too
    ]
    conversation, results, _ = run(definition, replies, ["Ann", "cost?", "ok", "a@b.c", "can I?", "ok"])
    assert [r.state for r in results] == ["ask_name", "ask_email", "help", "ask_email", "confirm", "help", "confirm"]
    assert not any(r.rejected for r in results)
    assert conversation.snapshot().came_from == ("ask_name", "ask_email")


def test_nested_help_goes_back_one_level_at_a_time():
    data = json.loads(json.dumps(FORM))
    data["states"]["help"]["transitions"].append({"target_state": "details", "description": "more detail"})
    data["states"]["details"] = {"transitions": [{"target_state": RETURN}, {"target_state": "help"}]}
    definition = llm_fsm.load(data)
    replies = [
        reply("ask_name", "Hi"),
        reply("help", "Answer"),
        reply("details", "Details"),
        reply("help", "Back to help"),  # by "$return"
        reply("details", "Details again"),
        reply("help", "Back to help"),  # by its own transition to help: help is on the way back, so it goes back
        reply("ask_name", "Your name?"),  # "$return" from help: where help was entered from
    ]
    conversation, results, _ = run(definition, replies, ["?", "more", "ok", "more", "back", "ok"])
    assert [r.state for r in results][-1] == "ask_name" and not any(r.rejected for r in results)
    assert conversation.snapshot().came_from == ()


def test_with_nowhere_to_return_the_move_is_not_offered_and_is_refused():
    definition = form(initial_state="help")
    conversation, results, llm = run(
        definition, [reply("help", "Hi"), reply(RETURN, "x"), reply("ask_name", "x")], ["go"]
    )
    assert conversation.state == "help"
    reasons = [r.reason for r in results[-1].rejected]
    assert (
        reasons[0]
        == "transition to '$return' rejected: 'help' came from nowhere: there is no way back (allowed: 'cancelled')"
    )
    assert "has no transition to it" in reasons[1]
    prompt = llm.requests[0].messages[0]["content"]
    assert "<valid_states>help, cancelled</valid_states>" in prompt and RETURN not in prompt


def test_the_way_back_holds_each_state_once():
    rng = random.Random(3)
    names = [f"s{n}" for n in range(6)]
    came_from: tuple[str, ...] = ()
    state = "s0"
    for _ in range(2000):
        entered = rng.choice(names)
        came_from = way_back(came_from, state, entered)
        state = entered
        assert len(set(came_from)) == len(came_from) and state not in came_from
    assert way_back(("a", "b", "c"), "d", "b") == ("a",)
    assert way_back(("a", "b"), "c", "c") == ("a", "b")
    assert way_back(("a", "b"), "c", "e") == ("a", "b", "c")


def test_a_snapshot_without_the_way_back_still_loads():
    definition = form()
    conversation, _, _ = run(definition, [reply("ask_name", "Hi")], [])
    old = conversation.snapshot().model_dump(mode="json")
    del old["came_from"]
    restored = llm_fsm.Conversation.restore(json.dumps(old), definition, ScriptedLLM([]))
    assert restored.snapshot().came_from == ()


@pytest.fixture(params=["memory", "file", "sqlite", "redis"])
def store_url(request, tmp_path):
    if request.param == "memory":
        return "memory:"
    if request.param == "file":
        return f"file://{tmp_path / 'conversations'}"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'conversations.db'}"
    return f"{request.getfixturevalue('redis_url')}?prefix=test-{uuid.uuid4().hex}"


def test_every_store_keeps_the_way_back(store_url):
    definition = form()
    replies = [reply("ask_name", "Hi"), reply("ask_email", "Email?", name="Ann"), reply("help", "Answer")]
    conversation, _, _ = run(definition, replies, ["Ann", "?"])
    store = open_store(store_url)
    try:
        store.save("c1", conversation.snapshot())
        loaded = store.load("c1").snapshot
        assert loaded.came_from == ("ask_name", "ask_email") and loaded == conversation.snapshot()
        later = llm_fsm.Conversation.restore(loaded, definition, ScriptedLLM([reply(RETURN, "Your email?")]))
        assert later.send("ok").state == "ask_email"
        store.save("c1", later.snapshot(), expected_version=1)
        assert store.load("c1").snapshot.came_from == ("ask_name",)
    finally:
        store.close()


# -- what the model is shown --------------------------------------------------------------------------


def test_the_prompt_lists_the_global_moves_with_their_conditions_and_where_return_goes():
    data = json.loads(json.dumps(FORM))
    data["global_transitions"][1]["conditions"] = [{"description": "a real question", "requires_context_keys": ["q"]}]
    definition = llm_fsm.load(data)
    replies = [reply("ask_name", "Hi"), reply("help", "Answer", q="price"), reply("ask_name", "Name?")]
    _, _, llm = run(definition, replies, ["price?", "ok"])
    first, in_help = llm.requests[0].messages[0]["content"], llm.requests[2].messages[0]["content"]
    # the state's own moves first, then those from anywhere (cancelled has the higher priority, 5)
    assert "<valid_states>ask_name, ask_email, cancelled, help</valid_states>" in first
    assert "<target>help</target>\n<description>The user asks a question</description>" in first
    assert "<condition>a real question (needs: q)</condition>" in first and "<key>q</key>" in first
    assert "<valid_states>help, ask_name, cancelled</valid_states>" in in_help
    assert "<target>ask_name</target>\n<description>The question is answered</description>" in in_help
    confirm = llm_fsm.turn.prompt.PromptBuilder().definition_part(definition, "confirm")
    assert "<target>cancelled</target>" not in confirm  # excepted there


def test_the_reply_schemas_offer_the_global_moves_and_the_way_back():
    definition = form()
    enum = state_reply_schemas(definition, "help", "ask_email")[1]["properties"]["transition"]["properties"]
    assert enum["target_state"]["enum"] == ["ask_email", "cancelled", "help"]
    assert state_reply_schemas(definition, "help")[0]["properties"]["transition"]["properties"]["target_state"][
        "enum"
    ] == ["cancelled", "help"]
    guided = guided_schema(definition, "help", {}, back_to="ask_email")
    offered = {b["properties"]["target_state"]["enum"][0] for b in guided["properties"]["transition"]["anyOf"]}
    assert offered == {"ask_email", "cancelled", "help"}
    nowhere = guided_schema(definition, "help", {})
    offered = {b["properties"]["target_state"]["enum"][0] for b in nowhere["properties"]["transition"]["anyOf"]}
    assert offered == {"cancelled", "help"}
    in_confirm = guided_schema(definition, "confirm", {})["properties"]["transition"]["anyOf"]
    assert {b["properties"]["target_state"]["enum"][0] for b in in_confirm} == {"done", "ask_name", "help", "confirm"}


def test_the_request_carries_where_return_goes_and_a_guided_turn_offers_it():
    definition = form()
    llm = ScriptedLLM([reply("ask_name", "Hi"), reply("help", "Answer"), reply("ask_name", "Name?")])
    conversation = llm_fsm.Conversation(definition, llm, guided=True)
    conversation.start()
    conversation.send("?")
    assert conversation.send("ok").state == "ask_name"
    assert [r.back_to for r in llm.requests] == [None, None, "ask_name"]
    transition = llm.requests[2].strict_schema["properties"]["transition"]
    branches = transition.get("anyOf", [transition])
    # help collects nothing: "ok" is routed, and only the way back is its own move (issue 28)
    assert {b["properties"]["target_state"]["enum"][0] for b in branches} == {"ask_name"}


def test_the_simulated_model_goes_back_and_follows_a_path_through_help():
    definition = form()
    path = ["ask_name", "help", "ask_name", "ask_email", "help", "ask_email", "confirm", "done"]
    conversation = llm_fsm.Conversation(definition, SimulatedLLM(definition, path=path))
    visited = [conversation.start().state]
    while not conversation.ended and len(visited) < 20:
        visited.append(conversation.send("next").state)
    assert visited == path


# -- the analysis -----------------------------------------------------------------------------------


def codes(data):
    return [(d.code, d.path) for d in analyze(data)]


def test_a_state_reached_only_by_a_global_move_is_reachable_and_help_is_no_dead_end():
    assert codes(FORM) == []


def test_a_state_whose_only_way_out_is_excepted_is_a_dead_end():
    data = json.loads(json.dumps(FORM))
    data["states"]["confirm"]["transitions"] = [{"target_state": "confirm"}]  # only stays
    data["global_transitions"][1]["except_states"] = ["confirm"]
    found = analyze(data)
    (loop,) = [d for d in found if d.path == "states.confirm.transitions"]
    assert loop.code == "self_loop_no_exit" and "can never be left" in loop.message
    data["global_transitions"][0]["except_states"] = []
    found = analyze(data)
    (loop,) = [d for d in found if d.path == "states.confirm.transitions"]
    assert "it can be left only by the global transitions (to 'cancelled')" in loop.message


def test_a_dead_end_cannot_hide_behind_going_back_to_a_state_that_ends():
    data = json.loads(json.dumps(FORM))
    data["states"]["confirm"]["transitions"] = [{"target_state": "confirm"}]
    data["global_transitions"][0]["except_states"] = [
        "confirm",
        "help",
    ]  # confirm is left only for help, which comes back
    found = {(d.code, d.path): d for d in analyze(data)}
    assert ("self_loop_no_exit", "states.confirm.transitions") in found
    help_found = found[("no_path_to_terminal", "states.help")]
    assert "comes from 'confirm'" in help_found.message
    data["states"]["help"]["transitions"] = [{"target_state": RETURN}, {"target_state": "done"}]
    assert ("no_path_to_terminal", "states.help") not in {(d.code, d.path) for d in analyze(data)}


def test_a_loop_that_ends_only_by_cancelling_is_reported():
    data = json.loads(json.dumps(FORM))
    data["states"]["confirm"]["transitions"] = [{"target_state": "ask_name"}]
    del data["states"]["done"]
    found = {(d.code, d.path): d for d in analyze(data)}
    assert {path for code, path in found if code == "ends_only_by_global_move"} == {
        "states.ask_name",
        "states.ask_email",
        "states.confirm",
    }
    assert (
        "only the global transitions (to 'cancelled')" in found[("ends_only_by_global_move", "states.confirm")].message
    )
    assert not any(code == "no_path_to_terminal" for code, _ in found)


def test_return_from_the_initial_state_is_reported():
    data = json.loads(json.dumps(FORM))
    data["states"]["ask_name"]["transitions"].append({"target_state": RETURN})
    (warning,) = [d for d in analyze(data) if d.code == "nowhere_to_return"]
    assert warning.path == "states.ask_name.transitions[1].target_state"


def test_a_global_condition_that_never_holds_is_named_at_its_place():
    data = json.loads(json.dumps(FORM))
    data["global_transitions"][1]["conditions"] = [{"logic": {"==": [1, 2]}}]
    found = {(d.code, d.path): d for d in analyze(data)}
    never = found[("condition_never_holds", "global_transitions[1].conditions[0].logic")]
    assert "the global transition to 'help' can never be taken" in never.message
    unreachable = found[("unreachable_state", "states.help")]
    assert "(global_transitions[1])" in unreachable.message


def test_a_key_read_only_by_a_global_condition_is_used():
    data = json.loads(json.dumps(FORM))
    data["states"]["ask_name"]["required_context_keys"] = ["name", "urgency"]
    assert ("key_unused", "states.ask_name.required_context_keys[1]") in codes(data)
    data["global_transitions"][1]["conditions"] = [{"logic": {">": [{"var": "urgency"}, 3]}}]
    assert ("key_unused", "states.ask_name.required_context_keys[1]") not in codes(data)


def test_validate_in_the_terminal_reports_errors_with_their_place(tmp_path):
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    data = json.loads(json.dumps(FORM))
    data["global_transitions"][1]["except_states"] = ["nowhere"]
    path = tmp_path / "bad.json"
    text = json.dumps(data, indent=2)
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path), "--format", "json"])
    assert result.exit_code == 1
    (error,) = json.loads(result.stdout)
    line = text[: text.index('"nowhere"')].count("\n") + 1
    assert (error["path"], error["code"], error["line"]) == (
        "global_transitions[1].except_states[0]",
        "unknown_state",
        line,
    )


# -- the graph and the coverage ---------------------------------------------------------------------


def test_the_graph_draws_each_global_move_once_from_anywhere():
    definition = form()
    mermaid = to_mermaid(definition)
    assert mermaid.count("anywhere -->") == 2 and mermaid.count("--> s5") == 1  # s5: cancelled, once
    assert "anywhere --> s4: The user wants to stop (p5) (not in#58; confirm)" in mermaid
    assert "s3 --> back: The question is answered (p100)" in mermaid
    dot = to_dot(definition)
    assert '"[anywhere]" -> "help" [label="The user asks a question (p100)", style=dashed];' in dot
    assert '"help" -> "[back]"' in dot


def test_coverage_counts_each_global_move_once_and_going_back():
    definition_path = ROOT / "fsm_definitions" / "workshop_signup.json"
    outcome = CaseOutcome(file=definition_path, name="one", definition=definition_path)
    outcome.transitions.update({("ask_name", "help"), ("help", "ask_name"), ("ask_name", "cancelled")})
    (row,) = coverage([outcome])
    assert row.covered_transitions == {("*", "help"), ("help", RETURN), ("*", "cancelled")}
    assert ("*", "human") in row.transitions and len(row.transitions) == 10


def test_snapshot_model_documents_the_way_back():
    assert "came_from" in Snapshot.model_fields


def test_the_served_definition_lists_its_global_transitions():
    from llm_fsm.server.views import definition_view

    view = definition_view(form())
    assert view["global_transitions"] == [
        {"target_state": "cancelled", "except_states": ["confirm"]},
        {"target_state": "help", "except_states": []},
    ]
    assert view["states"]["help"]["transitions"] == [RETURN] and "anywhere -->" in view["mermaid"]


def test_chat_state_shows_the_global_moves_and_where_return_goes(tmp_path):
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    definition = tmp_path / "form.json"
    definition.write_text(json.dumps(FORM))
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([reply("ask_name", "Hi"), reply("help", "It is free")]))
    args = ["chat", str(definition), "--model", f"scripted:{script}"]
    result = CliRunner().invoke(app, args, input="/state\ncost?\n/state\n", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    first, second = result.stdout.split("It is free")
    assert "→ cancelled (from anywhere) (priority 5) The user wants to stop" in first
    assert "→ ask_email (priority 100)" in first
    assert "→ ask_name (priority 100) The question is answered" in second  # "$return": back to ask_name


def test_a_plain_prompt_lists_the_states_own_moves_first_and_a_guided_one_by_priority():
    definition = llm_fsm.load(FORM)
    builder = llm_fsm.turn.prompt.PromptBuilder()
    plain, guided = (builder.definition_part(definition, "ask_name", guided=g) for g in (False, True))
    assert "<valid_states>ask_name, ask_email, cancelled, help</valid_states>" in plain
    assert "<valid_states>ask_name, cancelled, ask_email, help</valid_states>" in guided
