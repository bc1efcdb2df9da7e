"""``llm-fsm new NAME``: a definition, its conversation tests and its hooks module, which pass at once.

An author starts from files that work: ``NAME.json`` (three states, an opening, a condition, a
``python`` check), ``NAME.test.json`` (what ``llm-fsm test`` runs: scripted replies, no model) and
``NAME_hooks.py`` (the check and a handler the tests exercise). ``llm-fsm validate --strict`` and
``llm-fsm test`` pass on them as written; each file says what to change next. Existing files are never
overwritten unless ``--force`` says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from llm_fsm.cli.main import app, fail
from llm_fsm.cli.options import write_output

# A name that is a file name everywhere, a definition name and a hooks module's stem: no spaces, no path parts.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def _reply(target: str, message: str, **update: Any) -> dict[str, Any]:
    return {"transition": {"target_state": target, "context_update": update}, "message": message}


def definition(name: str) -> dict[str, Any]:
    """The starting definition: learn the user's name, help with a question, say goodbye."""
    said_done = {"==": [{"var": "done"}, True]}
    return {
        "name": name,
        "description": "A starting point: greet the user, learn their name, help with a question, say goodbye.",
        "version": "0.1",
        "initial_state": "welcome",
        "persona": "You are a friendly assistant. Keep replies short: one to three sentences.",
        "states": {
            "welcome": {
                "description": "Greet the user and learn their name.",
                "purpose": "Find out what to call the user.",
                "opening": "Hello! What should I call you?",  # the first message, written without a model call
                "required_context_keys": ["user_name"],
                "extraction_instructions": "user_name: the name the user asks to be called.",
                "transitions": [
                    {
                        "target_state": "helping",
                        "description": "The user gave their name: greet them by it and ask how you can help.",
                        "conditions": [{"description": "the name is known", "requires_context_keys": ["user_name"]}],
                    }
                ],
            },
            "helping": {
                "description": "Help the user with what they ask.",
                "purpose": "Answer the user's question, calling them by their name.",
                "required_context_keys": ["question"],
                "extraction_instructions": (
                    "question: what the user wants help with, in a few words. "
                    "done: true once the user says they have what they need."
                ),
                "checks": [{"kind": "python", "name": "no_promises", "description": "the reply promises nothing"}],
                "transitions": [
                    {
                        "target_state": "goodbye",
                        "description": "The user has what they need: say goodbye.",
                        "conditions": [{"description": "the user is done", "logic": said_done}],
                    }
                ],
            },
            "goodbye": {"description": "The conversation is over.", "purpose": "Say goodbye, by name."},
        },
    }


def tests(name: str) -> dict[str, Any]:
    """Conversation tests of :func:`definition` with scripted replies: ``llm-fsm test`` runs them offline."""
    greeted = {
        "user": "I'm ada",
        "reply": _reply("helping", "Nice to meet you, Ada! How can I help?", user_name="ada"),
        # the hooks' tidy_name handler wrote "Ada": the test shows the hooks ran
        "expect": {"state": "helping", "context": {"user_name": "Ada"}, "max_llm_calls": 1},
    }
    opening = {"user": None, "expect": {"state": "welcome", "message": "What should I call you"}}
    return {
        "hooks": f"{name}_hooks.py:hooks",  # relative to this file
        "cases": [
            {
                "name": "welcome → helping → goodbye",
                "definition": f"{name}.json",
                "steps": [
                    opening,
                    greeted,
                    {
                        "user": "How do I reset my password?",
                        "reply": _reply("helping", "Open Settings, then Security.", question="reset password"),
                        "expect": {"state": "helping", "context": {"question": "reset password"}},
                    },
                    {
                        "user": "Thanks, that's all.",
                        "reply": _reply("goodbye", "Goodbye, Ada!", done=True),
                        "expect": {"state": "goodbye", "status": "ended", "message": "Goodbye"},
                    },
                ],
            },
            {
                "name": "a reply that makes a promise is tried again",
                "definition": f"{name}.json",
                "steps": [
                    opening,
                    greeted,
                    {
                        "user": "Will my refund arrive tomorrow?",
                        "replies": [  # the no_promises check refuses the first; the retry passes
                            _reply("helping", "I promise it will!", question="refund date"),
                            _reply("helping", "Refunds take three to five days.", question="refund date"),
                        ],
                        "expect": {"state": "helping", "message": "three to five days", "max_llm_calls": 2},
                    },
                ],
            },
        ],
    }


HOOKS = '''"""The code behind {name}.json: handlers, checks and tools, registered on one Hooks object.

Load it with ``--hooks {name}_hooks.py:hooks`` (``run``, ``chat``, ``test``, ``paths``), or in Python with
``llm_fsm.Hooks.load("{name}_hooks.py:hooks")``. See docs/handlers.md and docs/tools.md.
"""

from typing import Any

from llm_fsm import Hooks

hooks = Hooks()


@hooks.on("context_update", keys=["user_name"])
def tidy_name(*, update: dict[str, Any], **_: Any) -> dict[str, Any]:
    """The name as it would be written on a form: "ada " -> "Ada"."""
    return {{"user_name": update["user_name"].strip().title()}}


@hooks.check("no_promises")  # the definition's {{"kind": "python", "name": "no_promises"}} check
def no_promises(*, message: str, **_: Any) -> bool | str:
    """True passes; a string fails the turn, and the model is asked again with it as feedback."""
    return "promise" not in message.lower() or "do not make promises"
'''


def files(name: str) -> dict[str, str]:
    """The files ``new`` writes, by file name: the definition, its tests and its hooks."""

    def as_json(data: dict[str, Any]) -> str:
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    return {
        f"{name}.json": as_json(definition(name)),
        f"{name}.test.json": as_json(tests(name)),
        f"{name}_hooks.py": HOOKS.format(name=name),
    }


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="The bot's name: NAME.json, NAME.test.json, NAME_hooks.py.")],
    folder: Annotated[Path, typer.Option("--dir", "-d", help="Write the files here (made if missing).")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist.")] = False,
) -> None:
    """Start a bot: a definition, its conversation tests and its hooks, which validate and test pass at once."""
    if not _NAME.match(name):
        fail(
            f"new: {name!r} is not a usable name: use ASCII letters, digits, _ and - "
            "(starting with a letter, at most 64)",
            2,
        )
    if folder.exists() and not folder.is_dir():
        fail(f"new: --dir {folder} is not a folder", 2)
    written = files(name)
    existing = [file for file in written if (folder / file).exists()]
    if existing and not force:
        fail(f"new: {', '.join(existing)} already in {folder}: not overwritten (--force overwrites them)", 2)
    for file, text in written.items():
        write_output(folder / file, text, make_folders=True)
    where = folder / name
    typer.echo(f"wrote {', '.join(written)} in {folder}")
    typer.echo("next:")
    typer.echo(f"  llm-fsm validate --strict {where}.json")
    typer.echo(f"  llm-fsm test {where}.test.json")
    typer.echo(f"  llm-fsm chat {where}.json --hooks {where}_hooks.py:hooks --model simulated")
