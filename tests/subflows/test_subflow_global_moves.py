"""Moves from anywhere while a sub-conversation talks: the levels below offer their global transitions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import llm_fsm
from llm_fsm import Break, Conversation, Hooks
from llm_fsm.store import open_store
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply

DATA = Path(__file__).parents[1] / "data" / "subflows"

HUMAN = {"target_state": "human", "description": "The user asks for a person", "priority": 5}
HELP = {"target_state": "help", "description": "The user asks how this works", "priority": 50}


def claim_with(tmp_path: Path, globals_: list[dict[str, Any]], **extra_states: Any) -> Path:
    for path in DATA.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    data = json.loads((tmp_path / "claim.json").read_text())
    data["global_transitions"] = globals_
    data["states"].update(extra_states)
    data["states"]["human"] = {"purpose": "Hand over to a person."}
    data["states"]["help"] = {
        "purpose": "Answer the question.",
        "transitions": [{"target_state": "$return", "description": "Answered"}],
    }
    (tmp_path / "claim.json").write_text(json.dumps(data))
    return tmp_path / "claim.json"


OPEN = reply("ask_policy", "Hi! Your policy number?")
TO_IDENTITY = reply("identity", "Thanks, let's check who you are.", policy_number="P1", customer_name="Ann")


def in_identity(path: Path, *more: Any, hooks: Hooks | None = None) -> tuple[Conversation, ScriptedLLM]:
    llm = ScriptedLLM([OPEN, TO_IDENTITY, *more])
    conversation = Conversation(llm_fsm.load(path), llm, hooks=hooks)
    conversation.start()
    conversation.send("P1, I'm Ann")
    assert conversation.frames[-1] == {"definition": "identity_check", "state": "ask_dob"}
    return conversation, llm


def test_the_parents_global_moves_are_offered_in_the_frames_prompt_and_schema(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN, HELP])
    conversation, llm = in_identity(path, reply("ask_dob", "Your date of birth?"))
    conversation.send("hm")
    request = llm.requests[-1]
    prompt = request.messages[0]["content"]
    assert "<target>human</target>" in prompt and "The user asks for a person" in prompt
    assert "<target>help</target>" in prompt  # identity_check has no help state of its own
    targets = json.dumps(request.schema)
    assert '"human"' in targets and '"check"' in targets


def test_taking_the_parents_move_drops_the_frame_and_moves_the_parent(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN])
    conversation, _ = in_identity(path, reply("human", "I'll get you a person.", dob="1990-01-01"))
    before = conversation.context
    result = conversation.send("I want a human")
    assert result.state == "human" and result.previous_state == "identity" and result.ended
    assert result.ran_in == ("identity_check", "ask_dob") and result.frames == (("claim", "human"),)
    snapshot = conversation.snapshot()
    assert snapshot.stack == () and snapshot.status == "ended" and snapshot.state == "human"
    assert conversation.context == before  # popped with no output: its dob never reaches the claim
    last = snapshot.history[-1]
    assert (last.user, last.assistant, last.state) == ("I want a human", "I'll get you a person.", "human")
    assert "identity" in snapshot.came_from


def test_except_states_and_conditions_are_judged_at_the_parents_level(tmp_path: Path) -> None:
    blocked = {**HUMAN, "except_states": ["identity"]}
    conditional = {"target_state": "help", "description": "Help", "priority": 50,
                   "conditions": [{"logic": {"==": [{"var": "policy_number"}, "P2"]}}]}  # fmt: skip
    path = claim_with(tmp_path, [blocked, conditional])
    replies = [
        reply("ask_dob", "Your date of birth?"),
        reply("human", "A person."),
        reply("ask_dob", "Your birth date?"),
    ]
    conversation, llm = in_identity(path, *replies)
    conversation.send("hm")
    prompt = llm.requests[-1].messages[0]["content"]
    assert "<target>human</target>" not in prompt and "<target>help</target>" not in prompt
    result = conversation.send("I want a human")  # not offered, so refused (then corrected): the frame stays
    assert [r.kind for r in result.rejected] == ["target"] and "'human'" in result.rejected[0].reason
    assert conversation.frames[-1]["definition"] == "identity_check"


def test_a_frames_own_state_of_the_same_name_shadows_the_parents_move(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN, HELP])
    sub = json.loads((tmp_path / "identity_check.json").read_text())
    sub["global_transitions"] = [HELP]
    sub["states"]["help"] = {"purpose": "Explain the check.", "transitions": [{"target_state": "$return"}]}
    (tmp_path / "identity_check.json").write_text(json.dumps(sub))
    replies = [reply("help", "We check who you are."), reply("$return", "Now, your date of birth?")]
    conversation, _ = in_identity(path, *replies)
    result = conversation.send("what is this?")
    assert result.frames == (("claim", "identity"), ("identity_check", "help"))  # its own help, the frame kept
    result = conversation.send("ok")
    assert result.frames == (("claim", "identity"), ("identity_check", "ask_dob"))


def test_a_parents_help_returns_to_the_subflow_state_which_runs_it_again(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HELP])
    replies = [reply("check", "Your pet's name?", dob="1990-01-01"), reply("help", "It is a claim."),
               reply("$return", "Back to it: your date of birth?")]  # fmt: skip
    conversation, _ = in_identity(path, *replies)
    conversation.send("1 Jan 1990")
    assert conversation.send("how does this work?").frames == (("claim", "help"),)
    result = conversation.send("thanks")
    assert result.frames == (("claim", "identity"), ("identity_check", "ask_dob"))  # pushed anew: progress is lost


def test_a_break_in_the_parents_move_pauses_and_resumes_there(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN])
    hooks = Hooks()

    @hooks.on("state_enter", states=["human"])
    def call_a_person(**_: Any) -> None:
        raise Break("a person must pick this up", message="Connecting you.")

    conversation, _ = in_identity(path, reply("human", "A person will help."), hooks=hooks)
    result = conversation.send("a human please")
    assert result.paused and result.message == "A person will help." and conversation.snapshot().stack == ()
    resumed = conversation.resume(result.pending.token, {"agent": "Bo"})
    assert resumed.state == "human" and conversation.ended and conversation.context["agent"] == "Bo"


def test_the_frame_is_unchanged_when_the_parents_move_is_not_taken(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN])
    conversation, _ = in_identity(path, reply("check", "Your pet's name?", dob="1990-01-01"))
    result = conversation.send("1 Jan 1990")
    assert result.frames == (("claim", "identity"), ("identity_check", "check"))
    assert conversation.snapshot().stack[-1].snapshot.context["dob"] == "1990-01-01"


def test_the_snapshot_after_the_move_round_trips_through_a_store(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN])
    conversation, _ = in_identity(path, reply("human", "A person will help."))
    conversation.send("human")
    with open_store(f"sqlite://{tmp_path / 'c.db'}") as store:
        store.save("c1", conversation.snapshot())
        saved = store.load("c1")
    assert saved is not None
    again = Conversation.restore(saved.snapshot, llm_fsm.load(path), ScriptedLLM([]))
    assert again.snapshot() == conversation.snapshot() and again.state == "human"


def test_the_stand_in_states_never_leak_into_the_sub_definition(tmp_path: Path) -> None:
    path = claim_with(tmp_path, [HUMAN])
    definition = llm_fsm.load(path)
    conversation, _ = in_identity(path, reply("ask_dob", "Your date of birth?"))
    conversation.send("hm")
    sub = definition.subflow_definitions["identity_check.json"]
    fresh = llm_fsm.load(tmp_path / "identity_check.json")
    assert "human" not in sub.states and sub.global_transitions == ()
    assert sub.content_hash == fresh.content_hash
