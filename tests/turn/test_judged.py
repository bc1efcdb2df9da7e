"""What a turn found in the replies it read (llm_fsm.turn.judged.Judged): what the fallback keeps of the last reply,
the moves a guided schema leaves out, the problems a state's retries refine."""

from __future__ import annotations

from llm_fsm.snapshot import Rejection
from llm_fsm.turn.engine import Decision
from llm_fsm.turn.judged import Judged


def rejection(kind: str, **fields: object) -> Rejection:
    return Rejection(kind=kind, reason=f"a {kind} problem", **fields)  # type: ignore[arg-type]


def test_the_fallback_keeps_the_last_reply_s_updates_but_those_a_check_refused_and_a_move_s_clear_keys():
    judged = Judged()
    assert judged.kept_updates() == {}  # no reply read: nothing kept
    decision = Decision(False, "a", {}, {"email": "x@y.z", "name": "Ada", "code": None}, (), cleared=("code",))
    judged.read(decision, {})
    judged.found([rejection("check", key="email"), rejection("condition", target_state="b")])
    assert judged.kept_updates() == {"name": "Ada"}


def test_refused_moves_and_refinements_are_read_from_the_problems_in_the_order_found():
    judged = Judged()
    judged.found([rejection("format"), rejection("condition", target_state="b"), rejection("check", key="k")])
    judged.found([rejection("target", target_state="c"), rejection("context_value", key="n")])
    assert judged.refused_targets() == {"b", "c"}
    assert [r.kind for r in judged.refinements()] == ["check", "context_value"]
    assert [r.kind for r in judged.problems] == ["format", "condition", "check", "target", "context_value"]
