"""Issue 12 §1: what code writes into the context is JSON data from the moment it is written."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
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
