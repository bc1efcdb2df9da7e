"""States with nothing to collect (issue 28): does the guided small model route the user's message?

    python benchmarks/probe_routing.py --url http://127.0.0.1:PORT/v1 [--root TREE]

``--url``: a running ``scripts/local-model start`` server; ``--root``: the tree whose runtime is played (default:
this one; an older worktree compares code). Eight cases, one call each, started in their state: a concierge
greeting with three desks (``benchmarks/routing/concierge.json``), and the help detours of workshop_signup,
insurance_claim and it_helpdesk (``benchmarks/unseen``) with their way back. Prints each and the count routed
to the expected state.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES, UNSEEN = HERE.parent / "fsm_definitions", HERE / "unseen"
DESK = HERE / "routing" / "concierge.json"
CASES = [  # definition, state, the states it came from, context, the user's line, the state expected
    (DESK, "greeting", [], {}, "Hi, I'd like to book a double room for two nights.",
     "room_booking"),
    (DESK, "greeting", [], {}, "Is the restaurant open for dinner tonight?", "restaurant"),
    (DESK, "greeting", [], {}, "The shower in room 12 is broken.", "housekeeping"),
    (DESK, "greeting", [], {}, "Could we get some extra towels please?", "housekeeping"),
    (EXAMPLES / "workshop_signup.json", "help", ["ask_name", "ask_email"], {"name": "maya chen"}, "ok, that's fine",
     "ask_email"),
    (EXAMPLES / "workshop_signup.json", "help", ["ask_name", "ask_email", "choose_session", "confirm"],
     {"name": "maya chen", "email": "m@x.io", "session": "saturday_morning"}, "Great, thanks.", "confirm"),
    (EXAMPLES / "insurance_claim.json", "help", ["ask_policy", "identity", "incident", "damage"],
     {"policy_number": "HM-204518"}, "Okay, thanks. About 2,400 euros.", "damage"),
    (UNSEEN / "it_helpdesk.json", "faq", ["triage", "verify_identity"], {"issue_category": "password"},
     "ok got it thanks", "verify_identity"),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--root", default=str(HERE.parent))
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    import llm_fsm

    routed = 0
    for path, state, came_from, context, line, expected in CASES:
        definition = llm_fsm.load(path)
        options = {"temperature": 0, "response_format": "json_schema", "max_tokens": 256, "timeout": 120}
        llm = llm_fsm.LiteLLMClient("openai/smollm2", api_base=args.url, api_key="none", guided=True, **options)
        conversation = llm_fsm.Conversation(definition, llm, state=state, context=context)
        # where "$return" goes: the states the conversation came through (a probe starts in the middle)
        conversation._snapshot = conversation._snapshot.model_copy(update={"came_from": tuple(came_from)})
        result = conversation.send(line)
        routed += result.state == expected
        mark = "OK" if result.state == expected else "XX"
        print(f"{mark} {definition.name}:{state} -> {result.state} (expected {expected}) {line!r}")
    print(f"routed {routed}/{len(CASES)}")


if __name__ == "__main__":
    main()
