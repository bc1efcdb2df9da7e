"""What a definition's hashes and outline are made of (:attr:`FSMDefinition.content_hash`,
:attr:`~FSMDefinition.outline`, :meth:`~FSMDefinition.changes_since`).

- its canonical form: the fields added since definitions were first hashed are left out while they
  hold their default, so that a hash does not move when the format grows;
- its prose (text shown to the model) apart from its structure (what the runtime checks), so that an
  edit to the prose can be told apart and need not block restoring a conversation;
- the words that name what changed between two outlines.

The definition models are in :mod:`llm_fsm.definition.models`, which uses these.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The prose fields, as pydantic include/exclude specs: text shown to the model, which a restore may
# see edited (unless strict). Everything else is structure: what the runtime checks and enforces.
TOP_PROSE = {"description", "persona", "version"}
_CHECKS_PROSE = {"__all__": {"description": True}}
TRANSITION_PROSE: dict[str, Any] = {"description": True, "conditions": _CHECKS_PROSE}
STATE_PROSE: dict[str, Any] = {
    **dict.fromkeys(
        ("description", "purpose", "instructions", "extraction_instructions", "response_instructions"), True
    ),
    "opening": True,  # words for the user: editing them does not block restoring a conversation
    "example_dialogue": True,
    "transitions": {"__all__": TRANSITION_PROSE},
    "checks": _CHECKS_PROSE,
}
# How changes_since names what changed: outline keys (after "<state id>." for a state's) -> words.
STATE_PARTS = {"transitions": "transitions of state", "structure": "keys, checks or settings of state"}
STATE_PROSE_PART = {"prose": "descriptions or instructions of state"}
TOP_STRUCTURE = "$definition.structure"  # "$" is not allowed in a state id: these never clash with a state's
TOP_PROSE_PART = "$definition.prose"
GLOBAL_PART = "$definition.global_transitions"
TOP_PARTS = {
    TOP_STRUCTURE: "top-level fields changed (name, initial state, keys, schemas...)",
    GLOBAL_PART: "global transitions changed",
}
TOP_PROSE_PARTS = {
    TOP_PROSE_PART: "top-level prose changed (description, persona, version, language, texts, or a description of "
    "a tool, a memory slot or the summaries)"
}
STATE_PARTS_BEFORE_PROSE = {"transitions": "transitions of state", "text": "purpose or instructions of state"}
TOP_PARTS_BEFORE_PROSE = {"fsm": "top-level fields changed (name, persona, initial state, schemas...)"}


def changed_parts(
    old: dict[str, str], new: dict[str, str], state_parts: dict[str, str], top_parts: dict[str, str]
) -> list[str]:
    """The differences between two outlines of one kind, in words, for the parts named in ``state_parts``
    (each state's) and ``top_parts``."""
    top = {key for key in (*old, *new) if key.startswith("$") or key == "fsm"}
    old_states = {key.rsplit(".", 1)[0] for key in old if key not in top}
    new_states = {key.rsplit(".", 1)[0] for key in new if key not in top}
    changes = [f"state '{s}' removed" for s in sorted(old_states - new_states)]
    changes += [f"state '{s}' added" for s in sorted(new_states - old_states)]
    for sid in sorted(old_states & new_states):
        parts = state_parts.items()
        changes += [
            f"{words} '{sid}' changed" for part, words in parts if old.get(f"{sid}.{part}") != new[f"{sid}.{part}"]
        ]
    changes += [words for key, words in top_parts.items() if old.get(key) != new.get(key)]
    return changes


# Fields added after definitions were first hashed: left out of the hashes while they hold their
# default, so that conversations stored before they existed still restore onto the same definition.
_ADDED_TOP = {
    "tools": {},
    "mcp_servers": {},
    "max_tool_rounds": 3,
    "max_tool_calls": 8,
    "memory": None,
    "summaries": None,
    "global_transitions": [],
    "tool_error_detail": "message",
    "language": "",
    "texts": None,
    "corrections": False,
    "any_value": None,
    "max_run_steps": 20,
}
_ADDED_STATE: dict[str, Any] = {
    "tools": [], "max_tool_rounds": None, "summaries": None, "subflow": None, "opening": None, "corrections": None,
    "clearable_keys": [], "acts": False,
}  # fmt: skip
_ADDED_TOOL: dict[str, Any] = {"error_detail": None}
_ADDED_TRANSITION: dict[str, Any] = {"clear_keys": [], "automatic": False}


def canonical_dump(dumped: dict[str, Any]) -> dict[str, Any]:
    """A dumped definition without the added fields that hold their default (states and transitions included)."""
    top = {key: value for key, value in dumped.items() if key not in _ADDED_TOP or value != _ADDED_TOP[key]}
    if isinstance(top.get("states"), dict):
        top["states"] = {sid: canonical_state(state) for sid, state in top["states"].items()}
    if isinstance(top.get("tools"), dict):  # tools gained fields too: a definition's hash must not move
        top["tools"] = {name: _without_added(tool, _ADDED_TOOL) for name, tool in top["tools"].items()}
    if isinstance(top.get("global_transitions"), list):
        top["global_transitions"] = canonical_transitions(top["global_transitions"])
    return top


def canonical_state(dumped: dict[str, Any]) -> dict[str, Any]:
    state = _without_added(dumped, _ADDED_STATE)
    if isinstance(state.get("transitions"), list):
        state["transitions"] = canonical_transitions(state["transitions"])
    return state


def canonical_transitions(dumped: list[Any]) -> list[Any]:
    """Dumped transitions without the added fields that hold their default."""
    return [_without_added(t, _ADDED_TRANSITION) if isinstance(t, dict) else t for t in dumped]


def _without_added(dumped: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in dumped.items() if key not in added or value != added[key]}


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def memory_prose(definition: Any) -> dict[str, Any]:
    """The prose of the working memory and the summaries: slot descriptions and summary instructions."""
    prose: dict[str, Any] = {}
    if definition.memory is not None:
        described = {"__all__": {"description": True}}
        prose["memory"] = {group: described for group in ("background", "slots") if getattr(definition.memory, group)}
    if definition.summaries is not None:
        prose["summaries"] = {"instructions": True}
    return prose
