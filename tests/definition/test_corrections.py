"""Corrections (issue 27 §4): a person changing at a read-back what they said earlier ("make it Friday")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import llm_fsm
from llm_fsm.definition.corrections import RULE
from llm_fsm.definition.loader import load_text
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.errors import DefinitionError
from llm_fsm.guided.schema import guided_schema
from llm_fsm.testing import ScriptedLLM
from llm_fsm.turn.engine import decide, initial_snapshot
from llm_fsm.turn.prompt import PromptBuilder
from llm_fsm.turn.requests import state_reply_schemas
from llm_fsm.turn.steps import TurnResult
from tests.conftest import changed_definition, reply
from tests.turn.test_engine import make_reply

ROOT = Path(__file__).resolve().parents[2]
DENTIST = ROOT / "tests" / "data" / "corrections" / "dentist.json"
BOOKED = {"service": "cleaning", "preferred_day": "Tuesday", "time": "10:00"}


def dentist(**changes: Any) -> llm_fsm.FSMDefinition:
    """The dentist definition, with top-level fields changed (``state_<id>`` changes a state's)."""
    return changed_definition(json.loads(DENTIST.read_text()), **changes)


def at_read_back(definition: llm_fsm.FSMDefinition, *replies: dict[str, Any], **context: Any) -> llm_fsm.Conversation:
    return llm_fsm.Conversation(definition, ScriptedLLM(list(replies)), state="read_back", context=context or BOOKED)


def test_a_correction_at_the_read_back_is_taken_in_the_same_turn_and_reported():
    conversation = at_read_back(
        dentist(), reply("booked", "Friday at 10 for a cleaning: booked!", preferred_day="Friday", confirmed=True)
    )
    result = conversation.send("Make it Friday, and yes, book it")
    assert (result.state, result.llm_calls, result.rejected) == ("booked", 1, ())
    assert result.corrections == {"preferred_day": {"from": "Tuesday", "to": "Friday"}}
    assert conversation.context["preferred_day"] == "Friday"
    assert conversation.provenance["preferred_day"]["by"] == "llm"
    data = result.to_dict()
    assert data["corrections"] == {"preferred_day": {"from": "Tuesday", "to": "Friday"}}
    assert TurnResult.from_dict(data).to_dict() == data


def test_without_corrections_the_read_back_refuses_the_write_as_before():
    conversation = at_read_back(
        dentist(corrections=None), reply("read_back", "Tuesday at 10, right?", preferred_day="Friday")
    )
    result = conversation.send("Make it Friday")
    (refusal,) = result.rejected
    assert refusal.reason == "context key 'preferred_day' is not writable in this state (writable: confirmed)"
    assert conversation.context["preferred_day"] == "Tuesday"
    assert result.corrections == {} and "corrections" not in result.to_dict()


def test_a_correction_that_breaks_a_move_keeps_the_state():
    # the move to booked reads the corrected day: judged on the corrected context, it no longer holds
    conversation = at_read_back(
        dentist(),
        reply("booked", "Booked for Saturday!", preferred_day="Saturday", confirmed=True),
        reply("read_back", "We are closed on Saturdays: which weekday suits you?", preferred_day="Saturday"),
    )
    result = conversation.send("Make it Saturday, book it")
    assert result.state == "read_back" and result.llm_calls == 2  # the usual corrective call
    (refusal,) = result.rejected
    assert refusal.kind == "condition" and "condition 'a weekday' does not hold" in refusal.reason
    assert result.corrections == {"preferred_day": {"from": "Tuesday", "to": "Saturday"}}
    assert result.message.startswith("We are closed")


def test_a_correction_that_breaks_a_move_is_refused_by_the_engine_itself():
    definition = dentist()
    snapshot = initial_snapshot(definition, "read_back", BOOKED)
    decision = decide(definition, snapshot, make_reply("booked", preferred_day="Sunday", confirmed=True))
    assert not decision.accepted and decision.state == "read_back"
    assert decision.context["preferred_day"] == "Sunday"
    held = decide(definition, snapshot, make_reply("booked", preferred_day="Monday", confirmed=True))
    assert held.accepted and held.state == "booked"


def test_named_keys_only_are_correctable_and_true_means_every_collected_key():
    named = dentist(corrections=["preferred_day"])
    conversation = at_read_back(
        named, reply("read_back", "Tuesday at 11, right?", time="11:00", preferred_day="Friday")
    )
    result = conversation.send("Friday at 11 instead")
    assert [r.key for r in result.rejected] == ["time"]
    assert result.corrections == {"preferred_day": {"from": "Tuesday", "to": "Friday"}}
    every = dentist(corrections=True)
    assert every.correctable_keys("read_back") == ("service", "preferred_day", "time", "confirmed")
    conversation = at_read_back(every, reply("read_back", "A check-up at 11, right?", time="11:00", service="check-up"))
    result = conversation.send("A check-up at 11 instead")
    assert result.rejected == ()
    assert result.corrections == {
        "service": {"from": "cleaning", "to": "check-up"},
        "time": {"from": "10:00", "to": "11:00"},
    }


def test_a_state_overrides_the_definition_and_false_turns_corrections_off():
    definition = dentist(state_read_back={"corrections": False})
    assert definition.correctable_keys("read_back") == () and definition.correctable_keys("ask_day")
    definition = dentist(corrections=None, state_read_back={"corrections": ["time"]})
    assert definition.correctable_keys("read_back") == ("time",) and definition.correctable_keys("ask_day") == ()


def test_a_key_never_collected_is_not_correctable():
    # a correction never writes a new key: in ask_service, preferred_day is not collected yet
    conversation = llm_fsm.Conversation(
        dentist(corrections=True),
        ScriptedLLM([reply("ask_day", "A cleaning: which day?", service="cleaning", preferred_day="Friday")]),
    )
    result = conversation.send("A cleaning, on Friday")
    (refusal,) = result.rejected
    assert refusal.key == "preferred_day" and refusal.kind == "context_key"
    assert refusal.reason.endswith("; it may be corrected once collected, and it has not been")
    assert "preferred_day" not in conversation.context and result.corrections == {}


def test_rewriting_the_same_value_is_no_correction():
    conversation = at_read_back(dentist(), reply("booked", "Booked!", preferred_day="Tuesday", confirmed=True))
    result = conversation.send("Yes, Tuesday")
    assert result.state == "booked" and result.corrections == {}


def test_context_update_handlers_are_told_the_corrections():
    hooks = llm_fsm.Hooks()
    seen: list[dict[str, Any]] = []

    @hooks.on("context_update")
    def note(*, corrections: dict[str, Any], **_: Any) -> None:
        seen.append(corrections)

    conversation = llm_fsm.Conversation(
        dentist(),
        ScriptedLLM([reply("read_back", "Tuesday at 11, right?", time="11:00")]),
        state="read_back",
        context=BOOKED,
        hooks=hooks,
    )
    conversation.send("At 11 please")
    assert seen == [{"time": {"from": "10:00", "to": "11:00"}}]


def test_the_reply_schemas_admit_the_correctable_keys():
    definition = dentist()
    _, strict = state_reply_schemas(definition, "read_back")
    keys = strict["properties"]["transition"]["properties"]["context_update"]["properties"]
    assert list(keys) == ["confirmed", "preferred_day", "time"]
    corrected = {
        "target_state": "read_back",
        "context_update": {"confirmed": None, "preferred_day": "Friday", "time": None},
    }
    jsonschema.validate({"transition": corrected, "message": "m", "reasoning": "r"}, strict)
    # the day names are only read from a condition (no context_schema declares them): a plain reply may write
    # another day, which the condition then refuses (a guided one is held to them)
    corrected["context_update"] = {**corrected["context_update"], "preferred_day": "Saturday"}
    jsonschema.validate({"transition": corrected, "message": "m", "reasoning": "r"}, strict)
    # unchanged without corrections
    _, old = state_reply_schemas(dentist(corrections=None), "read_back")
    assert list(old["properties"]["transition"]["properties"]["context_update"]["properties"]) == ["confirmed"]


def test_the_guided_schema_admits_the_correctable_keys_once_collected():
    definition = dentist()
    schema = guided_schema(definition, "read_back", BOOKED)
    branches = schema["properties"]["transition"]["anyOf"]
    assert all(
        set(b["properties"]["context_update"]["properties"]) == {"confirmed", "preferred_day", "time"} for b in branches
    )
    sent = {
        "transition": {
            "context_update": {"confirmed": True, "preferred_day": "Friday", "time": None},
            "target_state": "booked",
        },
        "message": "m",
    }
    jsonschema.validate(sent, schema)
    fresh = guided_schema(definition, "read_back", {"service": "cleaning"})  # nothing collected to correct
    keys = [set(b["properties"]["context_update"]["properties"]) for b in fresh["properties"]["transition"]["anyOf"]]
    assert all(k == {"confirmed"} for k in keys)


def _offered(schema: dict[str, Any], key: str) -> list[Any]:
    """The values of ``key`` that ``schema``'s branches offer, null aside, in order, once each."""
    transition = schema["properties"]["transition"]
    found: list[Any] = []
    for branch in transition.get("anyOf", [transition]):
        value = branch["properties"]["context_update"]["properties"][key]
        for part in value.get("anyOf", [value]):
            found += [v for v in part.get("enum", [part["const"]] if "const" in part else []) if v not in found]
    return found


def test_a_guided_correction_offers_the_collected_text_beside_the_words():
    # any span of "yep, that's all correct" fits free text: offered only spans, a small model wrote one over
    # the collected value ("customer_name": "thats"); the collected value is on offer first
    definition = dentist(corrections=True)
    kept = guided_schema(definition, "read_back", BOOKED, said="yep, that's all correct")
    assert _offered(kept, "service")[0] == "cleaning" and "all correct" in _offered(kept, "service")
    changed = guided_schema(definition, "read_back", BOOKED, said="it's for a check-up actually")
    assert {"cleaning", "a check-up"} <= set(_offered(changed, "service"))  # a real correction is still there
    # a shaped value is not given its old value: the words decide it ("10:00" only if said)
    clock = dentist(corrections=True, context_schema={"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}})
    assert _offered(guided_schema(clock, "read_back", BOOKED, said="make it 11:30"), "time") == ["11:30", "23:30"]
    # a key the state collects itself is the state's question: what the words say, not the value it replaces
    asking = guided_schema(definition, "ask_service", {"service": "cleaning"}, said="a check-up please")
    assert "cleaning" not in _offered(asking, "service")


def test_a_guided_read_back_offers_the_collected_text_it_may_rewrite_without_corrections():
    # a read-back (a state that only asks yes or no) may write the collected keys its moves read: the same
    # overwrite ("address": "thats right"), with or without `corrections`
    read_back = {**json.loads(DENTIST.read_text())["states"]["read_back"], "writable_keys": None}
    read_back["transitions"][0]["conditions"].append({"description": "a service", "requires_context_keys": ["service"]})
    definition = dentist(corrections=None, state_read_back=read_back)
    assert definition.states["read_back"].writable_keys is None
    offered = _offered(guided_schema(definition, "read_back", BOOKED, said="yep thats right"), "service")
    assert offered[0] == "cleaning" and "yep thats right" in offered


def test_a_guided_correction_that_names_a_value_leaves_the_others_as_collected():
    # "oops, income is actually 52,000" at a read-back: a 135M model wrote 52000 as the loan amount and the monthly
    # debts too; a correction that names the value it corrects leaves the others as they were
    definition = dentist(corrections=True)
    named = guided_schema(definition, "read_back", BOOKED, said="the service should be a check-up actually")
    assert {"cleaning", "a check-up"} <= set(_offered(named, "service"))
    assert _offered(named, "time") == ["10:00"]
    unnamed = guided_schema(definition, "read_back", BOOKED, said="it should be a check-up actually")
    assert "a check-up" in _offered(unnamed, "time")  # naming none, any of them may be the one corrected


def test_a_state_with_its_own_questions_corrects_collected_text_only_where_the_words_name_it():
    # with corrections on, "roughly 12k miles" at the mileage question wrote "roughly" over the driver's name
    definition = dentist(corrections=True)
    answer = guided_schema(definition, "ask_day", {"service": "cleaning"}, said="tuesday at ten works for me")
    assert _offered(answer, "service") == ["cleaning"]
    named = guided_schema(definition, "ask_day", {"service": "cleaning"}, said="tuesday, and the service is a check-up")
    assert "a check-up" in _offered(named, "service")


def test_the_prompt_names_the_keys_to_correct_only_where_corrections_are_allowed():
    prompt = PromptBuilder()
    part = prompt.definition_part(dentist(), "read_back")
    assert "<information_to_correct>" in part and "<key>preferred_day</key>\n<key>time</key>" in part
    # ask_day collects both itself: nothing more to say
    assert "<information_to_correct>" not in prompt.definition_part(dentist(), "ask_day")
    assert "<information_to_correct>" not in prompt.definition_part(dentist(corrections=None), "read_back")


def test_the_writable_keys_of_a_state_are_unchanged_by_corrections():
    # the static view (authoring checks, validate) stays the state's own keys: corrections come with the context
    assert model_writable_keys(dentist(), "read_back") == model_writable_keys(dentist(corrections=None), "read_back")


def test_a_definition_without_corrections_keeps_its_hash():
    # the field is left out of the hashes while it holds its default: stored conversations still restore
    plain, off = dentist(corrections=None), dentist(corrections=False)
    assert plain.content_hash == off.content_hash and plain.outline == off.outline
    assert dentist().content_hash != plain.content_hash


@pytest.mark.parametrize(
    ("corrections", "where", "message", "hint"),
    [
        (
            ["preferred_day", "tme"],
            "corrections[1]",
            "'tme' cannot be corrected: it is not collected by any state",
            "did you mean 'time'?",
        ),
        (["_extra"], "corrections[0]", "'_extra' cannot be corrected: it is internal to the runtime", None),
    ],
)
def test_named_keys_must_be_keys_a_state_collects(corrections, where, message, hint):
    text = DENTIST.read_text().replace(
        '"corrections": ["preferred_day", "time"]', f'"corrections": {json.dumps(corrections)}'
    )
    report = load_text(text, source="dentist.json")
    (problem,) = report.errors
    assert (problem.path, problem.code, problem.line) == (where, "correction_key", 5)
    assert problem.message.startswith(message) and problem.column is not None
    if hint:
        assert problem.hint == hint


def test_a_handler_only_key_cannot_be_named_nor_is_it_ever_correctable():
    with pytest.raises(DefinitionError, match="'service' cannot be corrected: it is set by code"):
        dentist(handler_only_keys=["service"], corrections=["service"])
    assert "service" not in dentist(handler_only_keys=["service"], corrections=True).correctable_keys("read_back")


def test_corrections_is_true_false_or_a_list_of_keys():
    with pytest.raises(DefinitionError, match="corrections: expected true or false or a list of strings"):
        dentist(corrections="yes")


def test_the_guides_state_the_one_rule():
    # docs/authoring.md and docs/turns.md (README's "How a turn works") say what the model may write in the
    # words of llm_fsm.definition.corrections.RULE, which the engine applies
    for page in ("docs/authoring.md", "docs/turns.md"):
        text = " ".join((ROOT / page).read_text().split())
        assert RULE in text, f"{page} does not state the rule in the words of llm_fsm.definition.corrections.RULE"


def test_run_and_serve_mask_a_secret_correction_like_the_context():
    from llm_fsm.secrets import mask
    from llm_fsm.server.views import result_view

    definition = llm_fsm.load(
        {
            "name": "pins",
            "initial_state": "ask",
            "corrections": True,
            "states": {
                "ask": {"required_context_keys": ["pin_code"], "transitions": [{"target_state": "done"}]},
                "done": {},
            },
        }
    )
    conversation = llm_fsm.Conversation(
        definition, ScriptedLLM([reply("ask", "Noted", pin_code="9999")]), context={"pin_code": "1234"}
    )
    result = conversation.send("Actually it is 9999")
    assert result.corrections == {"pin_code": {"from": "1234", "to": "9999"}}
    assert result_view(result, mask)["corrections"] == {"pin_code": "[masked]"}


def test_run_prints_the_corrections_of_a_turn(tmp_path):
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    script = [
        reply("ask_service", "Hello! What is the appointment for?"),
        reply("ask_day", "A cleaning: which day and time?", service="cleaning"),
        reply("read_back", "Tuesday at 10 for a cleaning, right?", preferred_day="Tuesday", time="10:00"),
        reply("read_back", "Friday at 10 for a cleaning, right?", preferred_day="Friday"),
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    (tmp_path / "inputs.txt").write_text("A cleaning\nTuesday at 10\nMake it Friday\n")
    args = ["run", str(DENTIST), "--model", f"scripted:{tmp_path / 'script.json'}", "--input"]
    result = CliRunner().invoke(app, [*args, str(tmp_path / "inputs.txt")])
    assert result.exit_code == 0, result.output
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t.get("corrections") for t in turns] == [
        None,
        None,
        None,
        {"preferred_day": {"from": "Tuesday", "to": "Friday"}},
    ]


def test_a_plain_request_asks_for_a_correctable_key_only_once_it_is_collected():
    def asked(context: dict[str, Any]) -> list[str]:
        llm = ScriptedLLM([reply("read_back", "Tuesday at 10, right?")])
        llm_fsm.Conversation(dentist(), llm, state="read_back", context=context).send("hm")
        update = llm.requests[-1].strict_schema["properties"]["transition"]["properties"]["context_update"]
        assert update["required"] == list(update["properties"])
        return list(update["properties"])

    assert asked(BOOKED) == ["confirmed", "preferred_day", "time"]
    # the engine would refuse a day written before one is collected: the schema does not ask for it
    assert asked({"service": "cleaning", "time": "10:00"}) == ["confirmed", "time"]
