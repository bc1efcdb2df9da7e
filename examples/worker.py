"""A worker loop: many conversations served at once, from a queue of incoming messages, kept in a store.

Messages arrive on an asyncio queue (in a real bot: a chat platform's webhook, a message broker); a few
worker tasks take them and run one turn each with ``aadvance``, which locks the user's conversation,
loads it (or creates it), runs the turn and saves it. Workers never share a conversation object: the
store is the only state, so more processes (or machines, with Redis or PostgreSQL) can run workers too.

Run it offline (the simulated model answers; every user sends the same few messages)::

    python examples/worker.py --users 50 --workers 8 --store sqlite:worker.db
    llm-fsm conversations list --store sqlite:worker.db

With a real model: ``LLM_FSM_MODEL=openai/gpt-4o-mini`` (any litellm name; its key in the provider's usual
variable). ``--store`` takes any store URL (default ``memory:``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import llm_fsm
from llm_fsm.store import Store, aadvance, open_store
from llm_fsm.testing import SimulatedLLM

DEFINITION = Path(__file__).with_name("helpdesk.json")
SAID = ["Hi, I'm {user}.", "Where is my order?", "Thanks, that's all."]  # what each simulated user sends


@dataclass(frozen=True)
class Incoming:
    user_id: str  # the conversation's id in the store: one conversation per user
    text: str


@dataclass(frozen=True)
class Outgoing:
    user_id: str
    text: str  # what the user said
    reply: str  # what they are sent back
    state: str | None  # the conversation's state after the turn (None: no turn ran)


class Bot:
    """What every worker shares: the definition, the model and the store (no conversation lives here)."""

    def __init__(self, store: Store, llm: llm_fsm.LLMClient | None = None) -> None:
        self.definition = llm_fsm.load(DEFINITION)
        self.store = store
        self.llm = llm or model(self.definition)

    async def answer(self, message: Incoming) -> Outgoing:
        """One turn of the user's conversation; every message gets a reply, even when no turn can run."""
        try:
            result = await aadvance(self.store, message.user_id, self.definition, self.llm, message.text)
        except llm_fsm.ConversationEnded:
            return Outgoing(message.user_id, message.text, "This conversation has ended. Thank you!", None)
        except llm_fsm.FSMError as exc:  # a provider down, a conversation busy too long: nothing was saved
            reply = f"Sorry, something went wrong ({type(exc).__name__}). Please try again."
            return Outgoing(message.user_id, message.text, reply, None)
        return Outgoing(message.user_id, message.text, result.message, result.state)


def model(definition: llm_fsm.FSMDefinition) -> llm_fsm.LLMClient:
    """``LLM_FSM_MODEL`` if set, else the simulated model (valid replies along the graph, offline)."""
    name = os.environ.get("LLM_FSM_MODEL")
    return llm_fsm.LiteLLMClient(name) if name else SimulatedLLM(definition, keep=100)


async def worker(bot: Bot, inbox: asyncio.Queue[Incoming], outbox: list[Outgoing]) -> None:
    while True:
        message = await inbox.get()
        try:
            # Two messages of one user may be taken by two workers at once: aadvance's lock makes their turns
            # take place one after the other, first come (first taken from the queue), first served.
            outbox.append(await bot.answer(message))  # a real bot sends the reply back to the user here
        finally:
            inbox.task_done()


async def serve(bot: Bot, messages: Iterable[Incoming], workers: int = 4) -> list[Outgoing]:
    """Answer ``messages`` with ``workers`` tasks; the replies, in the order they were made."""
    inbox: asyncio.Queue[Incoming] = asyncio.Queue()
    outbox: list[Outgoing] = []
    tasks = [asyncio.create_task(worker(bot, inbox, outbox)) for _ in range(workers)]
    for message in messages:
        inbox.put_nowait(message)
    await inbox.join()  # every message answered
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return outbox


def traffic(users: int) -> list[Incoming]:
    """Every user's messages, interleaved as they would arrive: each user's first, then each one's second..."""
    ids = [f"user-{n}" for n in range(1, users + 1)]
    return [Incoming(user, text.format(user=user)) for text in SAID for user in ids]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--store", default="memory:", help="a store URL: memory:, sqlite:FILE, redis://...")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    with open_store(args.store) as store:
        messages = traffic(args.users)
        replies = asyncio.run(serve(Bot(store), messages, args.workers))
        if not args.quiet:
            for out in replies:
                print(f"{out.user_id:>8} | {out.text:<22} | {out.state or '-':<8} | {out.reply}")
        print(f"{len(messages)} messages, {len(replies)} replies, {len(store.list())} conversations stored")
    return 0 if len(replies) == len(messages) else 1


if __name__ == "__main__":
    raise SystemExit(main())
