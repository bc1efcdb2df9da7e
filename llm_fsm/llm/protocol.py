"""What a conversation asks of a model and what it gets back: :class:`LLMRequest`, :class:`LLMResponse`
and :class:`Usage`, and the :class:`LLMClient` protocol any model (litellm's, a test double) implements."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from llm_fsm.records import quick_init

Message = dict[str, Any]  # role and content; an assistant's may carry "tool_calls", a tool's "tool_call_id"


@quick_init  # built on every turn (llm_fsm.records)
@dataclass(frozen=True)
class Usage:
    """Tokens (and cost in USD when litellm knows the model's price) of one or more calls.
    ``cached_tokens``: the prompt tokens the provider served from its prompt cache (part of
    ``prompt_tokens``, billed cheaper; never more than it: see :mod:`llm_fsm.llm.responses`);
    ``cache_write_tokens``: those it wrote to it (Anthropic's ``cache_creation_input_tokens``, billed
    dearer once)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost, other.cost) if c is not None]
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            sum(costs) if costs else None,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


class PromptText(str):
    """A system prompt that knows where its cache-stable parts end: ``breaks`` are character offsets (the
    definition-wide part, then the state's part with its tools). A client whose provider wants the cached
    prefix marked (Anthropic, Gemini) splits the text there; to everything else it is the plain text."""

    breaks: tuple[int, ...]

    def __new__(cls, text: str, breaks: tuple[int, ...] = ()) -> PromptText:
        made = super().__new__(cls, text)
        made.breaks = breaks
        return made

    def __getnewargs__(self) -> tuple[str, tuple[int, ...]]:  # type: ignore[override]  # copy and pickle keep the breaks
        return str(self), self.breaks


@quick_init  # llm_fsm.records
@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for."""

    id: str  # the provider's call id ("call_<n>", n its position in the reply, when the provider gave none)
    name: str
    # the raw JSON text of the arguments as the model wrote them (may be invalid JSON: the runtime reports that)
    arguments: str


@quick_init  # built on every turn (llm_fsm.records)
@dataclass(frozen=True)
class LLMRequest:
    """One model call. ``schema``/``strict_schema`` describe a valid reply (see ``definition.reply_schema``).

    ``kind`` (``reply``, ``judge``, or ``summary``: see ``llm_fsm.memory.summaries``), ``state`` and ``context``
    describe the call for test doubles and recorders (the simulated model reads them); they are never
    sent to a provider. ``max_tokens`` bounds this call's completion (never above the client's own
    ``max_tokens``). ``longer``: the previous reply was cut off at the token limit, so a client with a
    ``max_tokens`` budget raises it for this call, to :func:`longer_budget` (at most double, and no more
    than the reply schema it holds the model to can need).
    ``tools``: OpenAI function-tool specs (``{"type": "function", "function": {"name", "description",
    "parameters"}}``) and ``tool_choice`` (``"auto"``, ``"none"``, ``"required"``), sent to the provider
    only when the client calls tools natively (see ``LiteLLMClient.tool_mode``). ``back_to``: where a
    ``"$return"`` move of this state goes (the state the conversation came from), for test doubles too.
    ``definition``: the name of the definition ``state`` belongs to (a sub-conversation's, inside one).
    """

    messages: list[Message]
    schema: dict[str, Any] | None = None
    strict_schema: dict[str, Any] | None = None
    kind: Literal["reply", "judge", "summary"] = "reply"
    state: str | None = None
    context: dict[str, Any] | None = field(default=None, repr=False)
    longer: bool = False
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | None = None
    definition: str | None = None
    max_tokens: int | None = None  # a bound of this call's own (a summary's), under the client's
    back_to: str | None = None


@quick_init  # built on every turn (llm_fsm.records)
@dataclass(frozen=True)
class LLMResponse:
    """The model's text (``""`` when it only called tools) and the tool calls it asked for, in order.

    ``finish_reason`` as the provider gave it: ``length`` means the text (or a tool call's arguments)
    was cut off; ``tool_calls`` that the model stopped to call tools. A provider may say ``stop`` with
    tool calls: a streamed reply reports that as ``tool_calls``, as litellm already does for the others.
    """

    text: str
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    finish_reason: str | None = None
    tool_calls: tuple[ToolCallRequest, ...] = ()


@runtime_checkable
class LLMClient(Protocol):
    """What a conversation needs from a model: one completion, sync or async."""

    def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def acomplete(self, request: LLMRequest) -> LLMResponse: ...


@runtime_checkable
class StreamingLLMClient(LLMClient, Protocol):
    """A client that can also stream: text deltas, then the whole response."""

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]: ...

    def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]: ...


# -- the budget of a retry after a reply cut at the token limit ---------------------------------------------

NUMBER_CHARS = 40  # a number without bounds: a grammar bounds its digits (llama.cpp: 16 each side of the point)


def longer_budget(budget: int, schema: dict[str, Any] | None) -> int:
    """The token budget of the call after a reply cut at ``budget`` tokens: double, but no more than the
    longest reply ``schema`` allows, counted a token per character (:func:`max_reply_chars`), and never
    less than ``budget``.

    ``schema``: the one the model is held to (a grammar, a strict ``json_schema``), else None. Without one,
    or when it does not bound the reply (free text with no ``maxLength``: the plain reply schema's message
    and reasoning), the budget doubles, from the client's own each time: never 4x. A guided schema bounds
    it (the message 240 characters, each value 80), so a small model that loops on a local server writes at
    most what a whole reply can need before it is cut again, not twice the budget (each token of which a
    slow local server takes its time over: a 120 s timeout).

    A token per character: an ASCII character (JSON's punctuation, keys, numbers) is never more than one
    token, and text averages fewer (SmolLM2's tokenizer: English 3.9 characters a token, French 3.2,
    German 3.0, Spanish 2.7). Text in Chinese takes about two tokens a character there: such a reply can
    need up to twice the estimate, and the budget then stays at most doubled, as before."""
    chars = max_reply_chars(schema) if schema is not None else None
    return 2 * budget if chars is None else min(2 * budget, max(budget, chars))


def max_reply_chars(schema: dict[str, Any]) -> int | None:
    """The most characters of JSON that ``schema`` allows (as ``json.dumps`` writes it, a space after each
    comma and colon), or None when it has no bound: a string without ``maxLength`` or ``enum``, an open
    object, an array without ``maxItems``, a schema this does not read."""
    if "const" in schema:
        return len(json.dumps(schema["const"]))
    if "enum" in schema:
        return max((len(json.dumps(value)) for value in schema["enum"]), default=0)
    branches = schema.get("anyOf", schema.get("oneOf"))
    if branches is not None:
        sizes = _bounded([max_reply_chars(branch) for branch in branches])
        return None if sizes is None else max(sizes, default=0)
    types = schema.get("type")
    if types is None:
        return None
    sizes = _bounded([_max_chars_of_type(kind, schema) for kind in (types if isinstance(types, list) else [types])])
    return None if sizes is None else max(sizes, default=0)


def _bounded(sizes: list[int | None]) -> list[int] | None:
    """``sizes``, or None when one of them has no bound."""
    known = [size for size in sizes if size is not None]
    return known if len(known) == len(sizes) else None


def _max_chars_of_type(kind: str, schema: dict[str, Any]) -> int | None:
    if kind in ("null", "boolean"):
        return 5
    if kind == "string":
        limit = schema.get("maxLength")
        return limit + 2 if isinstance(limit, int) else None
    if kind in ("integer", "number"):
        bounds = [schema.get(k) for k in ("minimum", "maximum")]
        if kind == "integer" and all(isinstance(b, int) for b in bounds):
            return max(len(str(b)) for b in bounds)
        return NUMBER_CHARS
    if kind == "object":
        properties: dict[str, Any] = schema.get("properties", {})
        if schema.get("additionalProperties", True) is not False or schema.get("patternProperties"):
            return None
        sizes = _bounded([max_reply_chars(value) for value in properties.values()])
        if sizes is None:
            return None
        # {"key": value, ...}: the braces, each member's key, colon and space, and value, a comma and space between
        members = sum(len(json.dumps(key)) + 2 + size for key, size in zip(properties, sizes, strict=True))
        return 2 + members + 2 * max(0, len(sizes) - 1)
    if kind == "array":
        most, items = schema.get("maxItems"), schema.get("items")
        size = max_reply_chars(items) if isinstance(items, dict) else None
        return None if not isinstance(most, int) or size is None else 2 + most * size + 2 * max(0, most - 1)
    return None


ResponseFormat = Literal["auto", "json_schema", "json_object", "none"]
ToolCalling = Literal["auto", "native", "json"]
