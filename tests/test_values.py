"""Issue 12 §1: what code writes into the context is JSON data from the moment it is written."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid

import pytest

import llm_fsm
from llm_fsm.errors import ContextValueError
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply


class Size(enum.Enum):
    LARGE = "large"


@dataclasses.dataclass
class Slot:
    day: datetime.date
    seats: int


WHEN = datetime.datetime(2026, 11, 23, 9, 30, tzinfo=datetime.UTC)
WRITTEN = {
    "when": WHEN,
    "day": datetime.date(2026, 11, 23),
    "price": decimal.Decimal("19.99"),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "size": Size.LARGE,
    "tags": {"b", "a", "c"},
    "pair": (1, 2),
    "slot": Slot(datetime.date(2026, 11, 24), 4),
    "nested": {"at": [WHEN]},
}
STORED = {
    "when": "2026-11-23T09:30:00+00:00",
    "day": "2026-11-23",
    "price": "19.99",
    "id": "12345678-1234-5678-1234-567812345678",
    "size": "large",
    "tags": ["a", "b", "c"],
    "pair": [1, 2],
    "slot": {"day": "2026-11-24", "seats": 4},
    "nested": {"at": ["2026-11-23T09:30:00+00:00"]},
}


def test_a_handler_writing_python_values_stores_them_by_the_documented_rules(signup, tmp_path):
    hooks = llm_fsm.Hooks()
    seen = {}

    @hooks.on("before_llm_call")
    def stamp(**_):
        return WRITTEN

    @hooks.on("after_reply")
    def look(*, context, **_):
        seen.update(context)  # later handlers already see the stored form

    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Your name?")]), hooks=hooks)
    conv.start()
    assert {k: conv.context[k] for k in STORED} == STORED == {k: seen[k] for k in STORED}
    for url in ("memory:", f"file://{tmp_path}/files", f"sqlite://{tmp_path}/c.db"):
        store = open_store(url)
        store.save("c1", conv.snapshot())
        assert store.load("c1").snapshot == conv.snapshot(), f"{url}: a round trip changes nothing"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (object(), "'bad' is a object, which is not JSON data"),
        (b"raw", "'bad' is a bytes"),
        (float("nan"), "'bad' is nan"),
        (float("inf"), "'bad' is inf"),
        ({1: "x"}, "has the key 1; object keys must be text"),
        ({"deep": [{"x": object()}]}, r"'bad.deep\[0\].x' is a object"),
    ],
    ids=["object", "bytes", "nan", "inf", "int-key", "nested"],
)
def test_a_value_that_is_not_json_data_is_refused_when_written(signup, value, why):
    hooks = llm_fsm.Hooks()
    hooks.on("before_llm_call", name="stamp")(lambda **_: {"bad": value})
    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Your name?")]), hooks=hooks)
    before = conv.snapshot()
    with pytest.raises(llm_fsm.HandlerError, match=why) as caught:
        conv.start()
    assert isinstance(caught.value.cause, ContextValueError) and caught.value.cause.key.startswith("bad")
    assert "handler 'stamp'" in str(caught.value) and conv.snapshot() == before


def test_a_cycle_is_refused_not_recursed_into(signup):
    loop: list = []
    loop.append(loop)
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]))
    with pytest.raises(ContextValueError, match="refers to itself"):
        conv.update_context({"loop": loop})


def test_update_context_initial_context_and_resume_results_follow_the_same_rules(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]), context={"price": decimal.Decimal("5.50")})
    assert conv.context == {"price": "5.50"}
    conv.update_context({"when": WHEN})
    assert conv.context["when"] == STORED["when"]
    with pytest.raises(ContextValueError, match="update_context: 'x' is a object"):
        conv.update_context({"x": object()})
    assert "x" not in conv.context
    with pytest.raises(ContextValueError, match="initial context"):
        llm_fsm.Conversation(signup, ScriptedLLM([]), context={"x": {1, object()}})


def test_a_resume_result_is_stored_as_json_data(signup):
    hooks = llm_fsm.Hooks()

    @hooks.on("before_llm_call")
    def hold(**_):
        raise llm_fsm.Break("approval")

    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", "Your name?")]), hooks=hooks)
    token = conv.start().pending.token
    hooks.handlers.clear()
    with pytest.raises(ContextValueError, match="resume result: 'by' is a object"):
        conv.resume(token, {"by": object()})
    assert conv.paused, "a refused result changes nothing: the token still works"
    conv.resume(token, {"approved_at": WHEN})
    assert conv.context["approved_at"] == STORED["when"]


# -- found by a new user's audit -------------------------------------------------------------------


def test_top_level_keys_must_be_text_too(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]))
    with pytest.raises(ContextValueError, match="the key 1 is not text"):
        conv.update_context({1: "x"})
    assert conv.context == {}


def test_int_and_str_enums_and_subclasses_are_stored_as_plain_values(signup):
    class Level(enum.IntEnum):
        HIGH = 3

    class Colour(str, enum.Enum):  # noqa: UP042 (the mixin form is what people write, and what must work)
        RED = "red"

    class Count(int):
        pass

    conv = llm_fsm.Conversation(signup, ScriptedLLM([]))
    conv.update_context({"level": Level.HIGH, "colour": Colour.RED, "count": Count(2), "flag": True})
    stored = conv.context
    assert stored == {"level": 3, "colour": "red", "count": 2, "flag": True}
    assert [type(stored[k]) for k in ("level", "colour", "count", "flag")] == [int, str, int, bool]


def test_lone_surrogates_from_users_models_and_code_become_replacement_characters(signup, tmp_path):
    bad = json.loads('"4 people \\ud83d"')  # what a web request can carry
    llm = ScriptedLLM(['{"transition": {"target_state": "ask_email", "context_update": {"name": "Ann \\udc00"}}, '
                       '"message": "Hi \\ud83d"}'])  # fmt: skip
    conv = llm_fsm.Conversation(signup, llm)
    conv.update_context({"note": bad})
    result = conv.send(bad)
    assert (
        result.message == "Hi \ufffd"
        and conv.context["name"] == "Ann \ufffd"
        and conv.context["note"].endswith("\ufffd")
    )
    store = open_store(f"sqlite://{tmp_path}/c.db")
    store.save("c", conv.snapshot())
    assert store.load("c").snapshot == conv.snapshot()


def test_nan_and_infinity_from_the_model_are_a_format_rejection(signup):
    nan = '{"transition": {"target_state": "ask_email", "context_update": {"name": NaN}}, "message": "Hi"}'
    huge = (
        '{"transition": {"target_state": "ask_email", "context_update": {"_extra": {"rate": 1e999}}}, "message": "Hi"}'
    )
    result = llm_fsm.Conversation(signup, ScriptedLLM([nan, huge])).send("hi")
    assert [r.kind for r in result.rejected] == ["format", "format"] and result.state == "ask_name"
    assert "NaN, which is not a JSON number" in result.rejected[0].reason
    assert "1e999, a number too large to keep" in result.rejected[1].reason


def test_a_break_payload_is_json_data_when_the_pause_is_taken(signup):
    hooks = llm_fsm.Hooks()
    payload = {"amount": decimal.Decimal("40.00"), "when": WHEN}
    hooks.on("before_llm_call")(lambda **_: (_ for _ in ()).throw(llm_fsm.Break("approve", payload)))
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]), hooks=hooks)
    conv.start()
    assert conv.pending.payload == {"amount": "40.00", "when": STORED["when"]}
    bad = llm_fsm.Hooks()
    bad.on("before_llm_call")(lambda **_: (_ for _ in ()).throw(llm_fsm.Break("approve", {"x": object()})))
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]), hooks=bad)
    with pytest.raises(ContextValueError, match="Break payload"):
        conv.start()
    assert conv.snapshot().turns == 0 and not conv.paused


def test_a_resume_result_that_is_not_an_object_is_refused_clearly(signup):
    hooks = llm_fsm.Hooks()
    hooks.on("before_llm_call")(lambda **_: (_ for _ in ()).throw(llm_fsm.Break("approve")))
    conv = llm_fsm.Conversation(signup, ScriptedLLM([]), hooks=hooks)
    token = conv.start().pending.token
    for bad in ([1, 2], "yes"):
        with pytest.raises(llm_fsm.ResumeError, match="an object of context keys, not a"):
            conv.resume(token, bad)
    assert conv.paused
