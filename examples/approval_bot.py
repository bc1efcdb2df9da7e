"""A bot with a tool that needs a person's approval: it pauses, a person approves, it resumes exactly once.

The ``refund`` tool of ``refund_desk.json`` says ``"approval": "always"``: when the model calls it, the
turn stops before the call runs and the conversation is saved, paused, with the call and a single-use
token. Any process can later approve (or deny) it; the refund then runs, and the same turn goes on.
Approving twice, at once or later, from two processes or one, makes one refund: the second is refused.

Run it offline (the simulated model calls the tool with sample arguments)::

    python examples/approval_bot.py say ann "Please refund order A-17, 40 euros"   # paused: waits for approval
    python examples/approval_bot.py pending                                        # what waits, in every conversation
    python examples/approval_bot.py approve ann                                    # runs the refund, once
    python examples/approval_bot.py deny ann "not our order"                       # or refuse it, with a reason

``--store URL`` (default ``sqlite:refunds.db``) keeps the conversations, ``--ledger FILE`` (default
``refunds.jsonl``) is where the stand-in payment service writes each refund it makes. With a real model:
``LLM_FSM_MODEL=openai/gpt-4o-mini`` (any litellm name; its key in the provider's usual variable).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import llm_fsm
from llm_fsm.store import Store, advance, open_store
from llm_fsm.testing import SimulatedLLM

DEFINITION = Path(__file__).with_name("refund_desk.json")


def make_hooks(ledger: Path) -> llm_fsm.Hooks:
    hooks = llm_fsm.Hooks()

    @hooks.tool()
    def refund(order_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
        """Refund an order (the runtime runs it only once a person approved the call)."""
        # A real payment API gets the key too (Stripe's Idempotency-Key header, say): the runtime gives the
        # same key to every retry of this call, so the provider makes one refund whatever happens.
        with ledger.open("a", encoding="utf-8") as file:
            file.write(json.dumps({"order_id": order_id, "amount": amount, "key": idempotency_key}) + "\n")
        return {"order_id": order_id, "amount": amount, "reference": idempotency_key[-8:]}

    return hooks


def model(definition: llm_fsm.FSMDefinition) -> llm_fsm.LLMClient:
    """``LLM_FSM_MODEL`` if set, else the simulated model, which calls a state's tools before it replies."""
    name = os.environ.get("LLM_FSM_MODEL")
    return llm_fsm.LiteLLMClient(name) if name else SimulatedLLM(definition)


def say(store: Store, user: str, text: str, hooks: llm_fsm.Hooks) -> int:
    definition = llm_fsm.load(DEFINITION)
    try:
        result = advance(store, user, definition, model(definition), text, hooks=hooks)
    except llm_fsm.ConversationPaused:
        print(f"{user}'s conversation waits for a person's approval: see `pending`")
        return 1
    print(result.message)
    if result.paused:  # the model asked for the refund: nothing ran yet, and the pause is saved
        print(f"waiting for approval: {describe(store, user)}")
    return 0


def decide(store: Store, user: str, decision: dict[str, Any], hooks: llm_fsm.Hooks) -> int:
    """Resume the call ``user``'s conversation waits on with ``decision`` (``{"approved": True}``...)."""
    record = store.load(user)  # a Record (id, snapshot, version, updated_at), or None when nothing is stored
    pending = record.snapshot.pending if record is not None else None
    if pending is None or pending.kind != "tool_approval":
        print(f"nothing waits for approval in {user}'s conversation")
        return 1
    definition = llm_fsm.load(DEFINITION)
    try:
        # under the conversation's lock: of two approvals of one token, in any processes, one resumes
        result = advance(
            store, user, definition, model(definition), None, hooks=hooks,
            action=lambda conversation: conversation.resume(pending.token, decision),
        )  # fmt: skip
    except llm_fsm.ConversationError as exc:  # ResumeError: the token was used already (someone decided)
        print(f"not resumed: {exc}")
        return 1
    for run in result.tool_calls:
        print(f"{run.name}({run.arguments}): {run.approval}, result {run.result}")
    print(result.message)
    return 0


def describe(store: Store, user: str) -> str:
    record = store.load(user)
    pending = record.snapshot.pending if record is not None else None
    if pending is None:
        return "nothing"
    return f"{pending.payload['tool']} {json.dumps(pending.payload['arguments'])} (since {pending.created_at})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="sqlite:refunds.db")
    parser.add_argument("--ledger", type=Path, default=Path("refunds.jsonl"))
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("say", help="a user's message").add_argument("user")
    commands.choices["say"].add_argument("text")
    commands.add_parser("pending", help="the calls waiting for approval")
    commands.add_parser("approve", help="approve the call a conversation waits on").add_argument("user")
    deny = commands.add_parser("deny", help="refuse it, with a reason the model reads")
    deny.add_argument("user")
    deny.add_argument("reason")
    args = parser.parse_args(argv)
    hooks = make_hooks(args.ledger)
    with open_store(args.store) as store:
        if args.command == "say":
            return say(store, args.user, args.text, hooks)
        if args.command == "approve":
            return decide(store, args.user, {"approved": True}, hooks)
        if args.command == "deny":
            return decide(store, args.user, {"approved": False, "reason": args.reason}, hooks)
        for info in store.list():  # pending
            if info.status == "paused":
                print(f"{info.id}: {describe(store, info.id)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
