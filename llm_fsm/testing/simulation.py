"""A model that needs no model: valid replies that walk the definition's graph.

``SimulatedLLM(definition)`` answers each call with a reply the runtime accepts: it picks a
transition the model may take (one whose conditions a model-writable update can satisfy, with
values that pass the ``context_schema``), fills the keys it needs, and otherwise stays and fills
the state's keys to collect. With ``path=[...]`` it follows those states in order; with ``seed`` it
chooses among the possible moves reproducibly. Judge calls pass.

In a state that lists tools, it first calls each of them once (all in one round, with arguments
made from the tool's parameters schema), then replies: as native function calls when the request
carries tool specs, else in the JSON form ``{"tool_calls": [...]}``. A tool it already called in
this turn (the request's messages show it) is not called again, so a turn takes at most one round.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.definition.condition_values import condition_keys
from llm_fsm.definition.models import FSMDefinition, Transition
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.llm import LLMRequest, LLMResponse, Message, ToolCallRequest, Usage
from llm_fsm.testing.scripted import folded_summary
from llm_fsm.tools.calling import tool_request
from llm_fsm.turn.engine import check_values
from llm_fsm.turn.prompt import OPENING_REQUEST


class SimulatedLLM:
    """Valid replies along the graph (``path``: the states to visit, in order).

    ``replies`` holds every answer it gave, tool requests (``{"tool_calls": [...]}``) included.
    ``tool_calling`` is how it takes tools (what a conversation asks through :meth:`tool_mode`).
    ``keep``: hold only the last ``keep`` requests and replies (a long-running ``serve --model simulated``
    would otherwise hold every one it was sent).
    """

    def __init__(
        self,
        definition: FSMDefinition,
        path: Sequence[str] | None = None,
        seed: int = 0,
        *,
        tool_calling: Literal["native", "json"] = "native",
        keep: int | None = None,
    ) -> None:
        self.definition = definition
        self.keep = keep
        self.path = list(path or [])
        self.random = random.Random(seed)
        self.tool_calling = tool_calling
        self.prompt_order: Literal["recency", "cache"] = "recency"  # what a conversation's prompts are made in
        self.requests: list[LLMRequest] = []
        self.replies: list[dict[str, Any]] = []
        self.calls = 0  # requests answered: numbers tool call ids, however few requests are kept
        self.inners: dict[str, SimulatedLLM] = {}

    def _forget(self) -> None:
        if self.keep is not None and len(self.requests) > 2 * self.keep:  # trimmed now and then, not per call
            del self.requests[: -self.keep], self.replies[: -self.keep]

    def tool_mode(self) -> Literal["native", "json"]:
        return self.tool_calling

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        self._forget()
        inner = self.inner(request)
        if inner is not None:  # a sub-conversation talks: answer as a model of its definition would
            response = inner.complete(request)
            self.requests.append(request)
            self.replies.append(inner.replies[-1])
            return response
        self.requests.append(request)
        if request.kind == "judge":  # recorded too: a test file written from the walk scripts it in order
            verdict = {"pass": True, "reason": "simulated"}
            self.replies.append(verdict)
            return _response(verdict)
        if request.kind == "summary":  # the user's words, folded: enough for a prompt to carry them on
            return _response(folded_summary(request))
        state = request.state or self.definition.initial_state
        calls = self.tool_calls(state, request)
        if calls:
            self.replies.append({"tool_calls": calls})
            return _tool_response(calls, self.calls, native=bool(request.tools))
        reply = self.reply(state, dict(request.context or {}), request)
        self.replies.append(reply)
        return _response(reply)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)

    def inner(self, request: LLMRequest) -> SimulatedLLM | None:
        """The simulated model of the sub-definition ``request`` is for (None: it is for ours). It walks no
        path and shares our random numbers."""
        if request.kind != "reply" or request.definition in (None, self.definition.name):
            return None
        found = _sub_definition(self.definition, request.definition)
        if found is None:
            return None
        if request.definition not in self.inners:
            model = SimulatedLLM(found, tool_calling=self.tool_calling, keep=self.keep)
            model.random = self.random
            self.inners[request.definition] = model
        return self.inners[request.definition]

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        response = self.complete(request)
        if response.text:
            yield response.text
        yield response

    async def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        for item in self.stream_complete(request):
            yield item

    # -- calling tools --------------------------------------------------------------------------

    def tool_calls(self, state: str, request: LLMRequest) -> list[dict[str, Any]]:
        """A call to each tool of ``state`` not called yet in this turn (none once all were)."""
        listed = self.definition.states[state].tools
        if not listed or self.definition.states[state].tool_rounds(self.definition) == 0:
            return []
        schemas = self.parameters(listed, request)
        called = _called(request.messages)
        return [{"name": name, "arguments": arguments_for(schemas[name])} for name in schemas if name not in called]

    def parameters(self, listed: Sequence[str], request: LLMRequest) -> dict[str, dict[str, Any]]:
        """The parameters schema of each tool offered: from the request's tool specs (native), else from
        the prompt's ``<parameters>`` (the JSON form), else from the definition."""
        if request.tools:
            functions = [spec.get("function", {}) for spec in request.tools]
            return {f["name"]: f.get("parameters") or {} for f in functions if f.get("name") in listed}
        prompted = _prompt_parameters(request.messages)
        declared = {name: tool.parameters for name, tool in self.definition.tools.items() if tool.parameters}
        return {name: prompted.get(name) or declared.get(name) or {} for name in listed}

    # -- choosing a reply -----------------------------------------------------------------------

    def reply(self, state: str, context: dict[str, Any], request: LLMRequest) -> dict[str, Any]:
        users = [m for m in request.messages if m.get("role") == "user"]
        opening = bool(users) and users[0].get("content") == OPENING_REQUEST
        moves = [] if opening else self.moves(state, context, request.back_to)
        wanted = self.next_in_path(state)
        if wanted is not None:
            moves = [m for m in moves if m[0] == wanted]
        elif moves and self.path:
            moves = []  # the path is done (or we are off it): stay
        if moves:
            target, update = self.random.choice(moves)
        else:
            target, update = state, self.fill(state, context)
        spoken = self.definition.states[target]
        text = spoken.purpose or spoken.description or target
        return {
            "transition": {"target_state": target, "context_update": update},
            "message": f"[{target}] {text}",
            "reasoning": "simulated",
        }

    def next_in_path(self, state: str) -> str | None:
        """The state after ``state`` on the path (None: no path, or the path says stay)."""
        if state in self.path:
            index = self.path.index(state)
            self.path = self.path[index:]
            return self.path[1] if len(self.path) > 1 else None
        return None

    def moves(
        self, state: str, context: dict[str, Any], back_to: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Every (target, update) the model could propose and the runtime would accept: the state's own
        moves and the global ones, a ``"$return"`` one going to ``back_to`` (the request's)."""
        moves = []
        for transition in self.definition.moves(state, back_to):
            if transition.target_state == state:
                continue
            update = self.satisfy(state, transition, context)
            if update is not None:
                moves.append((transition.target_state, update))
        return moves

    def satisfy(self, state: str, transition: Transition, context: dict[str, Any]) -> dict[str, Any] | None:
        """A model-writable update that makes ``transition``'s conditions hold, or None."""
        writable = model_writable_keys(self.definition, state) - set(self.definition.code_only_keys)
        needed = [k for c in transition.conditions for k in condition_keys(c)]
        prefer = {k: [sample_value(self.definition, k.split(".")[0])] for k in needed}

        def acceptable(candidate: dict[str, Any]) -> bool:
            changed = {k: v for k, v in candidate.items() if context.get(k) != v}
            _, invalid = check_values(self.definition, changed)
            return set(changed) <= writable and not invalid

        schema = self.definition.context_schema
        witness = find_witness([transition], base=context, prefer=prefer, accept=acceptable, schema=schema)
        if witness is None:
            return None
        return {k: v for k, v in witness.items() if context.get(k) != v}

    def unsatisfied(self, state: str, target: str, context: dict[str, Any], back_to: str | None = None) -> str | None:
        """Why no move from ``state`` to ``target`` can be proposed on ``context`` (the first condition
        that no acceptable update satisfies), or None when one can."""
        transitions = [t for t in self.definition.moves(state, back_to) if t.target_state == target]
        if not transitions:
            return f"no transition from {state} to {target}"
        if any(self.satisfy(state, t, context) is not None for t in transitions):
            return None
        for transition in transitions:
            for index, condition in enumerate(transition.conditions):
                alone = transition.model_copy(update={"conditions": [condition]})
                if self.satisfy(state, alone, context) is None:
                    name = condition.description or f"#{index + 1}"
                    rule = f" {json.dumps(condition.logic)}" if condition.logic is not None else ""
                    return f"could not satisfy condition '{name}'{rule} of {state} → {target}"
        return f"could not satisfy the conditions of {state} → {target} together"

    def fill(self, state: str, context: dict[str, Any]) -> dict[str, Any]:
        """Values for the state's keys to collect that the context lacks."""
        missing = [k for k in self.definition.states[state].required_context_keys if k not in context]
        writable = model_writable_keys(self.definition, state) - set(self.definition.code_only_keys)
        return {k: sample_value(self.definition, k) for k in missing if k in writable}


def sample_value(definition: FSMDefinition, key: str) -> Any:
    """A plausible value for ``key`` that satisfies its ``context_schema`` entry when there is one."""
    return schema_value(definition.context_schema.get(key, {}), key)


def arguments_for(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a tool's ``parameters`` schema (an object; ``{}`` when it asks for nothing)."""
    value = schema_value(parameters, "argument") if parameters.get("properties") else {}
    return value if isinstance(value, dict) else {}


def schema_value(schema: Mapping[str, Any], name: str, root: Mapping[str, Any] | None = None) -> Any:
    """A plausible value called ``name`` that satisfies the JSON Schema ``schema``: a string when the
    schema says little; local ``$ref`` pointers are looked up in ``root`` (by default ``schema``)."""
    root = schema if root is None else root
    if isinstance(schema.get("$ref"), str):
        return schema_value(_resolve(schema["$ref"], root), name, root)
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for combination in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(combination) or [] if isinstance(o, Mapping) and o.get("type") != "null"]
        if options:
            return schema_value(options[0], name, root)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if kind == "object":
        properties = {k: v if isinstance(v, Mapping) else {} for k, v in (schema.get("properties") or {}).items()}
        required = set(schema.get("required") or ())
        return {k: schema_value(v, k, root) for k, v in properties.items() if k in required or "default" not in v}
    if kind == "array":
        items = given if isinstance(given := schema.get("items"), Mapping) else {}
        count = 0 if schema.get("maxItems") == 0 else max(1, schema.get("minItems", 1))
        return [schema_value(items, name, root) for _ in range(count)]
    return _scalar_value(schema, kind, name)


_FORMATS = {
    "email": "user@example.com",
    "date": "2026-01-15",
    "date-time": "2026-01-15T10:00:00Z",
    "uri": "https://example.com",
}  # a sample of each string format a schema may name


def _scalar_value(schema: Mapping[str, Any], kind: Any, name: str) -> Any:
    """A value of the scalar ``kind`` (null, a number, a boolean; text for any other) that ``schema`` allows."""
    if kind == "null":
        return None
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
        high = schema.get("maximum", low + 100)
        value = min(max(low, 1), high)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if schema.get("format") in _FORMATS:
        return _FORMATS[schema["format"]]
    if isinstance(schema.get("pattern"), str) and (matching := pattern_sample(schema["pattern"])) is not None:
        return matching
    text = f"sample {name}"
    return text[: schema["maxLength"]] if isinstance(schema.get("maxLength"), int) else text


def pattern_sample(pattern: str) -> str | None:
    """A short string that ``pattern`` matches (searched, as JSON Schema does), or None when this
    simple walk of the pattern (literals, classes, repeats, groups, the first branch) finds none."""
    import re

    try:
        import re._parser as parser  # type: ignore[import-not-found]  # Python 3.11+: re's own parser (no stub: private)
    except ImportError:  # pragma: no cover
        import sre_parse as parser
    try:
        text = _sample(parser.parse(pattern), parser)
        return text if text is not None and re.search(pattern, text) else None
    except (re.error, RecursionError, ValueError, TypeError):
        return None


_CATEGORY = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_SPACE": " ", "CATEGORY_NOT_DIGIT": "a",
             "CATEGORY_NOT_WORD": "-", "CATEGORY_NOT_SPACE": "a"}  # fmt: skip


def _sample(items: Any, parser: Any) -> str | None:
    out = []
    for op, arg in items:
        sampler = _SAMPLERS.get(str(op))
        part = sampler(arg, parser) if sampler is not None else None
        if part is None:
            return None
        out.append(part)
    return "".join(out)


def _repeated(arg: Any, parser: Any) -> str | None:
    low, _, inner = arg
    part = _sample(inner, parser)
    return None if part is None else part * low


# what each node of a parsed pattern adds to the sample (None: no sample found); anchors add nothing, and a
# negative lookahead is checked by the final match
_SAMPLERS: dict[str, Callable[[Any, Any], str | None]] = {
    "LITERAL": lambda arg, parser: chr(arg),
    "ANY": lambda arg, parser: "a",
    "IN": lambda arg, parser: _class_member(arg),
    "MAX_REPEAT": _repeated,
    "MIN_REPEAT": _repeated,
    "POSSESSIVE_REPEAT": _repeated,
    "SUBPATTERN": lambda arg, parser: _sample(arg[-1], parser),
    "BRANCH": lambda arg, parser: _sample(arg[1][0], parser),
    "AT": lambda arg, parser: "",
    "ASSERT_NOT": lambda arg, parser: "",
}


def _class_member(items: Any) -> str | None:
    """A character of a class ``[...]`` (not a negated one)."""
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            return None
        if name == "LITERAL":
            return chr(arg)
        if name == "RANGE":
            return chr(arg[0])
        if name == "CATEGORY":
            return _CATEGORY.get(str(arg))
    return None


def _resolve(reference: str, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema a local ``$ref`` (``#/$defs/Name``) points at; ``{}`` for any other."""
    target: Any = root
    for part in reference.removeprefix("#/").split("/") if reference.startswith("#/") else [None]:
        target = target.get(part) if isinstance(target, Mapping) and part is not None else None
    return target if isinstance(target, Mapping) else {}


def _called(messages: Sequence[Message]) -> set[str]:
    """The tools the assistant asked for in ``messages`` (this turn's: the history lives in the system
    prompt), natively or in the JSON form."""
    called = set()
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            called.add(call.get("function", {}).get("name"))
        try:
            requested = tool_request(json.loads(message.get("content") or "null")) or []
        except (json.JSONDecodeError, TypeError):
            requested = []
        called.update(call.name for call in requested)
    return called


_TOOL = re.compile(r"<tool>\s*<name>([^<]*)</name>(.*?)</tool>", re.DOTALL)
_PARAMETERS = re.compile(r"<parameters>(.*?)</parameters>", re.DOTALL)


def _prompt_parameters(messages: Sequence[Message]) -> dict[str, dict[str, Any]]:
    """The parameters schema of each tool the system prompt lists (the JSON form shows them)."""
    system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
    found = {}
    for tool in _TOOL.finditer(system):
        parameters = _PARAMETERS.search(tool.group(2))
        try:
            schema = json.loads(parameters.group(1)) if parameters else None
        except json.JSONDecodeError:
            schema = None
        if isinstance(schema, dict):
            found[tool.group(1).strip()] = schema
    return found


def _response(reply: dict[str, Any]) -> LLMResponse:
    text = json.dumps(reply, ensure_ascii=False)
    return LLMResponse(text, Usage(0, len(text) // 4, len(text) // 4), "simulated")


def _tool_response(calls: list[dict[str, Any]], request: int, *, native: bool) -> LLMResponse:
    """A request for ``calls``: native function calls, or the JSON form as text."""
    if not native:
        return _response({"tool_calls": calls})
    requested = tuple(
        ToolCallRequest(f"call_{request}_{n}", c["name"], json.dumps(c["arguments"], ensure_ascii=False))
        for n, c in enumerate(calls, 1)
    )
    size = len(json.dumps(calls)) // 4
    return LLMResponse("", Usage(0, size, size), "simulated", "tool_calls", requested)


__all__ = ["SimulatedLLM", "SimulatedModels", "arguments_for", "sample_value", "schema_value"]


def _sub_definition(definition: FSMDefinition, name: str) -> FSMDefinition | None:
    """The sub-definition named ``name`` that ``definition`` runs, at any depth."""
    for sub in definition.subflow_definitions.values():
        found = sub if sub.name == name else _sub_definition(sub, name)
        if found is not None:
            return found
    return None


class SimulatedModels:
    """The simulated models of several definitions behind one client (``llm-fsm serve --model simulated``).

    A reply request goes to the model of the definition it names, or of the one running it as a
    sub-definition; judge and summary calls name none, and every model answers them alike: the first does."""

    def __init__(self, definitions: Sequence[FSMDefinition], seed: int = 0) -> None:
        # a service runs for long: each model keeps only its recent requests and replies
        self.models = [SimulatedLLM(definition, seed=seed, keep=100) for definition in definitions]
        self.prompt_order: Literal["recency", "cache"] = "recency"  # what a conversation's prompts are made in

    def tool_mode(self) -> Literal["native", "json"]:
        return "native"  # every model's: SimulatedLLM's default

    def model(self, request: LLMRequest) -> SimulatedLLM:
        name = request.definition
        if name is not None:
            for model in self.models:
                if model.definition.name == name:
                    return model
            for model in self.models:
                if _sub_definition(model.definition, name) is not None:
                    return model
        return self.models[0]

    def complete(self, request: LLMRequest) -> LLMResponse:
        return self.model(request).complete(request)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.model(request).complete(request)

    def stream_complete(self, request: LLMRequest) -> Iterator[str | LLMResponse]:
        return self.model(request).stream_complete(request)

    def astream_complete(self, request: LLMRequest) -> AsyncIterator[str | LLMResponse]:
        return self.model(request).astream_complete(request)
