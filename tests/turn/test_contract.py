from __future__ import annotations

import json

import pytest

from llm_fsm.contract import Reply, _candidates, _depth, _object_end, parse_reply, partial_reply, reply_object
from llm_fsm.definition.reply_schema import reply_schema, writable_keys
from llm_fsm.errors import ReplyFormatError, ReplyTruncated
from tests.conftest import reply

VALID = reply("ask_email", "Thanks! Your email?", name="Ann")
TEXT = json.dumps(VALID)


@pytest.mark.parametrize(
    "raw",
    [
        TEXT,
        f"```json\n{TEXT}\n```",
        f"```\n{TEXT}\n```",
        f"Sure! Here is my answer:\n{TEXT}\nHope that helps.",
        f"<think>The user gave a name {{not json}}, so...</think>\n{TEXT}",
        f"<thinking>hmm</thinking>{TEXT}",
        TEXT.replace('"message"', "'message'"),  # single quotes: repaired
        TEXT[:-1] + ",}",  # trailing comma: repaired
        f"Sure, {{guests}} here: {TEXT}",  # a brace in the prose first: the object is the one that opens like JSON
    ],
)
def test_tolerant_extraction(raw):
    parsed = parse_reply(raw)
    assert parsed.transition.target_state == "ask_email"
    assert parsed.transition.context_update == {"name": "Ann"}
    assert parsed.message.startswith("Thanks! Your email?")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "empty"),
        ("I cannot answer that.", "not a JSON object"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"transition": {"target_state": "x"}}', "message"),
        ('{"transition": {"target_state": 5}, "message": "hi"}', "target_state"),
        ('{"transition": "x", "message": "hi"}', "transition"),
        ('{"message": ""}', "message"),
    ],
)
def test_unusable_replies_say_what_is_wrong(raw, why):
    with pytest.raises(ReplyFormatError, match=why):
        parse_reply(raw)


CUT = json.dumps(reply("ask_guests", "Great, how many guests will join you?", date="Friday"))


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (TEXT[:-2], "in the middle of a string"),  # json-repair would close it: the end would be invented
        (CUT[: CUT.index("how many g") + len("how many g")], "in the middle of a string"),
        (CUT[: CUT.index(', "message"')], "left open"),
        (CUT[:-1], "left open"),  # only the last brace is missing
        (f"```json\n{CUT[:40]}", "in the middle of a string"),  # a fenced block cut off before its fence
        (f"I set {{guests}} to 4.\n{CUT[:-30]}", "in the middle of a string"),  # a brace in the prose first
        (CUT.replace('"', "'")[:-25].replace("how many", "how} many"), "in the middle of a string"),  # single quotes
    ],
)
def test_a_reply_that_stops_short_is_refused_never_completed(raw, where):
    with pytest.raises(ReplyTruncated, match=where):
        parse_reply(raw)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"target_state": "ask_guests", "context_update": {"date": "Friday"}, "message": "Great, how many guests?"}',
         'inside a "transition" object'),
        ('{"transition": null, "message": "Great, how many guests?"}', '"transition" is null'),
        ('{"message": "Great, how many guests?"}', 'no "transition"'),
        ('{"transition": {"target_state": "a"}, "context_update": {"x": 1}, "message": "m"}',
         "context_update belongs inside"),
        ('{"transition": {"target_state": "a", "message": "m"}, "message": "m"}', '"message" belongs at the top'),
    ],
)  # fmt: skip
def test_a_reply_of_another_shape_is_refused_never_taken_for_a_stay(raw, why):
    with pytest.raises(ReplyFormatError, match=why) as caught:
        parse_reply(raw)
    assert "target_state" in str(caught.value), "the correction shows the shape to use"


def test_a_null_update_means_empty():
    parsed = parse_reply('{"transition": {"target_state": "a", "context_update": null}, "message": "m"}')
    assert parsed.transition.context_update == {}


def test_reply_schema_enumerates_allowed_targets(signup):
    state = signup.states["ask_email"]
    schema = reply_schema(state, strict=True)
    transition = schema["properties"]["transition"]["properties"]
    assert transition["target_state"]["enum"] == ["ask_email", "ask_name", "done"]
    update = transition["context_update"]
    assert update["additionalProperties"] is False and update["required"] == ["email", "approved"]
    assert reply_schema(state, strict=False)["properties"]["transition"]["properties"]["context_update"] == {
        "type": "object"
    }
    assert writable_keys(state) == ["email", "approved"]
    assert writable_keys(state, signup.handler_only_keys) == ["email"]
    protected = reply_schema(state, strict=True, protected=signup.handler_only_keys)
    assert protected["properties"]["transition"]["properties"]["context_update"]["required"] == ["email"]


def test_only_leading_thinking_is_stripped():
    inner = json.dumps(reply("ask_name", "<think>this is my text</think> and <thinking>more"))
    assert parse_reply(f"<think>plan {{x}}</think>\n<thinking>again</thinking>{inner}").message.startswith(
        "<think>this"
    )
    with pytest.raises(ReplyFormatError, match="empty"):
        parse_reply("<think>still thinking when the reply was cut off")


def test_deeply_nested_replies_are_refused_not_recursed_into():
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    with pytest.raises(ReplyFormatError):
        parse_reply('{"transition": {"target_state": "x", "context_update": {"d": ' + deep + '}}, "message": "m"}')
    nested = '{"a": ' * 40 + "1" + "}" * 40
    with pytest.raises(ReplyFormatError, match="more than 32 levels"):
        parse_reply('{"transition": {"target_state": "x", "context_update": {"d": ' + nested + '}}, "message": "m"}')


def test_explicit_writable_keys_are_what_the_strict_schema_and_the_prompt_offer():
    import llm_fsm
    from llm_fsm.turn.engine import initial_snapshot
    from llm_fsm.turn.prompt import PromptBuilder
    from llm_fsm.turn.requests import state_reply_schemas
    from tests.conftest import SIGNUP

    data = json.loads(json.dumps(SIGNUP))
    data["states"]["ask_name"]["writable_keys"] = ["name", "cancel", "_extra"]
    definition = llm_fsm.load(data)
    _, strict = state_reply_schemas(definition, "ask_name")
    update = strict["properties"]["transition"]["properties"]["context_update"]
    assert "cancel" in json.dumps(update)
    prompt = PromptBuilder().system_prompt(definition, initial_snapshot(definition))
    assert "cancel" in prompt


# Exact outcomes that planted bugs changed (survivors of mutation testing: benchmarks/mutation.py contract).

SHAPE = (
    'answer with {"transition": {"target_state": "<state>", "context_update": {...}}, "message": "..."}'
    " (to stay, give the current state as target_state)"
)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("   ", "the reply was empty; answer with one JSON object"),
        ("no json here", "the reply is not a JSON object; answer with exactly one JSON object"),
        (
            '{"target_state": "a", "context_update": {}, "message": "m"}',
            f'target_state, context_update belong inside a "transition" object, not at the top level: {SHAPE}',
        ),
        (
            '{"transition": {"target_state": "a"}, "message": "m", "tool_calls": []}',
            f'a reply either asks for tools ({{"tool_calls": [...]}} alone) or answers, not both: {SHAPE}',
        ),
        (
            '{"transition": {"target_state": "a"}, "message": "hi", "n": 1e999}',
            "the reply holds 1e999, a number too large to keep: write a smaller one or null",
        ),
        (
            '{"transition": {"target_state": "a"}, "message": "hi", "n": NaN}',
            "the reply holds NaN, which is not a JSON number: write a number or null",
        ),
        (
            "{'transition': {'target_state': 'a', 'context_update': {'n': 1e999}}, 'message': 'm'}",
            "the reply holds inf, which is not a JSON number: write a number or null",
        ),
        (
            '{"transition": {"target_state": "a"}, "message": 5}',
            "the reply does not follow the format: message: input should be a valid string",
        ),
        (
            '{"transition": {"target_state": 3}}',
            "the reply does not follow the format: transition.target_state: input should be a valid string; "
            "message: field required",
        ),
    ],
)
def test_each_refusal_says_exactly_what_is_wrong(raw, message):
    with pytest.raises(ReplyFormatError) as info:
        parse_reply(raw)
    assert str(info.value) == message


def test_a_memory_update_at_the_top_level_is_refused_saying_where_it_belongs():
    with pytest.raises(ReplyFormatError) as info:
        parse_reply('{"transition": {"target_state": "a"}, "memory_update": {}, "message": "m"}')
    assert str(info.value).startswith('memory_update belongs inside "transition", not at the top level: ')


def test_numbers_lists_and_text_come_through_whichever_way_the_reply_was_read():
    strict = parse_reply(
        '{"transition": {"target_state": "a", "context_update": {"x": 1.5, "l": [1, "b"]}}, "message": "hi"}'
    )
    assert strict.transition.context_update == {"x": 1.5, "l": [1, "b"]}
    repaired = parse_reply('{transition: {target_state: "a", context_update: {x: 1.5, l: [1, "b"]}}, message: "hi",}')
    assert repaired.transition.context_update == {"x": 1.5, "l": [1, "b"]}
    escaped = parse_reply('{"transition": {"target_state": "a"}, "message": "x\\ud800y"}')
    assert escaped.message.isprintable() and "\ud800" not in escaped.message and escaped.message[0] == "x"
    direct = parse_reply('{"transition": {"target_state": "a"}, "message": "x\ud800y"}')
    assert "\ud800" not in direct.message and direct.message == escaped.message
    assert reply_object('{"transition": {"target_state": "a"}, "message": "m"}') == {
        "transition": {"target_state": "a"},
        "message": "m",
    }


def test_exact_json_wins_over_a_cut_off_object_after_it():
    reply_ = parse_reply('{"transition": {"target_state": "a"}, "message": "m"} and then {"')
    assert (reply_.transition.target_state, reply_.message) == ("a", "m")


def test_the_nesting_limit_is_exactly_32_levels():
    def nested(levels):  # the reply itself, its transition and its context_update are three levels
        inner = '{"a": ' * (levels - 3) + "[1]" + "}" * (levels - 3)
        return '{"transition": {"target_state": "x", "context_update": {"d": ' + inner + '}}, "message": "m"}'

    assert parse_reply(nested(31)).transition.target_state == "x"
    with pytest.raises(ReplyFormatError, match="^the reply nests objects or lists more than 32 levels deep$"):
        parse_reply(nested(32))
    assert _depth({}) == 1 and _depth([[1], {"a": [2]}]) == 3


def test_a_partial_reply_is_checked_like_a_whole_one():
    partial = partial_reply({"transition": {"target_state": "a", "context_update": {"x": [1]}}})
    assert partial == Reply.model_validate(
        {"transition": {"target_state": "a", "context_update": {"x": [1]}}, "message": "-"}
    )
    assert partial_reply({"transition": {"target_state": "a"}, "target_state": "b"}) is None
    assert partial_reply({"transition": {"target_state": "a", "context_update": {"n": float("nan")}}}) is None
    deep: object = 1
    for _ in range(30):  # with the reply, its transition and its context_update: 33 levels
        deep = [deep]
    assert partial_reply({"transition": {"target_state": "a", "context_update": {"d": deep}}}) is None
    assert partial_reply({"transition": {"target_state": "a", "context_update": {"d": deep[0]}}}) is not None


def test_objects_are_followed_to_their_end_through_strings_and_escapes():
    assert _object_end('ab{"a": "x\\"}"}z', 2) == (15, None)
    assert _object_end('{"a": [1, {"b": "}"}]}END', 0) == (22, None)
    assert _object_end('{"": 1}', 0) == (7, None)
    assert _object_end("{'a': 'it\\'s'}", 0) == (14, None)
    assert _object_end('{"a": X}', 0) == (8, None)
    assert _object_end('{"a": "b', 0) == (8, "in the middle of a string")
    assert _object_end('{"a": [1', 0) == (8, "with an object or list left open")
    assert _candidates('{"a": 1} y') == ['{"a": 1} y', '{"a": 1}', '{"a": 1} y']
    assert _candidates('a {"a": {"b": 1}} x } y') == [
        '{"a": {"b": 1}} x } y',
        '{"a": {"b": 1}} x }',
        'a {"a": {"b": 1}} x } y',
    ]
    assert _candidates("```json\n{}\n```") == ["{}", "{}\n```", "{}", "```json\n{}\n```"]


def test_writable_keys_leave_out_internal_and_protected_keys_and_read_the_moves_given():
    import llm_fsm

    definition = llm_fsm.load(
        {
            "name": "w",
            "initial_state": "a",
            "states": {
                "a": {
                    "purpose": "p",
                    "required_context_keys": ["name", "_secret"],
                    "transitions": [
                        {
                            "target_state": "b",
                            "conditions": [{"logic": {"==": [{"var": "user.email"}, "x"]}}],
                        }
                    ],
                },
                "b": {
                    "purpose": "q",
                    "writable_keys": ["name", "_x", "gate"],
                    "transitions": [
                        {"target_state": "a", "conditions": [{"requires_context_keys": ["code"]}]},
                        {"target_state": "c"},
                    ],
                },
                "c": {"purpose": "end"},
            },
        }
    )
    a, b = definition.states["a"], definition.states["b"]
    assert writable_keys(a) == ["name", "user"]
    assert writable_keys(a, moves=b.transitions) == ["name", "code"]
    assert writable_keys(b, {"gate"}) == ["name"]
    assert writable_keys(b) == ["name", "gate"]


def test_the_reply_schemas_are_exact():
    import llm_fsm
    from llm_fsm.turn.requests import state_reply_schemas

    definition = llm_fsm.load(
        {
            "name": "s",
            "initial_state": "a",
            "handler_only_keys": ["gate"],
            "global_transitions": [{"target_state": "help", "conditions": [{"requires_context_keys": ["topic"]}]}],
            "states": {
                "a": {
                    "purpose": "p",
                    "required_context_keys": ["name", "gate"],
                    "transitions": [{"target_state": "b"}],
                },
                "b": {"purpose": "q", "transitions": [{"target_state": "$return"}, {"target_state": "done"}]},
                "help": {"purpose": "h", "transitions": [{"target_state": "$return"}]},
                "done": {"purpose": "bye"},
            },
        }
    )

    def schema(targets, update):
        return {
            "type": "object",
            "properties": {
                "transition": {
                    "type": "object",
                    "properties": {
                        "context_update": update,
                        "target_state": {"type": "string", "enum": targets},
                    },
                    "required": ["context_update", "target_state"],
                    "additionalProperties": False,
                },
                "message": {"type": "string"},
                "reasoning": {"type": "string"},
            },
            "required": ["transition", "message", "reasoning"],
            "additionalProperties": False,
        }

    scalar = {"type": ["string", "number", "boolean", "null"]}
    closed = {
        "type": "object",
        "properties": {"name": scalar, "topic": scalar},
        "required": ["name", "topic"],
        "additionalProperties": False,
    }
    assert state_reply_schemas(definition, "a") == (
        schema(["a", "b", "help"], {"type": "object"}),
        schema(["a", "b", "help"], closed),
    )
    own = {"type": "object", "properties": {"name": scalar, "gate": scalar}, "required": ["name", "gate"]}
    own["additionalProperties"] = False
    assert reply_schema(definition.states["a"], strict=True) == schema(["a", "b"], own)
    assert state_reply_schemas(definition, "b")[0] == schema(["b", "done", "help"], {"type": "object"})
    assert state_reply_schemas(definition, "b", "a")[0] == schema(["a", "b", "done", "help"], {"type": "object"})
    assert state_reply_schemas(definition, "b")[0] == schema(["b", "done", "help"], {"type": "object"})
    keys = {"type": "object", "properties": {"k": scalar}, "required": ["k"], "additionalProperties": False}
    assert reply_schema(definition.states["a"], strict=True, keys=["k"]) == schema(["a", "b"], keys)
    # a grammar writes properties in order: what the model learned before the move it names
    assert list(state_reply_schemas(definition, "a")[1]["properties"]["transition"]["properties"]) == [
        "context_update",
        "target_state",
    ]


def test_a_strict_schema_holds_each_value_to_its_declared_or_compared_type():
    import llm_fsm
    from llm_fsm.turn.requests import state_reply_schemas

    definition = llm_fsm.load(
        {
            "name": "s",
            "initial_state": "a",
            "context_schema": {
                "confirmed": {"type": "boolean"},
                "plan": {"type": "string", "enum": ["basic", "pro"], "maxLength": 5},
                "email": {"type": "string", "pattern": "^[^@]+@[^@]+$", "maxLength": 254},
                "notes": {"type": "object"},
            },
            "states": {
                "a": {
                    "purpose": "p",
                    "required_context_keys": ["confirmed", "plan", "email", "age", "severity", "notes", "free"],
                    "transitions": [
                        {"target_state": "b", "conditions": [{"logic": {">=": [{"var": "age"}, 18]}}]},
                        {"target_state": "b", "conditions": [{"logic": {"==": [{"var": "severity"}, "high"]}}]},
                        {"target_state": "b", "conditions": [{"logic": {"==": [{"var": "severity"}, "low"]}}]},
                    ],
                },
                "b": {"purpose": "q"},
            },
        }
    )
    values = state_reply_schemas(definition, "a")[1]["properties"]["transition"]["properties"]["context_update"]
    assert values["properties"] == {
        "confirmed": {"type": ["boolean", "null"]},
        "plan": {"type": ["string", "null"], "enum": ["basic", "pro", None]},
        # only what every provider's strict mode takes: no pattern, no length
        "email": {"type": ["string", "null"]},
        "age": {"type": ["number", "null"]},
        # only ever compared with these constants, but declared nowhere: any text (guided replies offer the set)
        "severity": {"type": ["string", "null"]},
        "notes": {"type": ["string", "number", "boolean", "null"]},
        "free": {"type": ["string", "number", "boolean", "null"]},
    }


def test_reply_schemas_offer_the_keys_of_a_way_back_and_are_kept_per_way_back():
    import llm_fsm
    from llm_fsm.turn.requests import state_reply_schemas

    definition = llm_fsm.load(
        {
            "name": "r",
            "initial_state": "a",
            "states": {
                "a": {"purpose": "p", "transitions": [{"target_state": "b"}, {"target_state": "c"}]},
                "b": {
                    "purpose": "q",
                    "transitions": [
                        {"target_state": "$return", "conditions": [{"requires_context_keys": ["answer"]}]},
                        {"target_state": "done"},
                    ],
                },
                "c": {"purpose": "r", "transitions": [{"target_state": "b"}]},
                "done": {"purpose": "bye"},
            },
        }
    )
    loose, strict = state_reply_schemas(definition, "b")
    assert strict["properties"]["transition"]["properties"]["context_update"]["required"] == ["answer"]
    assert loose["properties"]["transition"]["properties"]["context_update"] == {"type": "object"}

    def targets(back_to):
        schema = state_reply_schemas(definition, "b", back_to)[0]
        return schema["properties"]["transition"]["properties"]["target_state"]["enum"]

    assert (targets("a"), targets("c"), targets(None)) == (["a", "b", "done"], ["b", "c", "done"], ["b", "done"])
