"""An SGD service schema as a definition, written from our own docs as an author would write it by hand.

- Every slot a user gives (one some intent requires or takes) is a context key (SGD tracks one state per
  service; the others are the service's results, never in its state): its description from the schema,
  a categorical slot's values as its ``enum``. ``any_value`` is SGD's ``dontcare``: "any value will do".
- A state per intent, its required slots as ``required_context_keys`` and its optional ones (with the value
  SGD takes when the user gives none) named in its instructions; a ``start`` state while no intent is known, and
  a terminal ``done`` for the end of the conversation (SGD's intent ``NONE`` after one).
- A move from every state to each other intent (people switch: find a restaurant, then book it) and to ``done``.
- Every state writes every such slot (a user gives the next intent's details before asking for it) and may clear them
  (a new transaction, "forget the date").

    python -m benchmarks.sgd.convert [--data ../shared/sgd] [--out benchmarks/sgd/definitions]

writes one ``<Service>.json`` per service; ``llm-fsm validate --strict`` passes on each.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from benchmarks.sgd.data import DATA, load_schemas

HERE = Path(__file__).parent
OUT = HERE / "definitions"
ANY_VALUE = "dontcare"  # SGD's word for "the user said any value will do"
START, DONE = "start", "done"


def state_id(intent: str) -> str:
    """``FindRestaurants`` -> ``find_restaurants``: our ids are snake case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", intent).lower()


def _sentence(text: str) -> str:
    text = text.strip()
    return text[0].lower() + text[1:] if text else text


def _key_schema(slot: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": slot["description"]}
    if slot["is_categorical"]:
        schema["enum"] = list(slot["possible_values"])
    return schema


def informable(service: dict[str, Any]) -> list[dict[str, Any]]:
    """The slots a user gives: those some intent requires or takes. The others are results the service reports
    (a restaurant's phone number, its rating): SGD's state never holds them, and no state writes them."""
    given = {name for intent in service["intents"] for name in (*intent["required_slots"], *intent["optional_slots"])}
    return [slot for slot in service["slots"] if slot["name"] in given]


def _extraction(service: dict[str, Any]) -> str:
    """What each key holds, in the schema's words: every state writes every slot a user gives."""
    return "; ".join(f"{slot['name']}: {_sentence(slot['description'])}" for slot in informable(service)) + "."


def _intent_state(intent: dict[str, Any], slots: list[str], extraction: str) -> dict[str, Any]:
    optional = intent["optional_slots"]
    needs = ", ".join(intent["required_slots"]) or "nothing more"
    instructions = [
        f"It needs: {needs}. Ask for what is still missing, one or two details at a time.",
        "Write each detail the user gives, in their words; leave out what they have not said.",
    ]
    if optional:
        named = ", ".join(f"{slot} (if not given: {value})" for slot, value in optional.items())
        instructions.append(f"It may also take: {named}.")
    if intent["is_transactional"]:
        instructions.append("Before you act, read the details back and ask the user to confirm them.")
    return {
        "description": intent["description"],
        "purpose": f"Help the user {_sentence(intent['description'])}.",
        "instructions": " ".join(instructions),
        "required_context_keys": list(intent["required_slots"]),
        "extraction_instructions": extraction,
        "writable_keys": slots,
        "clearable_keys": slots,
    }


def definition(service: dict[str, Any]) -> dict[str, Any]:
    """The definition of one SGD service schema."""
    name, intents = service["service_name"], service["intents"]
    slots = [slot["name"] for slot in informable(service)]
    extraction = _extraction(service)
    wants = "; ".join(_sentence(intent["description"]) for intent in intents)
    states: dict[str, Any] = {
        START: {
            "description": "Nothing asked for yet.",
            "purpose": f"Find out what the user wants to do: {wants}.",
            "opening": "Hello! How can I help you?",
            "instructions": "Write every detail the user already gives, in their words.",
            "extraction_instructions": extraction,
            "writable_keys": slots,
            "clearable_keys": slots,
        },
        **{state_id(intent["name"]): _intent_state(intent, slots, extraction) for intent in intents},
        DONE: {"description": "The user needs nothing more.", "purpose": "Say goodbye."},
    }
    moves = [
        {
            "target_state": state_id(intent["name"]),
            "description": f"The user wants to {_sentence(intent['description'])}.",
        }
        for intent in intents
    ]
    moves.append({"target_state": DONE, "description": "The user needs nothing more."})
    for sid, state in states.items():
        if sid != DONE:  # every intent from every state (a state's own moves: global ones do not keep it open)
            state["transitions"] = [move for move in moves if move["target_state"] != sid]
    return {
        "name": name.lower(),
        "description": f"{service['description']}.",
        "version": "1.0",
        "initial_state": START,
        "persona": f"You are a virtual assistant: {_sentence(service['description'])}. You are brief and polite.",
        "any_value": ANY_VALUE,
        "context_schema": {slot["name"]: _key_schema(slot) for slot in informable(service)},
        "states": states,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a definition per SGD service schema.")
    parser.add_argument("--data", type=Path, default=DATA, help="the folder with SGD's schema.json")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for service in load_schemas(args.data).values():
        path = args.out / f"{service['service_name']}.json"
        path.write_text(json.dumps(definition(service), indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
