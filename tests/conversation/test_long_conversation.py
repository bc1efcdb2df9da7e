"""1,000 turns of the insurance claim example (a sub-conversation, moves from anywhere, memory and
summaries on) with a scripted model: prompts stay bounded and what was said early is not lost."""

from __future__ import annotations

import re
from pathlib import Path

import llm_fsm
from llm_fsm.llm import LLMRequest
from llm_fsm.store import open_store
from llm_fsm.store.history import whole
from llm_fsm.testing import ScriptedLLM
from tests.conftest import ROOT

CLAIM = ROOT / "fsm_definitions" / "insurance_claim.json"
FACT = "my daughter was in the back seat and has a bruised arm"
TURNS = 1000


def keeps_facts(request: LLMRequest) -> dict[str, str]:
    """A careful summarizer: the previous summary's facts plus the user lines that state one."""
    system = request.messages[0]["content"]
    previous = re.search(r"<previous_summary>(.*?)</previous_summary>", system, re.DOTALL)
    facts = [] if previous is None or previous.group(1).startswith("(none yet") else [previous.group(1)]
    facts += [line for line in re.findall(r"<user>(.*?)</user>", system) if "daughter" in line]
    return {"summary": " ".join(facts) or "The caller is filing a claim."}


def move(target: str, message: str, update: dict | None = None, memory: dict | None = None) -> dict:
    transition = {"target_state": target, "context_update": update or {}, "memory_update": memory or {}}
    return {"transition": transition, "message": message, "reasoning": "scripted"}


def script() -> list[tuple[str, dict]]:
    """(user line, reply) for turns 1..TURNS: the policy and the fact at turn 3, the identity check
    (a sub-conversation), the incident, then questions answered by help and back to the damage."""
    padding = " Take your time; I'm here to help with every step of the claim." * 2
    early = [
        ("Hello, I had an accident.", move("ask_policy", "I'm sorry. Your policy number?" + padding)),
        ("One moment, let me find it.", move("ask_policy", "Of course, take your time." + padding)),
        (f"It's HM-204518. Also {FACT}.", move("identity", "Noted. The policy holder's full name?" + padding,
                                                {"policy_number": "HM-204518"}, {"injuries": f"Caller: {FACT}"})),
        ("Daniel Okafor", move("ask_dob", "Your date of birth?", {"full_name": "Daniel Okafor"})),
        ("12 March 1985", move("read_back", "HM-204518, Daniel Okafor, 1985-03-12?", {"date_of_birth": "1985-03-12"})),
        ("Yes", move("verified", "Confirmed. What happened, and when?", {"verified": True})),
        ("A van hit my car on 14 May 2024.", move("damage", "How much is the damage, roughly?",
                                                  {"incident_date": "2024-05-14", "incident_kind": "car",
                                                   "incident_description": "A van hit the car."})),
    ]  # fmt: skip
    turns = list(early)
    for turn in range(len(early) + 1, TURNS + 1):
        if turn % 2 == 0:
            answer = f"Answer {turn:04d}: usually about a week once the assessor has seen it."
            question = f"Question {turn:04d}: how long will the repair take?"
            turns.append((question + padding, move("help", answer + padding)))
        else:
            back = f"Back to the damage ({turn:04d}): roughly how much?"
            turns.append((f"Thanks, noted ({turn:04d}).", move("$return", back + padding)))
    return turns


def test_a_thousand_turns_stay_bounded_and_keep_an_early_fact(tmp_path: Path) -> None:
    definition = llm_fsm.load(CLAIM)
    # the claim writes its own opening (no call): a reply for it only if it did not
    opening = [] if definition.states["ask_policy"].opening else [move("ask_policy", "Hello! Your policy number?")]
    llm = ScriptedLLM(opening, summaries=keeps_facts)
    conversation = llm_fsm.Conversation(definition, llm)
    conversation.start()
    prompts: dict[int, str] = {}
    frames = set()
    for turn, (line, answer) in enumerate(script(), 1):
        llm.add(answer)
        before = len(llm.requests)
        result = conversation.send(line)
        assert not result.rejected, (turn, result.rejected)
        prompts[turn] = next(r for r in llm.requests[before:] if r.kind == "reply").messages[0]["content"]
        frames.add(result.frames[-1][0])
    assert frames == {"insurance_claim", "identity_check"} and conversation.state == "help"
    sizes = {turn: len(prompt) for turn, prompt in prompts.items()}
    late, middle = max(sizes[t] for t in range(500, TURNS + 1)), max(sizes[t] for t in range(100, 500))
    assert late <= middle + 50, (late, middle)
    summary_calls = sum(1 for r in llm.requests if r.kind == "summary")
    assert summary_calls >= TURNS // 5  # on overflow, one every `batch` (4) turns
    for turn in (200, TURNS):
        memory = prompts[turn].split("<memory>")[1].split("</memory>")[0]
        summary = prompts[turn].split("<conversation_summary>")[1].split("</conversation_summary>")[0]
        assert FACT in memory and FACT in summary
        assert FACT not in prompts[turn].split("<conversation_history>")[1]  # long out of the window
    with open_store(f"sqlite://{tmp_path / 'claims.db'}") as store:
        store.save("claim-1", conversation.snapshot())
        saved = store.load("claim-1")
        # a load carries the history's tail; the whole history is read page by page
        stored = whole(store, "claim-1", saved.snapshot) if saved is not None else None
    assert saved is not None and stored == conversation.snapshot()
    replies = [move("$return", "Back to the damage?"), move("confirm", "Here's the claim.", {"damage_estimate": 2400})]
    again = llm_fsm.Conversation.restore(saved.snapshot, definition, ScriptedLLM(replies, summaries=keeps_facts))
    assert again.memory["injuries"] == f"Caller: {FACT}" and FACT in again.summary
    assert again.send("Thanks.").state == "damage" and again.send("About 2400 euros.").state == "confirm"
