"""The SGD benchmark (benchmarks/sgd): its definitions, its scoring, and what a perfect model can say through the
runtime. The data is SGD's dev split in ../shared/sgd, beside the checkout."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from benchmarks.sgd import convert, data, run
from benchmarks.sgd.oracle import Oracle, gold_reply
from benchmarks.sgd.score import score_turn, token_sort_ratio
from llm_fsm.authoring.analysis import analyze
from llm_fsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.skipif(not data.DATA.is_dir(), reason="SGD's dev split is not beside the checkout")


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return data.load_schemas()


@pytest.fixture(scope="module")
def dialogues() -> list[data.Dialogue]:
    return data.load_dialogues()


def test_the_committed_definitions_are_the_converters_and_pass_validate_strict(schemas: dict[str, Any]) -> None:
    files = sorted(convert.OUT.glob("*.json"))
    assert [f.stem for f in files] == sorted(schemas)
    for path in files:
        assert json.loads(path.read_text()) == convert.definition(schemas[path.stem]), path.name
        found = analyze(path, strict=True)
        assert not found, [str(d) for d in found]


def test_a_service_becomes_a_state_per_intent_with_its_required_slots_and_categorical_enums(
    schemas: dict[str, Any],
) -> None:
    made = convert.definition(schemas["Restaurants_2"])
    assert set(made["states"]) == {"start", "find_restaurants", "reserve_restaurant", "done"}
    reserve = made["states"]["reserve_restaurant"]
    assert reserve["required_context_keys"] == ["restaurant_name", "location", "time"]
    assert "number_of_seats (if not given: 2)" in reserve["instructions"]
    assert made["context_schema"]["price_range"]["enum"] == ["cheap", "moderate", "pricey", "ultra high-end"]
    assert "enum" not in made["context_schema"]["category"]
    assert "phone_number" not in made["context_schema"]  # a result of the service: no user gives it
    assert made["any_value"] == "dontcare"
    assert {m["target_state"] for m in made["states"]["find_restaurants"]["transitions"]} == {
        "reserve_restaurant",
        "done",
    }


def test_the_fuzzy_rule_is_fuzzywuzzys_token_sort_ratio() -> None:
    # fuzzywuzzy.fuzz.token_sort_ratio gives 100, 30, 29 and 0 for these (its pure-Python path: difflib)
    assert token_sort_ratio("San Jose", "jose, san") == 1.0
    assert token_sort_ratio("6th of this month", "6th") == 0.3
    assert token_sort_ratio("half past 11 in the morning", "11:30 am") == 0.29
    assert token_sort_ratio("", "x") == 0.0


def test_a_turn_is_scored_as_sgd_scores_it(schemas: dict[str, Any]) -> None:
    service = schemas["Restaurants_2"]
    gold = {"location": ["San Jose"], "price_range": ["cheap"], "time": ["11:30 am", "half past 11"]}
    right = score_turn(
        service, gold, {"location": "san jose", "price_range": "cheap", "time": "half past 11"}, "A", "A"
    )
    assert (right.joint, right.average, right.intent) == (1.0, 1.0, True)
    # a categorical value must be the annotation's; a free one scores its fuzzy ratio; an extra slot zeroes the turn
    off = score_turn(service, gold, {"location": "San Jose", "price_range": "Cheap", "time": "11:30"}, "A", "B")
    assert off.joint == 0.0 and off.wrong == ("time", "price_range") and not off.intent
    extra = score_turn(service, gold, {**dict.fromkeys(gold, "x"), "category": "Thai"}, "A", "A")
    assert extra.invented == ("category",) and extra.joint == 0.0
    partial = score_turn(service, {"time": ["6th of this month"]}, {"time": "6th"}, "A", "A")
    assert partial.joint == pytest.approx(0.3) and partial.average == pytest.approx(0.3)
    assert score_turn(service, {}, {}, "NONE", "NONE").average is None


def test_the_gold_reply_keeps_what_holds_and_clears_what_the_annotation_dropped() -> None:
    slots = {"time": ["7 pm", "19:00"], "number_of_seats": ["3"]}
    turn = data.Turn("Book it for 3", "Done.", "ReserveRestaurant", slots)
    made = gold_reply(
        turn, {"time": "19:00", "category": "Thai"}, "find_restaurants", ["time", "category", "date", "number_of_seats"]
    )
    assert made["transition"] == {
        "target_state": "reserve_restaurant",
        "context_update": {"time": "19:00", "category": None, "date": None, "number_of_seats": "3"},
    }


def test_the_oracle_scores_every_turn_of_the_dev_subset(schemas: dict[str, Any], dialogues: list[Any]) -> None:
    """A perfect model is not stood in the way of: dontcare for a categorical slot, a switch of intent with the next
    intent's slots, SGD's own system turns recorded over the bot's."""
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the definitions load without a warning
        for dialogue in data.subset(dialogues):
            records += run.play(dialogue, schemas[dialogue.service], Oracle(), teacher_forced=True)
    figures = run.summary(records)
    assert figures["joint_goal_accuracy"] == 1.0 and figures["active_intent_accuracy"] == 1.0
    assert figures["refused_turns"] == 0 and figures["calls_per_turn"] == 1.0
    assert figures["admitted"] == 1.0  # the plain strict schema admits every annotated reply


def test_the_oracle_says_any_value_for_a_categorical_slot(schemas: dict[str, Any], dialogues: list[Any]) -> None:
    def any_value(dialogue: data.Dialogue) -> bool:
        categorical = {s["name"] for s in schemas[dialogue.service]["slots"] if s["is_categorical"]}
        return any(t.slots.get(k) == ["dontcare"] for t in dialogue.turns for k in categorical)

    dialogue = next(d for d in dialogues if any_value(d))
    records = run.play(dialogue, schemas[dialogue.service], Oracle(), teacher_forced=True)
    assert [r.joint for r in records] == [1.0] * len(records) and not any(r.rejected for r in records)


def test_teacher_forced_puts_sgds_system_turn_in_the_history_in_place_of_the_bots(
    schemas: dict[str, Any], dialogues: list[Any]
) -> None:
    dialogue = data.subset(dialogues)[0]
    first, second = dialogue.turns[0], dialogue.turns[1]
    for forced in (True, False):
        llm = ScriptedLLM([reply("start", "OUR OWN WORDS"), reply("start", "again")])
        run.play(data.Dialogue(dialogue.id, dialogue.service, (first, second)), schemas[dialogue.service], llm,
                 teacher_forced=forced)  # fmt: skip
        prompt = json.dumps(llm.requests[1].messages)
        assert (first.system in prompt) is forced and ("OUR OWN WORDS" in prompt) is not forced


def test_a_turn_whose_model_call_failed_records_no_system_turn(schemas: dict[str, Any], dialogues: list[Any]) -> None:
    from llm_fsm.errors import LLMUnavailableError

    dialogue = next(d for d in data.subset(dialogues) if len(d.turns) >= 3)
    first, second, third = dialogue.turns[:3]
    llm = ScriptedLLM([reply("start", "one"), LLMUnavailableError("down", model="x"), reply("start", "three")])
    played = data.Dialogue(dialogue.id, dialogue.service, (first, second, third))
    records = run.play(played, schemas[dialogue.service], llm, teacher_forced=True)
    assert records[1].error and records[1].error.startswith("LLMUnavailableError")
    prompt = json.dumps(llm.requests[-1].messages)
    assert first.system in prompt and second.system not in prompt  # the first user turn keeps its own answer
