"""Issue 24's reproduction: a person approves a refund, the process is SIGKILLed in the model call that follows,
and the resume is sent again with the same token. How many times did the refund run?

    python benchmarks/approval_crash.py     # uses only the public API, so it runs on older commits too
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import llm_fsm
from llm_fsm import Hooks
from llm_fsm.store import advance, open_store
from llm_fsm.testing import ScriptedLLM, reply, tool_calls

SHOP = {
    "name": "shop",
    "description": "Refunds.",
    "initial_state": "ask",
    "tools": {"refund": {"description": "Refund an order", "approval": "always"}},
    "states": {
        "ask": {"purpose": "Ask", "tools": ["refund"], "transitions": [{"target_state": "done"}]},
        "done": {"purpose": "Say goodbye"},
    },
}


class DiesInTheCall(ScriptedLLM):
    def complete(self, request: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)


def hooks(effects: Path) -> Hooks:
    made = Hooks()

    @made.tool("refund")
    def refund(order_id: str) -> dict[str, bool]:
        with effects.open("a") as f:
            f.write(order_id + "\n")
        return {"ok": True}

    return made


def refunds(url: str, effects: Path) -> int:
    store, definition = open_store(url), llm_fsm.load(SHOP)
    advance(store, "c", definition, ScriptedLLM([reply("ask", "Hi")]), None, hooks=hooks(effects))
    asked = ScriptedLLM([tool_calls(("refund", {"order_id": "A"}))])
    token = advance(store, "c", definition, asked, "refund A", hooks=hooks(effects)).pending.token

    def resume(conversation: Any) -> Any:
        return conversation.resume(token, {"approved": True})

    pid = os.fork()
    if pid == 0:  # the process that dies
        try:
            advance(open_store(url), "c", definition, DiesInTheCall([]), None, hooks=hooks(effects), action=resume)
        finally:
            os._exit(1)
    os.waitpid(pid, 0)
    again = ScriptedLLM([reply("ask", "Refunded.")])
    advance(store, "c", definition, again, None, hooks=hooks(effects), action=resume, wait=10)
    return len(effects.read_text().split())


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    urls = {"sqlite": f"sqlite://{folder}/c.db", "file": f"file://{folder}/files"}
    print(json.dumps({"refund ran (times)": {kind: refunds(url, folder / kind) for kind, url in urls.items()}}))


if __name__ == "__main__":
    main()
