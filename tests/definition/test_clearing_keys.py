"""Taking a value back (llm_fsm.definition.clearing): a state's ``clearable_keys`` (null removes), a transition's
``clear_keys`` (a move removes), and the definition's ``any_value`` ("dontcare": any value will do)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import llm_fsm
from llm_fsm.definition.clearing import RULE
from llm_fsm.definition.loader import DefinitionWarning, inspect, load_text
from llm_fsm.errors import DefinitionError
from llm_fsm.guided.schema import guided_schema
from llm_fsm.store import StoredConversation, open_store
from llm_fsm.testing import ScriptedLLM
from llm_fsm.turn.engine import check_values, decide, initial_snapshot
from llm_fsm.turn.prompt import PromptBuilder
from llm_fsm.turn.requests import state_reply_schemas
from llm_fsm.turn.steps import TurnResult
from tests.conftest import changed_definition, reply
from tests.turn.test_engine import make_reply

ROOT = Path(__file__).resolve().parents[2]

RESTAURANTS: dict[str, Any] = {
    "name": "restaurants",
    "initial_state": "find",
    "any_value": "dontcare",
    "context_schema": {
        "cuisine": {"type": "string", "enum": ["italian", "thai"]},
        "party_size": {"type": "integer", "minimum": 1},
    },
    "global_transitions": [
        {"target_state": "cancelled", "description": "The user gives up", "clear_keys": ["party_size"]}
    ],
    "states": {
        "find": {
            "purpose": "Find a restaurant",
            "required_context_keys": ["city", "cuisine"],
            "clearable_keys": ["cuisine"],
            "transitions": [{"target_state": "book", "conditions": [{"requires_context_keys": ["city", "cuisine"]}]}],
        },
        "book": {
            "purpose": "Book a table",
            "required_context_keys": ["party_size"],
            "writable_keys": ["party_size", "city"],
            "transitions": [
                {
                    "target_state": "find",
                    "description": "The user wants another restaurant",
                    "clear_keys": ["city", "cuisine", "party_size"],
                },
                {"target_state": "done", "conditions": [{"requires_context_keys": ["party_size"]}]},
            ],
        },
        "done": {"purpose": "Say goodbye"},
        "cancelled": {"purpose": "Say goodbye"},
    },
}
FOUND = {"city": "Paris", "cuisine": "thai"}
BOOKING = {**FOUND, "party_size": 2}


def restaurants(**changes: Any) -> llm_fsm.FSMDefinition:
    """The definition, with top-level fields changed (None: removed; ``state_<id>`` changes a state's)."""
    return changed_definition(RESTAURANTS, **changes)


def talk(*replies: dict[str, Any], state: str = "find", context: dict[str, Any] | None = None, **options: Any):
    llm = ScriptedLLM(list(replies))
    context = dict(FOUND if context is None else context)
    return llm_fsm.Conversation(restaurants(), llm, state=state, context=context, **options)


# -- clearable_keys: null removes ------------------------------------------------------------------


@pytest.mark.parametrize("guided", [False, True])
def test_null_removes_a_clearable_key_and_is_reported_and_forgotten(guided: bool) -> None:
    conversation = talk(reply("find", "Any other cuisine in mind?", cuisine=None), guided=guided)
    result = conversation.send("Actually, forget the cuisine")
    assert (result.state, result.rejected) == ("find", ())
    assert result.context_updates == {"cuisine": None}
    assert conversation.context == {"city": "Paris"} and "cuisine" not in conversation.provenance
    assert result.corrections == {}  # a removal is not a correction
    data = result.to_dict()
    assert data["context_updates"] == {"cuisine": None} and TurnResult.from_dict(data).to_dict() == data


def test_asend_removes_like_send() -> None:
    conversation = talk(reply("find", "Which cuisine then?", cuisine=None))
    result = asyncio.run(conversation.asend("no cuisine after all"))
    assert result.context_updates == {"cuisine": None} and "cuisine" not in conversation.context


def test_null_for_a_key_that_is_not_clearable_is_still_dropped() -> None:
    conversation = talk(reply("find", "Paris it is.", city=None))
    result = conversation.send("hmm")
    assert result.context_updates == {} and result.rejected == ()
    assert conversation.context == FOUND and conversation.provenance["city"]["by"] == "user_code"


def test_removing_a_key_the_context_does_not_hold_does_nothing() -> None:
    hooks = llm_fsm.Hooks()
    seen: list[Any] = []
    hooks.on("context_update")(lambda *, update, **_: seen.append(dict(update)))
    conversation = talk(reply("find", "Which cuisine?", cuisine=None), context={"city": "Paris"}, hooks=hooks)
    result = conversation.send("no idea")
    assert result.context_updates == {} and seen == [] and conversation.context == {"city": "Paris"}


def test_the_context_update_handlers_see_a_removal_as_none() -> None:
    hooks = llm_fsm.Hooks()
    seen: list[Any] = []

    @hooks.on("context_update", keys=["cuisine"])
    def noted(*, update: dict[str, Any], context: Any, **_: Any) -> None:
        seen.append((dict(update), "cuisine" in context))

    talk(reply("find", "Which cuisine then?", cuisine=None), hooks=hooks).send("forget the cuisine")
    assert seen == [({"cuisine": None}, False)]


def test_the_moves_are_judged_on_the_context_after_the_removal() -> None:
    definition = restaurants()
    snapshot = initial_snapshot(definition, "find", FOUND)
    decision = decide(definition, snapshot, make_reply("book", cuisine=None))
    assert not decision.accepted and decision.state == "find"
    (refusal,) = decision.rejected
    assert refusal.kind == "condition" and "needs key 'cuisine'" in refusal.reason
    assert decision.context == {"city": "Paris"} and decision.applied == {"cuisine": None}


def test_a_stored_conversation_keeps_the_context_after_the_removal(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'c.db'}")
    definition = restaurants()
    llm = ScriptedLLM([reply("find", "Which city?", city="Paris", cuisine="thai"), reply("find", "OK", cuisine=None)])

    def make(snapshot: Any) -> llm_fsm.Conversation:
        if snapshot is None:
            return llm_fsm.Conversation(definition, llm)
        return llm_fsm.Conversation.restore(snapshot, definition, llm)

    stored = StoredConversation(store, "c", make)
    stored.run(lambda c: c.send("thai in Paris"))
    stored.run(lambda c: c.send("forget the cuisine"))
    again = StoredConversation(store, "c", make).load()
    assert again.context == {"city": "Paris"} and set(again.provenance) == {"city"}
    assert again.snapshot() == stored.conversation.snapshot()


# -- clear_keys: a move removes -------------------------------------------------------------------


@pytest.mark.parametrize("guided", [False, True])
def test_a_move_clears_its_keys_but_keeps_what_the_reply_wrote(guided: bool) -> None:
    conversation = talk(
        reply("find", "Lyon then: which cuisine?", city="Lyon"), state="book", context=BOOKING, guided=guided
    )
    result = conversation.send("Let's look for another place, in Lyon")
    assert result.state == "find"
    assert result.context_updates == {"city": "Lyon", "cuisine": None, "party_size": None}
    assert conversation.context == {"city": "Lyon"}
    assert conversation.provenance["city"]["by"] == "llm" and set(conversation.provenance) == {"city"}


def test_asend_clears_like_send() -> None:
    conversation = talk(reply("find", "Where shall we look?"), state="book", context=BOOKING)
    result = asyncio.run(conversation.asend("another restaurant please"))
    assert result.state == "find" and conversation.context == {}


def test_a_global_move_clears_its_keys() -> None:
    conversation = talk(reply("cancelled", "Bye!"), state="book", context=BOOKING)
    result = conversation.send("forget it")
    assert result.context_updates == {"party_size": None} and conversation.context == FOUND


def test_a_move_that_is_not_made_clears_nothing() -> None:
    # the value is refused, so the move is not made; the retry stays
    conversation = talk(
        reply("find", "Another place then.", party_size="many"),
        reply("book", "How many people?"),
        state="book",
        context=BOOKING,
    )
    result = conversation.send("another place, for many")
    assert result.state == "book" and conversation.context == BOOKING
    assert [r.kind for r in result.rejected] == ["context_value"]


def test_a_turn_that_ends_on_the_fallback_clears_nothing() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["states"]["book"]["checks"] = [{"kind": "max_length", "max": 5}]  # every message is too long
    data["states"]["book"]["max_retries"] = 0
    llm = ScriptedLLM([reply("find", "Another place, then: where?")])
    conversation = llm_fsm.Conversation(llm_fsm.load(data), llm, state="book", context=BOOKING)
    result = conversation.send("another place")
    assert result.fallback and result.state == "book" and conversation.context == BOOKING


# -- any_value -------------------------------------------------------------------------------------


def test_any_value_is_taken_by_every_declared_key_and_counts_as_present() -> None:
    definition = restaurants()
    kept, invalid = check_values(definition, {"cuisine": "dontcare", "party_size": "dontcare", "city": "dontcare"})
    assert invalid == [] and kept == {"cuisine": "dontcare", "party_size": "dontcare", "city": "dontcare"}
    _, (refused,) = check_values(definition, {"cuisine": "french"})
    assert refused.key == "cuisine"
    conversation = talk(
        reply("book", "Any cuisine, then. For how many?", cuisine="dontcare"), context={"city": "Paris"}
    )
    result = conversation.send("no preference")
    assert (result.state, result.rejected, conversation.context["cuisine"]) == ("book", (), "dontcare")


def test_without_any_value_the_word_is_refused_as_before() -> None:
    _, (refused,) = check_values(restaurants(any_value=None), {"cuisine": "dontcare"})
    assert refused.kind == "context_value" and "'dontcare' is not one of" in refused.reason


# -- the schemas -----------------------------------------------------------------------------------


def _answer(target: str, **update: Any) -> dict[str, Any]:
    return {"transition": {"target_state": target, "context_update": update}, "message": "m", "reasoning": "r"}


def _takes(schema: dict[str, Any], instance: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


def test_the_strict_schema_takes_null_and_any_value() -> None:
    _, find = state_reply_schemas(restaurants(), "find")
    assert _takes(find, _answer("find", city="Paris", cuisine=None))
    assert _takes(find, _answer("find", city=None, cuisine="dontcare"))
    assert not _takes(find, _answer("find", city=None, cuisine="french"))
    _, book = state_reply_schemas(restaurants(), "book")
    for size in (3, None, "dontcare"):
        assert _takes(book, _answer("book", party_size=size, city=None))
    assert not _takes(book, _answer("book", party_size="many", city=None))
    _, before = state_reply_schemas(restaurants(any_value=None), "book")
    assert not _takes(before, _answer("book", party_size="dontcare", city=None))
    assert before["properties"]["transition"]["properties"]["context_update"]["properties"]["party_size"] == {
        "type": ["integer", "null"]
    }


def test_the_guided_schema_takes_null_the_held_value_and_any_value() -> None:
    schema = guided_schema(restaurants(), "find", FOUND, said="forget the cuisine")
    for cuisine in (None, "thai", "dontcare"):
        assert _takes(schema, {"transition": _answer("find", city=None, cuisine=cuisine)["transition"], "message": "m"})
    # the move to book reads the cuisine: it cannot remove it
    moving = {"transition": _answer("book", city=None, cuisine=None)["transition"], "message": "m"}
    assert not _takes(schema, moving)
    assert _takes(schema, {"transition": _answer("book", city=None, cuisine="dontcare")["transition"], "message": "m"})


def test_without_the_fields_the_guided_schema_is_as_before() -> None:
    plain = copy.deepcopy(RESTAURANTS)
    plain.pop("any_value")
    plain["states"]["find"].pop("clearable_keys")
    with_defaults = copy.deepcopy(plain)
    with_defaults["any_value"] = None
    with_defaults["states"]["find"]["clearable_keys"] = []
    for said in ("thai please", "forget the cuisine"):
        before = guided_schema(llm_fsm.load(plain), "find", FOUND, said=said)
        assert before == guided_schema(llm_fsm.load(with_defaults), "find", FOUND, said=said)
        assert "dontcare" not in json.dumps(before)


# -- the prompt ------------------------------------------------------------------------------------


def test_the_prompt_says_any_value_once_and_clearing_only_where_a_state_clears() -> None:
    definition = restaurants()
    builder = PromptBuilder()
    find = builder.system_prompt(definition, initial_snapshot(definition, "find", FOUND))
    book = builder.system_prompt(definition, initial_snapshot(definition, "book", BOOKING), guided=True)
    assert find.count("<any_value>") == 1 and '"dontcare"' in find and book.count("<any_value>") == 1
    assert "<information_to_clear>" in find and "<key>cuisine</key>\n</information_to_clear>" in find
    assert "null removes it" in find and "<information_to_clear>" not in book
    bare = restaurants(any_value=None, state_find={"clearable_keys": []})
    text = builder.system_prompt(bare, initial_snapshot(bare, "find", FOUND))
    assert "<any_value>" not in text and "<information_to_clear>" not in text


# -- bad definitions -------------------------------------------------------------------------------


def _problems(data: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    report = load_text(json.dumps(data, indent=2), source="restaurants.json")
    return report.errors, report.warnings


def test_a_clearable_key_must_be_one_the_state_may_write() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["handler_only_keys"] = ["booking_id"]
    data["states"]["find"]["clearable_keys"] = ["cusine", "booking_id", "_extra"]
    errors, _ = _problems(data)
    assert [(e.path, e.code) for e in errors] == [
        ("states.find.clearable_keys[0]", "clearable_key"),
        ("states.find.clearable_keys[1]", "clearable_key"),
        ("states.find.clearable_keys[2]", "clearable_key"),
    ]
    assert all(e.line is not None and e.column is not None for e in errors)
    assert "'cusine' is not a key this state may write" in errors[0].message and errors[0].hint == (
        "did you mean 'cuisine'?"
    )
    assert "'booking_id' is set by code" in errors[1].message
    assert "'_extra' is internal to the runtime" in errors[2].message
    with pytest.raises(DefinitionError, match=r"restaurants.json:\d+:\d+: states.find.clearable_keys\[0\]"):
        raise DefinitionError(errors, source="restaurants.json")


def test_keys_are_named_whole_and_once() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["states"]["find"]["clearable_keys"] = ["cuisine.name"]
    data["states"]["book"]["transitions"][0]["clear_keys"] = ["city", "city"]
    errors, _ = _problems(data)
    messages = {e.path: e.message for e in errors}
    assert "not a context key" in messages["states.find.clearable_keys"]
    assert "'city' is listed twice" in messages["states.book.transitions[0].clear_keys"]


def test_a_clear_key_named_nowhere_else_is_a_warning() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["global_transitions"][0]["clear_keys"] = ["party_sise"]
    errors, warnings = _problems(data)
    assert errors == []
    (warning,) = warnings
    assert (warning.path, warning.code) == ("global_transitions[0].clear_keys[0]", "unknown_clear_key")
    assert warning.hint == "did you mean 'party_size'?" and warning.line is not None


def test_clear_keys_on_a_move_to_its_own_state_is_an_error() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["states"]["find"]["transitions"].append({"target_state": "find", "clear_keys": ["city"]})
    errors, _ = _problems(data)
    (error,) = errors
    assert (error.path, error.code) == ("states.find.transitions[1].clear_keys", "clear_keys_never_apply")


@pytest.mark.parametrize(("value", "words"), [("", "nothing visible"), (" ", "nothing visible"), (3, "a string")])
def test_any_value_is_a_text_with_something_in_it(value: Any, words: str) -> None:
    report = inspect({**RESTAURANTS, "any_value": value})
    (error,) = report.errors
    assert error.path == "any_value" and words in error.message


# -- hashes and docs -------------------------------------------------------------------------------


def test_a_definition_without_the_fields_hashes_as_before() -> None:
    data = {
        "name": "restaurants",
        "initial_state": "find",
        "context_schema": {"cuisine": {"type": "string", "enum": ["italian", "thai"]}},
        "global_transitions": [{"target_state": "cancelled", "description": "The user gives up"}],
        "states": {
            "find": {
                "required_context_keys": ["city", "cuisine"],
                "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["city"]}]}],
            },
            "done": {},
            "cancelled": {},
        },
    }
    before = llm_fsm.load(data)
    # as the runtime hashed it before the fields existed
    assert before.content_hash == "2ee1bc90e6ec50773fead18aaec1154dc0c6ba31a6dc5d1ecaac952dc21e683b"
    assert before.outline["find.transitions"] == "302cef24b26e211f"
    assert before.outline["$definition.global_transitions"] == "7e805b4b2814f9c5"
    assert before.outline["find.structure"] == "a53595c3a46ec0bc"
    assert before.outline["$definition.structure"] == "6520249d0e965f13"
    changed = copy.deepcopy(data)
    changed["states"]["find"]["transitions"][0]["clear_keys"] = ["cuisine"]
    assert llm_fsm.load(changed).changes_since(before.outline) == ["transitions of state 'find' changed"]
    changed = copy.deepcopy(data)
    changed["states"]["find"]["clearable_keys"] = ["cuisine"]
    assert llm_fsm.load(changed).changes_since(before.outline) == ["keys, checks or settings of state 'find' changed"]
    changed = {**data, "any_value": "dontcare"}
    assert llm_fsm.load(changed).changes_since(before.outline) == [
        "top-level fields changed (name, initial state, keys, schemas...)"
    ]


def test_the_guide_states_the_rule() -> None:
    text = " ".join((ROOT / "docs" / "turns.md").read_text().split())
    assert RULE in text, "docs/turns.md does not state the rule in the words of llm_fsm.definition.clearing.RULE"


def test_the_guide_s_example_loads_without_a_problem() -> None:
    text = (ROOT / "docs" / "turns.md").read_text().split("## Taking a value back", 1)[1]
    example = text.split("```json\n", 1)[1].split("```", 1)[0]
    report = load_text(example, source="turns.md")
    assert report.definition is not None and (report.errors, report.warnings) == ([], [])
    assert report.definition.states["find"].clearable_keys == ("cuisine",)


def test_chat_s_status_line_says_what_a_turn_cleared() -> None:
    from llm_fsm.cli.chat import status_line

    result = talk(reply("find", "Which cuisine then?", cuisine=None, city="Lyon")).send("Lyon, any cuisine")
    assert "collected city · cleared cuisine" in status_line(result)


# -- what a stranger's audit found -------------------------------------------------------------------


def test_an_object_of_nulls_for_a_clearable_key_writes_nothing_and_removes_nothing() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["states"]["find"]["writable_keys"] = ["city", "cuisine", "prefs"]
    data["states"]["find"]["clearable_keys"] = ["cuisine", "prefs"]
    llm = ScriptedLLM([reply("find", "Noted.", prefs={"quiet": None})])
    context = {**FOUND, "prefs": {"quiet": True, "view": "sea"}}
    conversation = llm_fsm.Conversation(llm_fsm.load(data), llm, state="find", context=context)
    result = conversation.send("hmm")
    assert conversation.context["prefs"] == {"quiet": True, "view": "sea"} and result.context_updates == {}


def test_a_return_takes_the_way_backs_clear_keys_not_another_move_to_that_state() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["global_transitions"].append(
        {"target_state": "find", "priority": 10, "description": "Start over", "clear_keys": ["city", "cuisine"]}
    )
    data["states"]["find"]["transitions"].append({"target_state": "help", "description": "The user asks for help"})
    data["states"]["help"] = {
        "purpose": "Help",
        "writable_keys": ["cuisine"],
        "transitions": [{"target_state": "$return", "description": "Back", "clear_keys": ["cuisine"]}],
    }
    with pytest.warns(DefinitionWarning, match="clear different keys"):  # start over vs. the way back
        definition = llm_fsm.load(data)
    llm = ScriptedLLM([reply("help", "How can I help?"), reply("$return", "Back to it.")])
    conversation = llm_fsm.Conversation(definition, llm, state="find", context=dict(FOUND))
    conversation.send("help")
    result = conversation.send("ok, back")
    assert result.state == "find" and conversation.context == {"city": "Paris"}  # only the way back's key


def test_moves_to_one_target_that_clear_different_keys_are_a_warning() -> None:
    data = copy.deepcopy(RESTAURANTS)
    data["states"]["book"]["transitions"].append({"target_state": "find", "description": "Change one detail"})
    errors, warnings = _problems(data)
    assert errors == []
    (warning,) = [w for w in warnings if w.code == "clear_keys_ambiguous"]
    assert warning.path == "states.book.transitions[2].clear_keys" and "(states.book.transitions[0])" in warning.message
