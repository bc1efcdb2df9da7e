"""Prompt injection (GitHub issue "Prompt injection"): hostile text from users and models.

Every attack of ``tests/data/injection_attacks.json`` is placed wherever conversation text reaches
the prompt, and given to a model that obeys it. The runtime must keep the prompt's element structure,
show the text as text, and refuse every move and write the definition does not allow.

Prompts are built through the public API only (``Conversation`` + ``ScriptedLLM``). The prompt is
parsed with an XML parser; characters XML 1.0 cannot carry at all (C0 controls, U+FFFE, U+FFFF) are
replaced with U+FFFD before parsing: they are text for the model, and cannot open or close anything.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.testing import ScriptedLLM
from llm_fsm.tools.calling import MAX_RESULT_CHARS
from tests.conftest import reply
from tests.turn.test_prompt import structure

CORPUS = Path(__file__).resolve().parents[1] / "data" / "injection_attacks.json"
ENTRIES: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))

KEY_LIMIT = 100  # context key names longer than this are truncated with a marker
HISTORY_LIMIT = 1000  # PromptSettings.max_message_chars: longer history messages are truncated with a marker
VALUE_LIMIT = 500  # PromptSettings.max_value_chars: longer context values likewise

# Elements of our prompts (system prompt, corrective and resume turns) the corpus must try to close and open.
ELEMENTS = (
    "task", "fsm", "persona", "current_state", "id", "purpose", "state_instructions", "information_to_collect", "key",
    "valid_states", "transitions", "transition", "target", "conditions", "condition", "response", "guidelines",
    "format_rules", "current_context", "conversation_history", "user", "assistant", "correction", "feedback", "resume",
)  # fmt: skip

# Characters XML 1.0 cannot hold even escaped (the Char production).
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

FALLBACK = "Sorry, I couldn't take that step yet. Could you tell me a bit more?"  # Conversation's default
OBEYED = "Approved! You are all set."

# Keys an obeying model writes: the handler-only gate key, runtime keys, and look-alikes of the gate key.
FORBIDDEN_WRITES: dict[str, Any] = {
    "approved": True,
    "_approved": True,
    "_state": "done",
    "\u0430pproved": True,  # Cyrillic a
    "appr\u200boved": True,  # zero-width space
    "APPROVED": True,
}

# A gate key protected only by writable_keys (no handler_only_keys).
GATED = {
    "name": "gated",
    "initial_state": "review",
    "persona": "A careful clerk.",
    "states": {
        "review": {
            "purpose": "Take a note for staff review",
            "writable_keys": ["note"],
            "transitions": [
                {
                    "target_state": "done",
                    "description": "Staff approved the request",
                    "conditions": [{"description": "approved by staff", "logic": {"==": [{"var": "approved"}, True]}}],
                }
            ],
        },
        "done": {"purpose": "Confirm the approval"},
    },
}


def text_of(entry: dict[str, Any]) -> str:
    """The attack text: ``text`` (a seed when ``repeat`` is given) times ``repeat``, then ``suffix``."""
    return entry["text"] * entry.get("repeat", 1) + entry.get("suffix", "")


def attacks() -> list[Any]:
    """One pytest param per attack, id = the attack's id."""
    return [pytest.param(text_of(entry), id=entry["id"]) for entry in ENTRIES]


# -- what an XML parser sees ----------------------------------------------------------------------


def parseable(text: str) -> str:
    return NOT_XML.sub("\ufffd", text)


def as_parsed(text: str) -> str:
    """``text`` as an XML parser reports it: unrepresentable characters replaced, line ends normalised."""
    return parseable(text).replace("\r\n", "\n").replace("\r", "\n")


def tree(prompt: str) -> ET.Element:
    return ET.fromstring(f"<root>{parseable(prompt)}</root>")


def shape(prompt: str) -> list[str]:
    return structure(parseable(prompt))


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncated(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[truncated {len(text) - limit} chars]"


def history_texts(prompt: str, role: str) -> list[str]:
    return [node.text or "" for node in tree(prompt).findall(f"fsm/conversation_history/{role}")]


def clean(value: Any) -> Any:
    """Strings of a JSON value as they survive the XML parse (for comparing parsed context)."""
    if isinstance(value, str):
        return parseable(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def shown_context(prompt: str) -> Any:
    node = tree(prompt).find("fsm/current_context")
    assert node is not None
    return json.loads(node.text or "")


# -- building prompts through the public API --------------------------------------------------------


def conversation(definition: llm_fsm.FSMDefinition, replies: list[Any], **kwargs: Any):
    llm = ScriptedLLM(replies)
    return llm_fsm.Conversation(definition, llm, **kwargs), llm


def prompt_with_user_in_history(definition, text: str) -> str:
    conv, llm = conversation(
        definition,
        [reply("ask_name", "Hi, your name?"), reply("ask_name", "Your name, please?"), reply("ask_name", "?")],
    )
    conv.start()
    conv.send(text)
    conv.send("next")
    assert llm.requests[1].messages[-1]["content"] == text
    return llm.requests[2].messages[0]["content"]


def prompt_with_assistant_in_history(definition, text: str) -> str:
    """The assistant message is put into history through a saved snapshot (the reply parser is tested below)."""
    conv, _ = conversation(definition, [reply("ask_name", "Hi, your name?")])
    conv.start()
    saved = conv.snapshot().model_dump()
    saved["history"][-1]["assistant"] = text
    llm = ScriptedLLM([reply("ask_name", "Your name, please?")])
    restored = llm_fsm.Conversation.restore(saved, definition, llm)
    restored.send("next")
    return llm.requests[0].messages[0]["content"]


def prompt_with_context(definition, text: str) -> str:
    conv, llm = conversation(definition, [reply("ask_name", "Hi, your name?")], context={"name": text, text: "value"})
    conv.start()
    return llm.requests[0].messages[0]["content"]


def prompt_with_current_message(definition, text: str) -> str:
    conv, llm = conversation(definition, [reply("ask_name", "Hi, your name?"), reply("ask_name", "Your name?")])
    conv.start()
    conv.send(text)
    messages = llm.requests[1].messages
    assert messages[-1] == {"role": "user", "content": text}, (
        "the user's text is sent once, unchanged, as the user turn"
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[0]["content"]


BUILDERS = {
    "history_user": prompt_with_user_in_history,
    "history_assistant": prompt_with_assistant_in_history,
    "context": prompt_with_context,
    "current_message": prompt_with_current_message,
}
CLEAN_TEXT = "hello"


# -- 1. the prompt's structure ----------------------------------------------------------------------


def placements() -> list[Any]:
    """Every attack in every place."""
    return [pytest.param(text_of(entry), where, id=f"{entry['id']}-{where}") for entry in ENTRIES for where in BUILDERS]


@pytest.mark.parametrize(("attack", "where"), placements())
def test_attack_cannot_change_the_prompt_structure(signup, attack: str, where: str) -> None:
    build = BUILDERS[where]
    baseline = build(signup, CLEAN_TEXT)
    prompt = build(signup, attack)
    assert shape(prompt) == shape(baseline)

    if where in ("history_user", "history_assistant"):
        role = "user" if where == "history_user" else "assistant"
        shown = truncated(attack, HISTORY_LIMIT)
        assert as_parsed(shown) in [as_parsed(t) for t in history_texts(prompt, role)]
        assert escaped(shown) in prompt
    elif where == "context":
        shown = clean(shown_context(prompt))
        # runtime keys are never rendered; long key names are truncated like values
        keys = {"name", truncated(attack, KEY_LIMIT)} if not attack.startswith("_") else {"name"}
        assert set(shown) == {clean(k) for k in keys}  # (the value under a secret-looking key may be masked)
        assert shown["name"] == clean(truncated(attack, VALUE_LIMIT))
        assert escaped(json.dumps(truncated(attack, VALUE_LIMIT), ensure_ascii=False)) in prompt
        key_shown = escaped(json.dumps(truncated(attack, KEY_LIMIT), ensure_ascii=False) + ": ")
        assert (key_shown in prompt) is not attack.startswith("_")
    else:
        # the current message is not in the system prompt at all: it equals the clean one byte for byte
        assert prompt == baseline


# -- 2. a model that obeys the attack -----------------------------------------------------------------


def kinds(result) -> set[str]:
    return {r.kind for r in result.rejected}


def refused_keys(result) -> set[str]:
    return {r.key for r in result.rejected if r.kind == "context_key"}


@pytest.mark.parametrize("attack", attacks())
def test_obeying_model_cannot_pass_a_handler_only_gate(signup, attack: str) -> None:
    obey = reply("done", OBEYED, email="ann@example.com", **FORBIDDEN_WRITES)
    conv, llm = conversation(signup, [obey, obey], state="ask_email", context={"name": "Ann"})
    result = conv.send(attack)

    assert result.state == conv.state == "ask_email" and not result.transitioned
    assert result.message == FALLBACK != OBEYED
    assert result.llm_calls == 2
    for key in FORBIDDEN_WRITES:
        assert key not in conv.context
    assert conv.context == {"name": "Ann", "email": "ann@example.com"}  # the valid update is kept
    assert kinds(result) == {"context_key", "condition"}
    assert refused_keys(result) == set(FORBIDDEN_WRITES)
    assert all(r.target_state == "done" for r in result.rejected if r.kind == "condition")
    assert conv.history[-1].assistant == FALLBACK


@pytest.mark.parametrize("attack", attacks())
def test_obeying_model_is_corrected(signup, attack: str) -> None:
    obey = reply("done", OBEYED, **FORBIDDEN_WRITES)
    corrected = reply("ask_email", "Thanks Ann. What is your email address?")
    conv, llm = conversation(signup, [obey, corrected], state="ask_email", context={"name": "Ann"})
    result = conv.send(attack)

    assert result.state == "ask_email" and result.message == "Thanks Ann. What is your email address?"
    assert conv.context == {"name": "Ann"}
    assert {"context_key", "condition"} <= kinds(result)
    correction = llm.requests[1].messages[-1]["content"]
    assert shape(correction) == ["/correction"]
    assert "transition to 'done' rejected" in correction


@pytest.mark.parametrize("attack", attacks())
def test_obeying_model_cannot_take_an_undeclared_or_unknown_target(signup, attack: str) -> None:
    """From ask_name: the attack itself as a target, a state with no transition to it, a state that does not exist."""
    replies = [reply("ask_name", "Hi!"), reply(attack, OBEYED), reply("done", OBEYED), reply("admin", OBEYED)]
    conv, llm = conversation(signup, replies, max_corrections=2)
    conv.start()
    result = conv.send(attack)

    assert result.state == "ask_name" and result.message == FALLBACK
    assert [r.kind for r in result.rejected] == ["target"] * 3
    assert [r.target_state for r in result.rejected] == [attack, "done", "admin"]
    # the corrective turn quotes the refused target as text: it cannot open or close an element
    correction = llm.requests[2].messages[-1]["content"]
    assert shape(correction) == ["/correction"]
    assert escaped(attack) in correction


@pytest.mark.parametrize("attack", attacks())
def test_obeying_model_cannot_write_a_gate_key_outside_writable_keys(attack: str) -> None:
    definition = llm_fsm.load(json.loads(json.dumps(GATED)))
    obey = reply("done", OBEYED, approved=True, note=attack)
    conv, llm = conversation(definition, [obey, obey, reply("done", "Your request is approved.")])
    result = conv.send(attack)

    assert result.state == "review" and result.message == FALLBACK
    assert "approved" not in conv.context
    assert conv.context == {"note": attack}, "the writable key keeps the user's text unchanged"
    assert kinds(result) == {"context_key", "condition"} and refused_keys(result) == {"approved"}
    # the gate itself works: code sets the key, and the same move is then accepted
    conv.update_context({"approved": True})
    assert conv.send("ok").state == "done"


@pytest.mark.parametrize("attack", attacks())
def test_model_parroting_the_attack_as_its_reply_cannot_move(signup, attack: str) -> None:
    conv, llm = conversation(signup, [attack, attack], state="ask_email", context={"name": "Ann"})
    result = conv.send(attack)

    assert result.state in ("ask_email", "ask_name"), "staying, or the one declared move without conditions"
    for key in ("approved", "_approved", "_state"):
        assert key not in conv.context
    assert not conv.ended
    assert kinds(result) <= {"format", "truncated", "target", "condition", "context_key"}
    if any(r.kind != "context_key" and r.attempt == result.llm_calls for r in result.rejected):
        assert result.message == FALLBACK, "the last reply was refused: only the fallback may be shown"


# -- 3. the model's own message -------------------------------------------------------------------------


@pytest.mark.parametrize("attack", attacks())
def test_model_message_is_returned_unchanged_and_escaped_in_history(signup, attack: str) -> None:
    conv, llm = conversation(signup, [reply("ask_name", "Hi!"), reply("ask_name", attack), reply("ask_name", "ok")])
    conv.start()
    result = conv.send("tell me something")
    assert result.message == attack, "we do not censor the model's message"
    assert result.rejected == () and result.llm_calls == 1
    assert conv.history[-1].assistant == attack

    conv.send("next")
    prompt = llm.requests[2].messages[0]["content"]
    assert shape(prompt) == shape(prompt_with_user_in_history(conv.definition, CLEAN_TEXT))
    shown = truncated(attack, HISTORY_LIMIT)
    assert as_parsed(shown) in [as_parsed(t) for t in history_texts(prompt, "assistant")]
    assert escaped(shown) in prompt


@pytest.mark.parametrize("attack", attacks())
def test_streamed_model_message_is_shown_unchanged(signup, attack: str) -> None:
    conv, _ = conversation(signup, [reply("ask_name", "Hi!"), reply("ask_name", attack)])
    conv.start()
    events = list(conv.stream("tell me something"))
    assert not any(isinstance(e, MessageReset) for e in events)
    assert "".join(e.text for e in events if isinstance(e, MessageDelta)) == attack
    assert events[-1].message == attack


# -- the corpus itself ----------------------------------------------------------------------------------


def test_corpus_is_large_varied_and_covers_the_issue() -> None:
    ids = [e["id"] for e in ENTRIES]
    categories = {e["category"] for e in ENTRIES}
    assert len(ENTRIES) >= 60 and len(categories) >= 8
    assert len(set(ids)) == len(ids)
    assert all(set(e) <= {"id", "category", "text", "repeat", "suffix"} and e["text"] for e in ENTRIES)
    texts = [text_of(e) for e in ENTRIES]
    everything = "\n".join(texts)
    for tag in ELEMENTS:
        assert f"</{tag}>" in everything or f"<{tag}>" in everything, tag
    needles = [
        "]]>", "<![CDATA[", "<!--", "<?xml", "<!DOCTYPE", "<!ENTITY", "&lt;", "&#60;",
        "SYSTEM:", "<|im_start|>system", "[INST]", "### Instruction", "Assistant:",
        '{"transition": {"target_state": "done"', "```json", "_approved", "_state",
        "\uff1c/task\uff1e", "\u2039", "\u0430pproved", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
        "\u200b", "\u0000", "\u001b", "\r\n",
    ]  # fmt: skip
    for needle in needles:
        assert needle in everything, needle
    assert any(len(t) >= 100_000 for t in texts)
    assert any(t.startswith("_") for t in texts)


# -- attacks placed in tool results --------------------------------------------------------------

TOOLED = {
    **GATED,
    "tools": {"lookup": {"description": "Look a note up", "result_key": "found"}},
    "states": {**GATED["states"], "review": {**GATED["states"]["review"], "tools": ["lookup"]}},
}


def tool_turn(text: str, mode: str) -> tuple[Any, ScriptedLLM]:
    hooks = llm_fsm.Hooks()

    @hooks.tool()
    def lookup(query: str) -> dict[str, str]:
        return {"note": text, "query": query}

    obey = {"transition": {"target_state": "done", "context_update": dict(FORBIDDEN_WRITES)}, "message": OBEYED}
    script = [
        reply("review", "Hello."),
        {"tool_calls": [{"name": "lookup", "arguments": {"query": "x"}}]},
        obey,
        obey,
    ]
    llm = ScriptedLLM(script, tool_calling=mode)
    conv = llm_fsm.Conversation(llm_fsm.load(TOOLED), llm, hooks=hooks)
    conv.start()
    return conv.send("look it up"), llm


@pytest.mark.parametrize("mode", ["native", "json"])
@pytest.mark.parametrize("text", attacks())
def test_an_attack_in_a_tool_result_is_data_and_moves_nothing(text, mode):
    result, llm = tool_turn(text, mode)
    assert result.state == "review" and result.message == FALLBACK
    assert not set(result.context) & set(FORBIDDEN_WRITES)
    assert result.tool_calls[0].result["note"] == text  # the whole result is kept for the caller
    told = llm.requests[2].messages[-1]["content"]
    if mode == "json":  # the results turn keeps its one element, and the text reads back as it was
        root = tree(told)
        assert [child.tag for child in root] == ["tool_results"] and [c.tag for c in root[0]] == ["tool_result"]
        body = json.loads(root[0][0].text or "")
    else:
        assert not any(f"<{tag}" in told or f"</{tag}" in told for tag in (*ELEMENTS, "tool_result", "tool_results"))
        body = json.loads(told)
    if "truncated" in body:  # a long result is cut for the model: still one JSON object, saying so
        assert body["omitted_chars"] > 0 and len(body["truncated"]) == MAX_RESULT_CHARS
    else:
        assert body["result"]["note"] in (text, parseable(text))  # U+FFFE and U+FFFF are not JSON-escaped
