"""What the OpenAI-compatible endpoints read and write: the request body, the transcript and the user's
message taken from it (each bad input a 400 naming its ``param``), the completion and its chunks, the
``llm_fsm`` extension field and headers, and the errors in OpenAI's shape.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from llm_fsm.definition.wording import what
from llm_fsm.llm import Usage
from llm_fsm.server.errors import APIError
from llm_fsm.server.openai_index import Said
from llm_fsm.snapshot import PendingEvent
from llm_fsm.values import clean_text

IGNORED_ROLES = ("system", "developer")  # the definition is the system prompt: a client's own is left out
NOTE_SYSTEM = "system messages are ignored: the definition is the system prompt"
TEXT_PART = '{"type": "text", "text": "..."}'  # the one kind of content part read, as errors show it


class ChatRequest(BaseModel):
    """The part of OpenAI's chat-completions body the server reads; every other field (``temperature``,
    ``max_tokens``, ``tools``...) is accepted and ignored: the definition decides how the model is called."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]]
    # strict: "stream": "yes" is refused, not read as true; null (as some clients send it) is false
    stream: bool | None = Field(False, strict=True)
    n: int | None = Field(None, strict=True)
    metadata: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None


class Conversed(BaseModel):
    """What a chat client cannot show, as the ``llm_fsm`` field of a completion and of its last chunk."""

    conversation_id: str
    state: str
    status: str
    ended: bool
    paused: bool
    question: str | None = Field(None, description="The pause's question (the message asks it too).")
    branched_from: str | None = Field(None, description="The conversation this one was branched from, if any.")
    notes: list[str] = Field(default_factory=list)


def invalid(message: str, param: str | None, status: int = 400, code: str = "invalid_request") -> APIError:
    return APIError(status, code, message, param=param)


def read_messages(request: ChatRequest) -> tuple[list[Said], str, list[str]]:
    """The transcript before the last user message, that message's text, and notes on what was left out.
    400 for an empty list, a last message not the user's, an unknown or missing role, or content that is not
    text (each error names the field at fault and what is missing or wrong there)."""
    if request.n not in (None, 1):
        raise invalid("n must be 1: a conversation gives one reply per turn", "n")
    if not request.messages:
        raise invalid("messages must hold at least the user's message", "messages")
    said: list[Said] = []
    notes: list[str] = []
    for number, message in enumerate(request.messages):
        role = message.get("role")
        if role in IGNORED_ROLES:
            notes[:] = [NOTE_SYSTEM]
            continue
        if role not in ("user", "assistant"):
            raise invalid(
                f"messages[{number}].role {_is(message, 'role')}: it must be system, developer, user or assistant",
                f"messages[{number}].role",
            )
        # a lone surrogate (JSON allows "\ud800", UTF-8 does not) is replaced as the native routes' texts are:
        # the text is hashed and stored, and neither may fail after the turn ran
        said.append((str(role), clean_text(_text(message, number))))
    if not said or said[-1][0] != "user":
        raise invalid("the last message must be the user's (the one the conversation answers)", "messages")
    return said[:-1], said[-1][1], notes


def _is(found: dict[str, Any], key: str) -> str:
    """What ``found[key]`` is, for an error: ``is missing``, ``is 'tool'``, ``is a number (1)``."""
    if key not in found:
        return "is missing"
    value = found[key]
    return f"is {value!r}" if isinstance(value, str) else f"is {what(value)}"


def _text(message: dict[str, Any], number: int) -> str:
    """A message's text: its content, a string or a list of text parts (joined by newlines). 400 naming what
    is missing or wrong: the content, a part, its ``type`` or its ``text``."""
    where, content = f"messages[{number}].content", message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where} {_is(message, 'content')}: it must be text or a list of text parts", where)
    if not content:
        raise invalid(f"{where} is an empty list: it must hold at least one text part ({TEXT_PART})", where)
    return "\n".join(_part_text(part, f"{where}[{index}]") for index, part in enumerate(content))


def _part_text(part: object, where: str) -> str:
    """The text of one part of a message's content: ``{"type": "text", "text": "..."}``, nothing else."""
    if not isinstance(part, dict):
        raise invalid(f"{where} is {what(part)}, not a text part ({TEXT_PART})", where)
    if part.get("type") != "text":  # an image, audio or file part among them
        param = f"{where}.type" if "type" not in part else where
        raise invalid(f"{where}.type {_is(part, 'type')}: only text parts are read ({TEXT_PART})", param)
    if "text" not in part:
        raise invalid(f"{where} is a text part without its 'text' field: {TEXT_PART}", f"{where}.text")
    if not isinstance(part["text"], str):
        raise invalid(f"{where}.text {_is(part, 'text')}: it must be a string", f"{where}.text")
    return part["text"]


def question_of(pending: PendingEvent | None, approval: str) -> str | None:
    """What a pause tells the person: for a tool call waiting for approval, the definition's ``approval`` text
    (someone else decides, through the native resume route: the chat user cannot approve it); else the
    pause's ``question`` (else its reason)."""
    if pending is None:
        return None
    if pending.kind == "tool_approval":
        return approval
    question = pending.payload.get("question")
    return question if isinstance(question, str) and question.strip() else pending.reason


def answer_of(pending: PendingEvent, text: str, conversation_id: str) -> dict[str, Any]:
    """The resume result a person's message gives a pause whose payload names an ``answer_key`` (the message
    is that key's value). Any other pause, a tool call's approval among them, is resumed through
    ``POST /conversations/{id}/resume`` (409 here): a tool's approval is someone else's decision."""
    if pending.kind == "tool_approval":
        if isinstance(pending.tool_call, dict) and pending.tool_call.get("approval") is not None:
            return {"approved": True}  # decided (natively) before a process stopped: it goes on with that decision
        raise paused(
            conversation_id,
            f"a call of the tool {pending.payload.get('tool')!r} waits for a person's approval, which a chat "
            "message cannot give",
        )
    key = pending.payload.get("answer_key")
    if isinstance(key, str) and key:
        return {key: text}
    raise paused(conversation_id, f"it is paused ({pending.reason}) and this pause takes no chat message")


def paused(conversation_id: str, why: str) -> APIError:
    return APIError(
        409,
        "conversation_paused",
        f"conversation {conversation_id}: {why}: resume it with POST /conversations/{conversation_id}/resume",
        param="messages",
    )


def with_question(message: str, question: str | None) -> str:
    """The message a chat client shows: the turn's, then the pause's question when the message does not ask it."""
    if question is None or question in message:
        return message
    return f"{message}\n\n{question}" if message else question


def usage_of(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
    }


@dataclass(frozen=True)
class Head:
    """What a completion and each chunk of its stream carry: its ``id``, when it was ``created`` (Unix seconds)
    and the ``model``. Fixed once per turn, and kept with its answer: a replay is the same completion."""

    id: str
    created: int
    model: str

    @classmethod
    def new(cls, model: str) -> Head:
        return cls("chatcmpl-" + secrets.token_hex(12), int(time.time()), model)

    @classmethod
    def kept(cls, answer: dict[str, Any], model: str) -> Head:
        """The head kept with ``answer`` (a new one for an answer kept before heads were: it has none)."""
        ident, created = answer.get("id"), answer.get("created")
        if isinstance(ident, str) and isinstance(created, int):
            return cls(ident, created, model)
        return cls.new(model)


def completion(head: Head, content: str, usage: Usage | None, extension: Conversed) -> dict[str, Any]:
    return {
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage_of(usage),
        "llm_fsm": extension.model_dump(),
    }


def chunk(head: Head, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    """One ``data:`` line of a stream (an empty ``choices`` with ``usage``: the usage chunk)."""
    choices = [] if "usage" in extra else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    body = {
        "id": head.id,
        "object": "chat.completion.chunk",
        "created": head.created,
        "model": head.model,
        "choices": choices,
        **extra,
    }
    return f"data: {json.dumps(body, ensure_ascii=False, default=str)}\n\n".encode()


DONE_LINE = b"data: [DONE]\n\n"


OPENAI_HEADERS = (
    "X-LLM-FSM-Conversation-Id",
    "X-LLM-FSM-State",
    "X-LLM-FSM-Status",
    "X-LLM-FSM-Ended",
    "X-LLM-FSM-Paused",
)


def headers_of(extension: Conversed, *, final: bool = True) -> dict[str, str]:
    """The extension as headers; a stream's are sent before its turn runs: the conversation's id only."""
    found = {"X-LLM-FSM-Conversation-Id": extension.conversation_id}
    if final:
        found |= {
            "X-LLM-FSM-State": extension.state,
            "X-LLM-FSM-Status": extension.status,
            "X-LLM-FSM-Ended": str(extension.ended).lower(),
            "X-LLM-FSM-Paused": str(extension.paused).lower(),
        }
    return found


def model_list(names: list[str]) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(name) for name in names]}


def model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "llm-fsm"}
