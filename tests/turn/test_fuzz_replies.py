"""Properties that hold for ANY model reply (hypothesis).

Whatever the model answers (random text, random JSON, mutations of valid replies with wrong types,
missing fields, unknown targets, huge strings, deep nesting):
- the state stays one of the definition's states;
- a state change only follows a declared transition whose conditions hold;
- the model never writes internal ``_`` keys nor keys only code may set;
- a successful turn adds exactly one exchange to the history;
- a failed turn changes nothing, and the only exceptions are the library's own.

The normal test run uses a modest number of examples; ``tests/stress/fuzz_replies.py`` runs 100,000+.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llm_fsm
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.testing import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = llm_fsm.load(ROOT / "fsm_definitions" / "order_flow.json")
STATES = sorted(DEFINITION.states)
KEYS = sorted({k for s in DEFINITION.states.values() for k in s.required_context_keys} | {"payment_authorized"})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
targets = st.sampled_from([*STATES, "nowhere", "_internal", "", "ORDER_PLACED", "order placed"]) | st.text(max_size=12)
keys = st.sampled_from([*KEYS, "_approved", "_state", "_extra", "payment_authorized", "note"]) | st.text(max_size=10)


@st.composite
def valid_shaped(draw: st.DrawFn) -> dict[str, Any]:
    update = draw(st.dictionaries(keys, json_values, max_size=6))
    return {
        "transition": {"target_state": draw(targets), "context_update": update},
        "message": draw(st.text(min_size=1)),
    }


@st.composite
def mutated(draw: st.DrawFn) -> str:
    reply = draw(valid_shaped())
    kind = draw(st.sampled_from(["wrong_type", "missing", "extra", "huge", "deep", "fenced", "prose", "truncated"]))
    if kind == "wrong_type":
        field = draw(st.sampled_from(["transition", "target_state", "context_update", "message"]))
        value = draw(json_values)
        if field in ("transition", "message"):
            reply[field] = value
        else:
            reply["transition"][field] = value
    elif kind == "missing":
        reply.pop(draw(st.sampled_from(["transition", "message"])), None)
    elif kind == "extra":
        reply[draw(st.text(max_size=8))] = draw(json_values)
    elif kind == "huge":
        reply["message"] = "x" * draw(st.integers(10_000, 60_000))
        reply["transition"]["context_update"]["note"] = "y" * 20_000
    elif kind == "deep":
        depth = draw(st.integers(33, 1_500))
        nested = '{"a": ' * depth + "1" + "}" * depth
        text = json.dumps(reply)
        return text.replace('"context_update": {', f'"context_update": {{"deep": {nested}, ', 1)
    text = json.dumps(reply)
    if kind == "fenced":
        return f"```json\n{text}\n```"
    if kind == "prose":
        return f"Sure thing! {text} Let me know."
    if kind == "truncated":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    return text


any_reply = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    valid_shaped().map(json.dumps),
    mutated(),
)


def check_turns(replies: list[str], start: str, context: dict[str, Any]) -> None:
    """Run one turn per pair of replies and check every property after each."""
    conversation = llm_fsm.Conversation(DEFINITION, ScriptedLLM(replies), state=start, context=context)
    for turn in range(len(replies) // 2 + 1):
        before = conversation.snapshot()
        try:
            if turn % 2:  # every other turn goes through the streaming path and its partial parser
                *events, result = conversation.stream("hello")
                check_events(events, result)
            else:
                result = conversation.send("hello")
        except llm_fsm.FSMError:
            assert conversation.snapshot() == before, "a failed turn changes nothing"
            continue
        after = conversation.snapshot()
        assert after.state in DEFINITION.states and result.state == after.state
        if after.state != before.state:
            declared = [t for t in DEFINITION.states[before.state].transitions if t.target_state == after.state]
            assert any(unmet_condition(t, after.context) is None for t in declared), "only a declared, valid move"
        written = {k for k in after.context if k not in before.context or after.context[k] != before.context[k]}
        assert not any(k.startswith("_") and k != "_extra" for k in written), "no internal key written"
        assert after.context.get("payment_authorized") == before.context.get("payment_authorized"), "no gate key"
        assert len(after.history) == len(before.history) + 1, "exactly one exchange per turn"
        if after.status == "ended":
            break


def check_events(events: list[Any], result: llm_fsm.TurnResult) -> None:
    """The text after the last reset is the final message; a reply accepted at once is never withdrawn."""
    resets = [i for i, e in enumerate(events) if isinstance(e, MessageReset)]
    shown = "".join(e.text for e in events[resets[-1] + 1 if resets else 0 :] if isinstance(e, MessageDelta))
    assert shown == result.message, "the text events add up to the message"
    if result.llm_calls == 1 and not result.rejected:
        assert not resets, "the preview and the turn decide on the same context"


starts = st.sampled_from(sorted(s for s in STATES if not DEFINITION.states[s].terminal))
contexts = st.fixed_dictionaries({}, optional={k: st.text(max_size=10) | st.integers() for k in KEYS[:6]})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(replies=st.lists(any_reply, min_size=1, max_size=6), start=starts, context=contexts)
def test_any_reply_keeps_the_invariants(replies, start, context):
    check_turns(replies, start, context)


def test_the_strategies_produce_each_kind_of_reply():
    """A guard against a strategy silently producing nothing but one shape."""
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutated())
    def collect(text: str) -> None:
        if text.startswith("```"):
            seen.add("fenced")
        elif text.startswith("Sure thing"):
            seen.add("prose")
        elif '"deep": {"a": {"a"' in text:
            seen.add("deep")
        elif len(text) > 10_000:
            seen.add("huge")

    collect()
    assert seen == {"fenced", "prose", "deep", "huge"}
