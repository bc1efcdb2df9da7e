"""The reply contract: what the model must answer and how we read it (the schema asked for is
:mod:`llm_fsm.definition.reply_schema`).

The model answers ``{"transition": {"target_state", "context_update"}, "message", "reasoning"}``.
``transition`` comes before ``message`` so that a streaming reader can check the move before it
shows any text. Parsing is tolerant of how models wrap a reply (code fences, prose around the JSON,
``<think>`` blocks) and of small syntax slips (quoting and commas, repaired with json-repair), but
not of a different shape: a reply without its ``transition`` object, with ``transition: null``, or
with the transition's fields outside it is refused, so a message is never taken for a "stay" it
did not ask for. So are a reply wrapped in a list, one that gives a key twice (which of the two
counts would be a guess), and a message of only whitespace or invisible characters (the user would
read nothing). Nor is a reply that stops short: repair never invents the end of a reply.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llm_fsm.errors import ReplyFormatError, ReplyTruncated
from llm_fsm.values import blank, clean_text


class TransitionDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    target_state: str
    context_update: dict[str, Any] = Field(default_factory=dict)
    memory_update: dict[str, Any] = Field(default_factory=dict)  # working-memory slots (llm_fsm.memory)

    @field_validator("context_update", "memory_update", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class Reply(BaseModel):
    """One parsed model reply."""

    model_config = ConfigDict(frozen=True)

    transition: TransitionDecision
    message: str = Field(min_length=1)
    reasoning: str | None = None

    @field_validator("message")
    @classmethod
    def _visible(cls, value: str) -> str:
        if blank(value):  # "   \n" or a zero-width space passes min_length, but the user would read nothing
            what = "whitespace" if not value.strip() else "invisible characters"
            raise ValueError(f"the message is only {what}: write the text the user reads")
        return value

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning_as_text(cls, value: Any) -> Any:
        return value if value is None or isinstance(value, str) else json.dumps(value)


_THINK = re.compile(r"\s*<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)


def strip_thinking(text: str) -> str:
    """``text`` without the reasoning blocks a model may put BEFORE its answer (``<think>...</think>``).

    Only leading blocks go: the same words inside the JSON (in the message, say) are the model's text.
    """
    while match := _THINK.match(text):
        text = text[match.end() :]
    return text


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


MAX_NESTING = 32  # levels of objects and lists a reply may hold; deeper is refused, not recursed into


def parse_reply(text: str) -> Reply:
    """Extract and validate the reply in ``text``; raise :class:`ReplyFormatError` if there is none
    (:class:`ReplyTruncated` if it stops before its end)."""
    data, repaired = _extract_object(text, exact=True)
    # before the recursive walks below (the text cleaning, pydantic): deep nesting is refused in words,
    # not met as a RecursionError
    # a reply read as it is holds at most as many objects and lists as its text has brackets: only one with
    # more can nest too deeply, so the walk is skipped for the usual short reply
    brackets = text.count("{") + text.count("[")
    if (repaired or brackets > MAX_NESTING) and _depth(data) > MAX_NESTING:
        raise ReplyFormatError(f"the reply nests objects or lists more than {MAX_NESTING} levels deep")
    if problem := _misshapen(data):
        raise ReplyFormatError(problem)
    if repaired or not text.isascii() or "\\u" in text:  # the only ways a lone surrogate or NaN gets in
        data = _as_text_and_finite_numbers(data)
    try:
        return Reply.model_validate(data)
    except ValidationError as exc:
        raise ReplyFormatError(_describe(exc)) from None


def reply_object(text: str, *, exact: bool = False) -> dict[str, Any]:
    """The JSON object in ``text`` (as :func:`parse_reply` finds it), unchecked; ReplyFormatError if none.

    ``exact``: also refuse, as :func:`parse_reply` does, an object wrapped in a list or one that gives
    a key twice (without it, the last of the two counts: enough to read a summary or scrub a trace).
    """
    return _extract_object(text, exact=exact)[0]


def partial_reply(data: dict[str, Any]) -> Reply | None:
    """The reply a streamed object amounts to once its ``transition`` is whole, to check the move
    before any text is shown: the checks of :func:`parse_reply` on what has arrived; None if they fail."""
    try:
        if _depth(data) > MAX_NESTING or _misshapen(data):
            return None
        transition = _as_text_and_finite_numbers(data.get("transition"))
        # a stand-in message: the real one has not streamed yet, and only the move is checked here
        return Reply.model_validate({"transition": transition, "message": "-"})
    except (ValidationError, ReplyFormatError):
        return None


_SHAPE = (
    'answer with {"transition": {"target_state": "<state>", "context_update": {...}}, "message": "..."}'
    " (to stay, give the current state as target_state)"
)


def _misshapen(data: dict[str, Any]) -> str | None:
    """What is wrong with the reply's shape, in words the model can act on; None if it is right."""
    misplaced = [k for k in ("target_state", "context_update", "memory_update") if k in data]
    if misplaced:
        where = 'inside "transition", not' if "transition" in data else 'inside a "transition" object, not'
        return f"{', '.join(misplaced)} belong{'s' if len(misplaced) == 1 else ''} {where} at the top level: {_SHAPE}"
    if "tool_calls" in data:
        return 'a reply either asks for tools ({"tool_calls": [...]} alone) or answers, not both: ' + _SHAPE
    if "transition" not in data:
        return f'the reply has no "transition": {_SHAPE}'
    if data["transition"] is None:
        return f'"transition" is null: {_SHAPE}'
    if isinstance(data["transition"], dict) and "message" in data["transition"]:
        return f'"message" belongs at the top level, not inside "transition": {_SHAPE}'
    return None


def _extract_object(text: str, *, exact: bool = False) -> tuple[dict[str, Any], bool]:
    """The reply's object, and whether json-repair produced it (its parser lets NaN through).

    ``exact``: a list around the object, or a key given twice, is refused rather than read past.
    """
    text = strip_thinking(text or "").strip()
    if not text:
        raise ReplyFormatError("the reply was empty; answer with one JSON object")
    decoder = _EXACT_DECODER if exact else _DECODER
    if text.startswith("{") and isinstance(data := _strict(text, decoder), dict) and data:
        return data, False  # the common case, the whole reply one exact object: nothing around it to check
    if exact:
        _refuse_several(text)
    candidates = _candidates(text)
    for candidate in candidates:  # exact JSON anywhere beats a repair
        data = _strict(candidate, decoder)
        if isinstance(data, dict) and data:
            return data, False
    if cut := _cut_short(text):
        raise ReplyTruncated(f"the reply stops {cut}, before its JSON ends: answer again with the whole JSON object")
    return _repaired_object(candidates, exact=exact), True


def _refuse_several(text: str) -> None:
    """Raises when the reply is a list of objects or holds more than one: the search for an object inside
    would find one of them and take it, so the shape is refused instead (exact mode only)."""
    if wrapped_in_list(text):
        raise ReplyFormatError(f"the reply is a JSON list; answer with one JSON object, not a list of them: {_SHAPE}")
    if (count := _objects(text)) > 1:  # the repair (or the first fence) would take one of them
        raise ReplyFormatError(f"the reply holds {count} JSON objects; answer with exactly one: {_SHAPE}")


def _repaired_object(candidates: list[str], *, exact: bool) -> dict[str, Any]:
    """The first candidate json-repair reads as a non-empty object; in exact mode a key given twice is
    refused (json-repair keeps the last silently)."""
    for candidate in candidates:
        data = _repaired(candidate)
        if isinstance(data, dict) and data:
            if exact and (twice := repeated_key(candidate)):
                raise ReplyFormatError(_twice(*twice))
            return data
    raise ReplyFormatError("the reply is not a JSON object; answer with exactly one JSON object")


def _objects(text: str) -> int:
    """How many JSON objects the reply holds side by side (``{...} {...}``, or two fenced blocks): each
    object that starts like JSON is followed to its end, and counts if it reads as a non-empty object."""
    spans, position = [], 0
    while match := _OBJECT_START.search(text, position):
        end, cut = _object_end(text, match.start())
        if cut:
            break
        spans.append(text[match.start() : end])
        position = end
    if len(spans) < 2:
        return len(spans)
    return sum(1 for span in spans if isinstance(data := _strict(span, _DECODER) or _repaired(span), dict) and data)


def wrapped_in_list(text: str) -> bool:
    """Whether the reply's first object opens inside a list (``[{...}]``, fenced or not)."""
    start = text.find("{")
    return start > 0 and text[:start].rstrip().endswith("[")


def _cut_short(text: str) -> str | None:
    """Where the reply's JSON stops short (inside a string, or with an object left open), or None.

    Repair may fix quoting and commas; closing what was never closed would invent the reply's end.
    Each object that starts like JSON (``{"``, ``{'``, ``{}``) is followed to its end; prose braces
    such as ``{guests}`` are not objects.
    """
    position = 0
    while match := _OBJECT_START.search(text, position):
        end, cut = _object_end(text, match.start())
        if cut:
            return cut
        position = end
    return None


_OBJECT_START = re.compile(r"\{\s*[\"'}]")


def _object_end(text: str, start: int) -> tuple[int, str | None]:
    """Where the object at ``start`` closes, or how it is cut off (strings in double or single quotes)."""
    depth, quote, escaped = 0, "", False
    for index in range(start, len(text)):
        char = text[index]
        if quote:
            escaped, quote = (False, quote) if escaped else (char == "\\", "" if char == quote else quote)
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1, None
    return len(text), "in the middle of a string" if quote else "with an object or list left open"


def _candidates(text: str) -> list[str]:
    found = [m.group(1).strip() for m in _FENCE.finditer(text)]
    end = text.rfind("}") + 1
    # from the first brace, and from the first that opens like JSON (prose such as "{guests}" may come first)
    json_like = _OBJECT_START.search(text)
    # the two starts are often the same brace: dict.fromkeys tries each once, in order
    for start in dict.fromkeys([text.find("{"), json_like.start() if json_like else -1]):
        if start >= 0:
            found.append(text[start:])
            found.append(text[start:end])
    found.append(text)
    return found


def _strict(candidate: str, decoder: json.JSONDecoder) -> Any:
    try:
        return decoder.decode(candidate)
    except ReplyFormatError:
        raise
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        return None


def _not_a_number(name: str) -> float:
    raise ReplyFormatError(f"the reply holds {name}, which is not a JSON number: write a number or null")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999: JSON allows the text, but no store can keep the number
        raise ReplyFormatError(f"the reply holds {text}, a number too large to keep: write a smaller one or null")
    return number


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; ReplyFormatError if a key comes twice (json keeps the last silently)."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ReplyFormatError(_twice(key, list(data)))
            seen.add(key)
    return data


def _twice(key: str, siblings: Sequence[str]) -> str:
    if {"transition", "message"} & set(siblings):
        where = "at the top level"
    elif {"target_state", "context_update"} & set(siblings):
        where = 'inside "transition"'
    else:
        where = "in one object"
    return f'the reply gives the key "{key}" twice {where}; give each key once (which one counts would be a guess)'


# decoders made once: json.loads with hooks would build a new one per reply
_DECODER = json.JSONDecoder(parse_constant=_not_a_number, parse_float=_finite)
_EXACT_DECODER = json.JSONDecoder(parse_constant=_not_a_number, parse_float=_finite, object_pairs_hook=_once_each)


def repeated_key(text: str) -> tuple[str, list[str]] | None:
    """The first key that an object in ``text`` (JSON, or the loose JSON json-repair reads) gives twice,
    with that object's keys; None if none does. A scan, not a parse: strings in either quote, and
    bare words, are keys when a ``:`` follows them inside an object."""
    frames: list[list[str] | None] = []  # per open bracket: an object's keys so far, or None for a list
    token, index = None, 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            end = _string_end(text, index)
            token, index = text[index + 1 : end - 1], end
            continue
        if char.isalnum() or char in "_$-":
            end = index
            while end < len(text) and (text[end].isalnum() or text[end] in "_$-"):
                end += 1
            token, index = text[index:end], end
            continue
        if char == ":" and frames and frames[-1] is not None and token is not None:
            keys = frames[-1]
            if token in keys:
                return token, keys
            keys.append(token)
        elif char in "{[":
            frames.append([] if char == "{" else None)
        elif char in "}]" and frames:
            frames.pop()
        # a key is the token just before its ':': whitespace between them keeps it, anything else drops it
        token = None if not char.isspace() else token
        index += 1
    return None


def _string_end(text: str, start: int) -> int:
    """Just past the string that opens at ``start`` (or the end of ``text``), escapes skipped."""
    quote, index = text[start], start + 1
    while index < len(text) and text[index] != quote:
        index += 2 if text[index] == "\\" else 1
    return min(index + 1, len(text) + 1)


def _repaired(candidate: str) -> Any:
    from json_repair import repair_json  # imported on first use: most replies never need it

    try:
        return repair_json(candidate, return_objects=True, skip_json_loads=True)
    except (Exception, RecursionError):  # json-repair gives up on some inputs by raising: "no object here"
        return None


def _as_text_and_finite_numbers(value: Any) -> Any:
    """``value`` with lone surrogates in its text replaced (no store could write them); NaN and the
    infinities refused (JSON has none, and a store would turn them into null)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ReplyFormatError(f"the reply holds {value}, which is not a JSON number: write a number or null")
    if isinstance(value, dict):
        return {clean_text(k): _as_text_and_finite_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_text_and_finite_numbers(v) for v in value]
    return value


def _depth(value: Any) -> int:
    """How deeply objects and lists nest in ``value`` (iteratively: no recursion on hostile input)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        # only containers are queued (a reply is mostly strings): exact types first, as JSON gives them
        if type(item) is dict or type(item) is list or isinstance(item, (dict, list)):
            if level > deepest:
                deepest = level
            if level > MAX_NESTING:
                return level
            children = item.values() if isinstance(item, dict) else item
            todo.extend([(child, level + 1) for child in children if isinstance(child, (dict, list))])
    return deepest


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "reply"
        # our own validators' words as written, without pydantic's "Value error, " in front
        text = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"].lower()
        parts.append(f"{where}: {text}")
    return "the reply does not follow the format: " + "; ".join(parts)
