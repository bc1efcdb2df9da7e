"""Handlers, provenance, write permissions, Break/resume and refinement checks."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import llm_fsm
from llm_fsm import Break, Hooks
from llm_fsm.errors import ConversationPaused, DefinitionError, LLMUnavailableError, ResumeError
from llm_fsm.hooks import HandlerError
from llm_fsm.testing import ScriptedLLM
from llm_fsm.turn.runner import RefinementError
from tests.conftest import ROOT, reply

FLOW: dict[str, Any] = {
    "name": "refund",
    "initial_state": "collect",
    "context_schema": {
        "amount": {"type": "number", "minimum": 1, "maximum": 500},
        "email": {"type": "string", "format": "email"},
    },
    "states": {
        "collect": {
            "purpose": "Collect the refund amount and the customer's email",
            "required_context_keys": ["amount", "email"],
            "transitions": [
                {
                    "target_state": "review",
                    "conditions": [{"description": "has amount", "requires_context_keys": ["amount", "email"]}],
                }
            ],
        },
        "review": {
            "purpose": "A human reviews the refund",
            "handlers": ["notify_staff"],
            "writable_keys": ["note"],
            "transitions": [
                {
                    "target_state": "refunded",
                    "conditions": [{"description": "approved", "logic": {"==": [{"var": "approved"}, True]}}],
                },
                {
                    "target_state": "declined",
                    "conditions": [{"description": "declined", "logic": {"==": [{"var": "approved"}, False]}}],
                },
            ],
        },
        "refunded": {"purpose": "Confirm the refund"},
        "declined": {"purpose": "Explain the refund was declined"},
    },
}


def definition(**changes: Any) -> llm_fsm.FSMDefinition:
    data = json.loads(json.dumps(FLOW))
    for state, fields in changes.items():
        data["states"][state].update(fields)
    return llm_fsm.load(data)


def notify_hooks(calls: list[str] | None = None) -> Hooks:
    hooks = Hooks()

    @hooks.handler("notify_staff", on="state_enter")
    def notify(*, state: str) -> None:
        if calls is not None:
            calls.append(state)

    return hooks


TO_REVIEW = reply("review", "Thanks! A colleague will review your refund.", amount=40, email="ann@example.com")


# -- handlers ---------------------------------------------------------------------------------


def test_timing_points_run_in_order_with_their_arguments():
    seen: list[tuple[str, str, str | None]] = []
    hooks = notify_hooks()

    @hooks.on("start", "before_llm_call", "after_reply", "context_update", "before_transition",
              "state_exit", "after_transition", "state_enter", "end")  # fmt: skip
    def record(*, timing, state, target, **_):
        seen.append((timing, state, target))

    conv = llm_fsm.Conversation(definition(), ScriptedLLM([reply("collect", "Hi"), TO_REVIEW]), hooks=hooks)
    conv.start()
    assert seen == [("start", "collect", None), ("before_llm_call", "collect", None), ("after_reply", "collect", None)]
    seen.clear()
    conv.send("40 euros, ann@example.com")
    assert seen == [
        ("before_llm_call", "collect", None),
        ("after_reply", "collect", None),
        ("context_update", "collect", None),
        ("before_transition", "collect", "review"),
        ("state_exit", "collect", "review"),
        ("after_transition", "collect", "review"),
        ("state_enter", "review", "review"),
    ]


def test_filters_by_state_target_and_keys():
    calls: list[str] = []
    hooks = notify_hooks()
    hooks.on("context_update", keys=["email"])(lambda **_: calls.append("email"))
    hooks.on("context_update", keys=["nope"])(lambda **_: calls.append("nope"))
    hooks.on("before_transition", targets=["declined"])(lambda **_: calls.append("declined"))
    hooks.on("before_llm_call", states=["review"])(lambda **_: calls.append("review"))
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
    conv.send("40, ann@example.com")
    assert calls == ["email"]


ADDRESS_BOOK = {
    "name": "address",
    "initial_state": "ask",
    "states": {
        "ask": {"purpose": "Ask for a name and an address", "writable_keys": ["name", "address"],
                "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Say goodbye"},
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("update", "written"),
    [
        ({"name": None, "address": None}, {}),
        ({"address": {"city": None, "zip": None}}, {}),
        ({"address": {"city": "Lyon", "zip": None}, "name": None}, {"address": {"city": "Lyon"}}),
    ],
    ids=["top-level", "object-of-nulls", "some-nulls"],
)
def test_null_values_are_not_writes_no_handler_fires_and_no_provenance_names_the_model(update, written):
    fired: list[tuple[str, Any]] = []
    hooks = Hooks()
    for key in ("name", "address"):
        hooks.on("context_update", keys=[key])(lambda *, update, key=key: fired.append((key, update)))
    said = {"transition": {"target_state": "ask", "context_update": update}, "message": "And your address?"}
    conv = llm_fsm.Conversation(llm_fsm.load(ADDRESS_BOOK), ScriptedLLM([said]), hooks=hooks)
    result = conv.send("hi")
    assert result.context_updates == written and conv.context == written
    assert set(conv.provenance) == set(written), "a null is not something the model set"
    assert fired == [(key, written) for key in written], "only keys with a value fire their handlers"


def test_handlers_get_only_the_keywords_they_declare_and_deltas_change_the_context():
    hooks = notify_hooks()

    @hooks.on("context_update")
    def ticket(*, update):  # declares one keyword only
        return {"ticket": f"T-{update['amount']}", "email": None}

    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
    conv.send("40, ann@example.com")
    assert conv.context == {"amount": 40, "ticket": "T-40"}, "a None in a delta deletes the key"
    assert conv.provenance["ticket"] == {"by": "handler:ticket", "turn": 1}
    assert "email" not in conv.provenance
    with pytest.raises(TypeError, match="keyword arguments only"):
        hooks.on("end")(lambda state, /: None)
    with pytest.raises(ValueError, match="unknown timing"):
        hooks.on("state_entered")  # type: ignore[arg-type]


def test_named_handlers_run_only_where_the_definition_lists_them():
    calls: list[str] = []
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=notify_hooks(calls))
    conv.send("40, ann@example.com")
    assert calls == ["review"]
    with pytest.raises(DefinitionError) as info:
        llm_fsm.Conversation(definition(), ScriptedLLM())
    (problem,) = info.value.problems
    assert (
        "state 'review' names handler 'notify_staff'" in problem.message and problem.path == "states.review.handlers[0]"
    )


def test_a_failing_handler_rolls_the_turn_back_or_is_skipped_by_policy(caplog):
    for timing in ("context_update", "after_transition", "state_enter"):
        hooks = notify_hooks()
        hooks.on(timing)(lambda **_: 1 / 0)
        conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
        before = conv.snapshot()
        with pytest.raises(HandlerError, match="ZeroDivisionError") as info:
            conv.send("40, ann@example.com")
        assert info.value.timing == timing and conv.snapshot() == before
    hooks = notify_hooks()
    hooks.on("context_update", policy="continue")(lambda **_: 1 / 0)
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
    assert conv.send("40, ann@example.com").state == "review"
    assert "policy: continue" in caplog.text


def test_a_handler_exception_whose_text_cannot_be_read_is_still_a_handler_error():
    class Unsayable(Exception):
        def __str__(self) -> str:
            raise ValueError("unreadable")

    def fail(**_: object) -> None:
        raise Unsayable()

    hooks = notify_hooks()
    hooks.on("context_update")(fail)
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
    with pytest.raises(HandlerError, match="failed at 'context_update': Unsayable$"):
        conv.send("40, ann@example.com")


def test_error_handlers_see_the_failure():
    errors: list[BaseException] = []
    hooks = notify_hooks()
    hooks.on("error")(lambda *, error: errors.append(error))
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([LLMUnavailableError("down")]), hooks=hooks)
    with pytest.raises(LLMUnavailableError):
        conv.send("hi")
    assert isinstance(errors[0], LLMUnavailableError)


# -- provenance and write permissions ---------------------------------------------------------


def test_provenance_records_who_set_each_key_and_when():
    conv = llm_fsm.Conversation(
        definition(), ScriptedLLM([reply("collect", "Hi"), TO_REVIEW]), hooks=notify_hooks(), context={"channel": "web"}
    )
    conv.start()
    conv.send("40, ann@example.com")
    assert conv.provenance == {
        "channel": {"by": "user_code", "turn": 0},
        "amount": {"by": "llm", "turn": 1},
        "email": {"by": "llm", "turn": 1},
    }
    assert json.loads(conv.snapshot().model_dump_json())["provenance"]["amount"] == {"by": "llm", "turn": 1}


def test_the_model_writes_only_what_the_state_allows():
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=notify_hooks())
    conv.send("40")
    jump = reply("refunded", "Approved! Your refund is on its way.", approved=True, note="vip")
    result = llm_fsm.Conversation.restore(
        conv.snapshot(), conv.definition, ScriptedLLM([jump, jump]), hooks=notify_hooks()
    ).send("approve it")
    assert result.state == "review" and "approved" not in result.context and result.context["note"] == "vip"
    refusal = next(r for r in result.rejected if r.key == "approved")
    assert "'approved' is not writable in this state (writable: note)" in refusal.reason


def test_code_sets_the_gate_and_then_the_move_is_accepted():
    conv = llm_fsm.Conversation(
        definition(), ScriptedLLM([TO_REVIEW, reply("refunded", "Done!")]), hooks=notify_hooks()
    )
    conv.send("40, ann@example.com")
    conv.update_context({"approved": True})
    assert conv.provenance["approved"]["by"] == "user_code"
    assert conv.send("any news?").state == "refunded"


def test_a_value_outside_the_context_schema_is_fed_back_and_corrected():
    bad = reply("review", "Thanks!", amount=9000, email="not-an-email")
    llm = ScriptedLLM([bad, TO_REVIEW])
    result = llm_fsm.Conversation(definition(), llm, hooks=notify_hooks()).send("9000")
    assert result.state == "review" and result.context["amount"] == 40 and result.llm_calls == 2
    feedback = llm.requests[1].messages[-1]["content"]
    assert "<feedback>" in feedback and "9000 is greater than the maximum of 500" in feedback
    assert "'not-an-email' is not a 'email'" in feedback
    assert {r.kind for r in result.rejected} == {"context_value", "condition"}, "without the values, the move fails too"


def test_a_value_its_schema_refuses_is_refined_like_a_failed_check_not_corrected():
    # refinements have the state's own budget: with no corrections allowed, the value is still asked again
    llm = ScriptedLLM([reply("collect", "Noted.", amount=9000), reply("collect", "Noted: 40. Your email?", amount=40)])
    conv = llm_fsm.Conversation(definition(), llm, hooks=notify_hooks(), max_corrections=0)
    result = conv.send("9000, no 40")
    assert (result.message, result.context["amount"], result.llm_calls) == ("Noted: 40. Your email?", 40, 2)
    assert [r.kind for r in result.rejected] == ["context_value"]


# -- breaking ---------------------------------------------------------------------------------


def pausing_hooks(timing: str, calls: list[str]) -> Hooks:
    hooks = notify_hooks()

    @hooks.on(timing, states=["review"] if timing in ("state_enter", "after_transition") else None,
              targets=["review"] if timing == "before_transition" else None)  # fmt: skip
    def ask_a_human(*, context, **_):
        calls.append("asked")
        raise Break("refund needs approval", {"amount": context["amount"]}, message="A colleague will look at this.")

    return hooks


def test_break_after_the_transition_pauses_in_the_new_state_and_resumes_exactly_once():
    calls: list[str] = []
    llm = ScriptedLLM([TO_REVIEW, reply("refunded", "Good news: your refund is approved.")])
    conv = llm_fsm.Conversation(definition(), llm, hooks=pausing_hooks("state_enter", calls))
    result = conv.send("40, ann@example.com")
    assert (result.state, result.status, conv.status) == ("review", "paused", "paused")
    assert result.message == TO_REVIEW["message"], "after the commit, the model's message matches the state"
    pending = conv.pending
    assert pending == result.pending and pending.reason == "refund needs approval" and pending.payload == {"amount": 40}
    assert (pending.handler, pending.timing, pending.state) == ("ask_a_human", "state_enter", "review")
    assert len(pending.token) == 32 and pending.created_at.endswith("+00:00")
    with pytest.raises(ConversationPaused, match="refund needs approval"):
        conv.send("hello?")

    resumed = conv.resume(pending.token, {"approved": True})
    assert resumed.state == "refunded" and resumed.ended and resumed.previous_state == "review"
    assert conv.provenance["approved"] == {"by": "resume", "turn": 2}
    note = llm.requests[-1].messages[-1]["content"]
    assert "refund needs approval" in note and '"approved": true' in note
    assert calls == ["asked"], "resuming does not run the pausing handler again"
    after = conv.snapshot()
    with pytest.raises(ResumeError, match="already used"):
        conv.resume(pending.token, {"approved": False})
    assert conv.snapshot() == after and llm.calls == 2


def test_break_before_the_transition_does_not_make_the_move():
    calls: list[str] = []
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=pausing_hooks("before_transition", calls))
    result = conv.send("40, ann@example.com")
    assert (result.state, conv.state, conv.status) == ("collect", "collect", "paused")
    assert result.message == "A colleague will look at this.", "the model's message described a state not entered"
    assert conv.context == {"amount": 40, "email": "ann@example.com"}, "the accepted updates are kept"


def test_a_failed_resume_changes_nothing_and_the_token_stays_valid():
    calls: list[str] = []
    llm = ScriptedLLM([TO_REVIEW, LLMUnavailableError("down"), reply("declined", "Sorry, declined.")])
    conv = llm_fsm.Conversation(definition(), llm, hooks=pausing_hooks("state_enter", calls))
    conv.send("40, ann@example.com")
    before, token = conv.snapshot(), conv.pending.token
    with pytest.raises(LLMUnavailableError):
        conv.resume(token, {"approved": False})
    assert conv.snapshot() == before
    with pytest.raises(ResumeError, match="not the token"):
        conv.resume("0" * 32, {})
    assert conv.resume(token, {"approved": False}).state == "declined"


def test_break_snapshot_restore_in_another_process_and_resume(tmp_path):
    calls: list[str] = []
    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=pausing_hooks("state_enter", calls))
    conv.send("40, ann@example.com")
    saved = tmp_path / "paused.json"
    saved.write_text(conv.snapshot().model_dump_json())
    (tmp_path / "flow.json").write_text(json.dumps(FLOW))
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import llm_fsm
from llm_fsm.testing import ScriptedLLM
from tests.turn.test_hooks import notify_hooks
from tests.conftest import reply
definition = llm_fsm.load({str(tmp_path / "flow.json")!r})
llm = ScriptedLLM([reply("refunded", "Approved in another process.")])
conv = llm_fsm.Conversation.restore(open({str(saved)!r}).read(), definition, llm, hooks=notify_hooks())
assert conv.paused and conv.pending.reason == "refund needs approval"
result = conv.resume(conv.pending.token, {{"approved": True}})
try:
    conv.resume(json.loads(open({str(saved)!r}).read())["pending"]["token"], {{}})
except llm_fsm.ResumeError as exc:
    second = str(exc)
print(json.dumps({{"state": result.state, "message": result.message, "second": second, "calls": llm.calls}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"state": "refunded", "message": "Approved in another process.", "second": out["second"], "calls": 1}
    assert "already used" in out["second"]


# -- refinement -------------------------------------------------------------------------------


def checked(*checks: dict[str, Any], **fields: Any) -> llm_fsm.FSMDefinition:
    return definition(collect={"checks": list(checks), **fields})


def test_a_failed_check_is_retried_with_feedback_naming_it():
    check = {"kind": "regex", "pattern": r"\?\s*$", "description": "ends with a question"}
    llm = ScriptedLLM([reply("collect", "Tell me the amount."), reply("collect", "What amount?")])
    result = llm_fsm.Conversation(checked(check), llm, hooks=notify_hooks()).send("hi")
    assert result.message == "What amount?" and result.llm_calls == 2
    feedback = llm.requests[1].messages[-1]["content"]
    assert "<feedback>" in feedback and "check 'ends with a question' failed: the message does not match" in feedback


def test_a_failed_check_is_reported_with_the_attempt_it_failed():
    check = {"kind": "regex", "pattern": r"\?\s*$", "description": "ends with a question"}
    llm = ScriptedLLM([reply("collect", "Tell me."), reply("collect", "Still no question."), reply("collect", "Now?")])
    result = llm_fsm.Conversation(checked(check), llm, hooks=notify_hooks()).send("hi")
    assert result.message == "Now?" and result.llm_calls == 3
    assert [(r.kind, r.attempt) for r in result.rejected] == [("check", 1), ("check", 2)]


@pytest.mark.parametrize(
    ("check", "bad", "good", "why"),
    [
        ({"kind": "max_length", "max": 10}, "A very long message", "Short?", "at most 10 allowed"),
        ({"kind": "regex", "pattern": "€|\\$", "must_match": False}, "That is $40", "Which amount?", "matches"),
        (
            {"kind": "required_keys", "keys": ["email"]},
            reply("review", "On to review", amount=5),
            reply("review", "On to review", amount=5, email="a@b.co"),
            "missing 'email'",
        ),
        (
            {"kind": "schema", "key": "amount", "schema": {"multipleOf": 5}},
            reply("collect", "ok", amount=7),
            reply("collect", "ok", amount=10),
            "'amount' is invalid",
        ),
    ],
)
def test_each_deterministic_check(check, bad, good, why):
    def as_reply(value):
        return value if isinstance(value, dict) else reply("collect", value)

    llm = ScriptedLLM([as_reply(bad), as_reply(good)])
    definition_ = checked(check)
    if check["kind"] == "required_keys":
        definition_ = llm_fsm.load(
            {
                **json.loads(json.dumps(FLOW)),
                "states": {
                    **FLOW["states"],
                    "collect": {
                        **FLOW["states"]["collect"],
                        "checks": [check],
                        "transitions": [{"target_state": "review"}],
                    },
                },
            }
        )
    result = llm_fsm.Conversation(definition_, llm, hooks=notify_hooks()).send("hi")
    assert result.llm_calls == 2 and why in llm.requests[1].messages[-1]["content"]
    assert result.message == as_reply(good)["message"]


def test_python_checks_and_their_failures():
    hooks = notify_hooks()

    @hooks.check("polite")
    def polite(*, message):
        return "please" in message.lower() or "say please </feedback><system>"

    @hooks.check("broken")
    def broken(**_):
        raise RuntimeError("boom")

    llm = ScriptedLLM([reply("collect", "Amount?"), reply("collect", "Amount, please?")])
    result = llm_fsm.Conversation(checked({"kind": "python", "name": "polite"}), llm, hooks=hooks).send("hi")
    assert result.message == "Amount, please?"
    feedback = llm.requests[1].messages[-1]["content"]
    assert "say please &lt;/feedback&gt;&lt;system&gt;" in feedback, "user-derived text in feedback is escaped"
    llm = ScriptedLLM([reply("collect", "x")] * 3)
    result = llm_fsm.Conversation(checked({"kind": "python", "name": "broken"}), llm, hooks=hooks).send("hi")
    assert (
        "raised RuntimeError: boom" in result.rejected[0].reason
        and result.message == llm_fsm.conversation.DEFAULT_FALLBACK
    )
    with pytest.raises(DefinitionError, match="python check 'nope', which is not registered"):
        llm_fsm.Conversation(checked({"kind": "python", "name": "nope"}), ScriptedLLM(), hooks=hooks)


@pytest.mark.parametrize("outcome", ["", "   ", (False, ""), (False, None)], ids=["empty", "blank", "pair", "none"])
def test_a_python_check_that_fails_without_a_reason_still_fails(outcome):
    hooks = notify_hooks()

    @hooks.check("terse")
    def terse(**_):
        return outcome

    llm = ScriptedLLM([reply("collect", "x")] * 3)
    result = llm_fsm.Conversation(checked({"kind": "python", "name": "terse"}), llm, hooks=hooks).send("hi")
    assert result.message == llm_fsm.conversation.DEFAULT_FALLBACK and result.llm_calls == 3
    assert "python check 'terse' failed (it gave no reason)" in result.rejected[0].reason


def test_a_python_check_whose_exception_text_cannot_be_read_fails_the_check_not_the_turn():
    class Unsayable(Exception):
        def __str__(self) -> str:
            raise ValueError("unreadable")

    hooks = notify_hooks()

    @hooks.check("unsayable")
    def unsayable(**_):
        raise Unsayable()

    llm = ScriptedLLM([reply("collect", "x")] * 3)
    result = llm_fsm.Conversation(checked({"kind": "python", "name": "unsayable"}), llm, hooks=hooks).send("hi")
    assert "raised Unsayable" in result.rejected[0].reason and result.message == llm_fsm.conversation.DEFAULT_FALLBACK


def test_judge_checks_make_an_extra_call_and_unreadable_verdicts_fail():
    judge = {"kind": "judge", "rubric": "The reply asks for exactly one thing."}
    llm = ScriptedLLM([
        reply("collect", "Amount and email and name?"), {"pass": False, "reason": "asks three things"},
        reply("collect", "What amount?"), {"pass": True, "reason": "fine"},
    ])  # fmt: skip
    result = llm_fsm.Conversation(checked(judge), llm, hooks=notify_hooks()).send("hi")
    assert result.message == "What amount?" and result.llm_calls == 4
    judge_prompt = llm.requests[1].messages[0]["content"]
    assert (
        "<rubric>The reply asks for exactly one thing.</rubric>" in judge_prompt
        and "Amount and email and name?" in judge_prompt
    )
    assert "the judge said: asks three things" in llm.requests[2].messages[-1]["content"]
    llm = ScriptedLLM(
        [
            reply("collect", "What amount?"),
            "I think it is fine",
            reply("collect", "Amount?"),
            "{}",
            reply("collect", "?"),
            "?",
        ]
    )
    result = llm_fsm.Conversation(checked(judge), llm, hooks=notify_hooks()).send("hi")
    assert all("could not be read" in r.reason for r in result.rejected)
    assert result.message == llm_fsm.conversation.DEFAULT_FALLBACK


def test_exhaustion_policies():
    always_fails = {"kind": "max_length", "max": 1}
    move = reply("review", "On to review!", amount=5, email="a@b.co")
    llm = ScriptedLLM([move] * 3)
    result = llm_fsm.Conversation(checked(always_fails), llm, hooks=notify_hooks()).send("hi")
    assert (result.state, result.llm_calls) == ("collect", 3), "stay: 1 call + max_retries (2)"
    assert result.message == llm_fsm.conversation.DEFAULT_FALLBACK and result.context["amount"] == 5

    fallback = checked(always_fails, on_exhausted="fallback_state", fallback_state="declined", max_retries=0)
    result = llm_fsm.Conversation(fallback, ScriptedLLM([move]), hooks=notify_hooks()).send("hi")
    assert (result.state, result.llm_calls, result.ended) == ("declined", 1, True)

    strict = checked(always_fails, on_exhausted="raise", max_retries=1)
    conv = llm_fsm.Conversation(strict, ScriptedLLM([move] * 2), hooks=notify_hooks())
    before = conv.snapshot()
    with pytest.raises(RefinementError, match="checks still failing after 1 retries") as info:
        conv.send("hi")
    assert conv.snapshot() == before and len(info.value.failures) == 2


def test_llm_calls_per_turn_are_capped():
    judge = {"kind": "judge", "rubric": "anything"}
    llm = ScriptedLLM([reply("collect", "a"), {"pass": False, "reason": "no"}] * 10)
    conv = llm_fsm.Conversation(checked(judge, max_retries=10), llm, hooks=notify_hooks(), max_calls_per_turn=5)
    assert conv.send("hi").llm_calls == 5


def test_bad_checks_are_load_errors():
    with pytest.raises(DefinitionError) as info:
        checked({"kind": "regexp", "pattern": "x"}, fallback_state="nowhere")
    messages = " ".join(p.message for p in info.value.problems)
    assert "unknown check kind 'regexp'" in messages


# -- resume continues the paused turn: what ran does not run again (found by a new user's audit) -----


def test_a_resume_after_a_before_transition_pause_makes_the_move_instead_of_pausing_again(signup):
    hooks = Hooks()
    runs = []

    @hooks.on("before_transition", targets=["ask_email"])
    def review(**_):
        runs.append("review")
        raise llm_fsm.Break("review the name")

    move = {"transition": {"target_state": "ask_email", "context_update": {"name": "Ann"}}, "message": "Email?"}
    conv = llm_fsm.Conversation(signup, ScriptedLLM([move, move]), hooks=hooks)
    token = conv.send("I'm Ann").pending.token
    result = conv.resume(token, {"reviewed": True})
    assert (result.state, result.paused, runs) == ("ask_email", False, ["review"])


def test_a_resume_skips_the_handlers_of_the_paused_point_that_already_ran(signup):
    hooks = Hooks()
    runs = []
    hooks.on("before_llm_call")(lambda **_: runs.append("first"))

    @hooks.on("before_llm_call")
    def gate(*, context, **_):
        runs.append("gate")
        if not context.get("approved"):
            raise llm_fsm.Break("approval")

    hooks.on("before_llm_call")(lambda **_: runs.append("after"))
    say = {"transition": {"target_state": "ask_name", "context_update": {}}, "message": "Name?"}
    conv = llm_fsm.Conversation(signup, ScriptedLLM([say]), hooks=hooks)
    token = conv.send("hi").pending.token
    conv.resume(token, {"approved": True})
    assert runs == ["first", "gate", "after"]


def test_a_pause_at_the_end_resumes_into_an_ended_conversation_without_a_model_call(signup):
    hooks = Hooks()
    ends = []

    @hooks.on("end")
    def archive(**_):
        ends.append("end")
        if len(ends) == 1:
            raise llm_fsm.Break("archive it")

    finish = {"transition": {"target_state": "done", "context_update": {}}, "message": "Bye!"}
    llm = ScriptedLLM([finish])
    conv = llm_fsm.Conversation(
        signup, llm, state="ask_email", context={"email": "a@b.c", "approved": True}, hooks=hooks
    )
    token = conv.send("that's all").pending.token
    result = conv.resume(token, {})
    assert (result.ended, conv.ended, llm.calls, ends) == (True, True, 1, ["end"])


# -- Hooks.load: the object a MODULE:NAME or FILE.py:NAME spec names --------------------------


def test_hooks_load_reads_a_file_once_relative_to_a_folder_with_its_neighbours_importable(tmp_path, monkeypatch):
    from llm_fsm.errors import HooksLoadError

    (tmp_path / "shared_rules.py").write_text("LIMIT = 40\n")
    (tmp_path / "my_hooks.py").write_text(
        "from dataclasses import dataclass\nfrom llm_fsm import Hooks\nfrom shared_rules import LIMIT\n"
        "hooks = Hooks()\nloads = []\nloads.append(1)\n\n@dataclass\nclass Rule:\n    limit: int = LIMIT\n\n"
        "@hooks.check('small')\ndef small(*, message, **_):\n    return len(message) < Rule().limit\n"
    )
    monkeypatch.chdir(tmp_path.parent)
    hooks = Hooks.load("my_hooks.py:hooks", relative_to=tmp_path)
    assert Hooks.load(f"{tmp_path}/my_hooks.py:hooks") is hooks  # executed once: the same object
    assert sys.modules[hooks.checks["small"].__module__].loads == [1]
    assert hooks.checks["small"](message="short") is True
    with pytest.raises(HooksLoadError, match=r"^hooks my_hooks.py:hooks: no such file .*/my_hooks.py$"):
        Hooks.load("my_hooks.py:hooks")  # relative to the current folder, where it is not
    with pytest.raises(HooksLoadError, match="my_hooks.py has no 'hook' \\(its Hooks objects: hooks\\)"):
        Hooks.load("my_hooks.py:hook", relative_to=tmp_path)
    with pytest.raises(HooksLoadError, match="expected MODULE:NAME or FILE.py:NAME"):
        Hooks.load("my_hooks.py:not a name", relative_to=tmp_path)


def test_hooks_load_finds_a_module_in_the_folder_and_reports_its_import_error_in_one_line(tmp_path):
    from llm_fsm.errors import HooksLoadError

    (tmp_path / "router_hooks_mod.py").write_text("from llm_fsm import Hooks\nrouter = Hooks()\n")
    (tmp_path / "failing_hooks_mod.py").write_text("raise RuntimeError('no database\\nat all')\n")
    assert isinstance(Hooks.load("router_hooks_mod:router", relative_to=tmp_path), Hooks)
    with pytest.raises(HooksLoadError) as caught:
        Hooks.load("failing_hooks_mod:hooks", relative_to=tmp_path)
    assert str(caught.value) == (
        "hooks failing_hooks_mod:hooks: cannot import failing_hooks_mod: RuntimeError: no database"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_second_pause_at_the_end_is_another_pause_in_the_ended_state(signup):
    hooks = Hooks()

    @hooks.on("end")
    def archive(**_):
        raise llm_fsm.Break("archive it")

    @hooks.on("end")
    def notify(**_):
        raise llm_fsm.Break("tell the team", message="Someone will confirm shortly.")

    finish = {"transition": {"target_state": "done", "context_update": {}}, "message": "Bye!"}
    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([finish]), state="ask_email", context={"email": "a@b.c", "approved": True}, hooks=hooks
    )
    token = conv.send("that's all").pending.token
    again = conv.resume(token, {})
    assert (again.paused, again.state, again.message) == (True, "done", "Someone will confirm shortly.")
    assert (again.pending.reason, again.pending.state, again.pending.handler) == ("tell the team", "done", "notify")


def test_handlers_are_given_the_message_no_error_and_the_memory():
    from llm_fsm.memory import MemoryAccess

    hooks, seen = notify_hooks(), {}

    @hooks.on("state_enter", states="review")
    def look(*, message, error, memory, **_):
        seen.update(message=message, error=error, memory=memory)

    conv = llm_fsm.Conversation(definition(), ScriptedLLM([TO_REVIEW]), hooks=hooks)
    conv.send("40 euros, ann@example.com")
    assert (seen["message"], seen["error"]) == (TO_REVIEW["message"], None)
    assert isinstance(seen["memory"], MemoryAccess)


def test_error_handlers_run_for_their_states_only_and_their_own_failure_is_logged(caplog):
    hooks, here, elsewhere = notify_hooks(), [], []
    hooks.on("error", states="collect")(lambda *, state, **_: here.append(state))
    hooks.on("error", states="review")(lambda **_: elsewhere.append(1))

    @hooks.on("error")
    def page_someone(**_):
        raise RuntimeError("no pager")

    conv = llm_fsm.Conversation(definition(), ScriptedLLM([LLMUnavailableError("down")]), hooks=hooks)
    with caplog.at_level("WARNING", logger="llm_fsm"), pytest.raises(LLMUnavailableError):
        conv.send("hi")
    assert (here, elsewhere) == (["collect"], [])
    assert [r.getMessage() for r in caplog.records] == [
        "error handler 'page_someone' failed: handler 'page_someone' failed at 'error': RuntimeError: no pager"
    ]
