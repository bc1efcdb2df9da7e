"""The requests of a turn: the prompt's messages, the reply schemas (loose, and strict or guided for a
grammar), the tool specs or the JSON tool form, a correction's request, and the preview that says when
a streamed reply's message may be shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_fsm.contract import partial_reply
from llm_fsm.definition.models import RETURN, FSMDefinition, State
from llm_fsm.definition.reply_schema import model_writable_keys, reply_schema, writable_keys
from llm_fsm.definition.texts import language_code
from llm_fsm.guided import (
    awaiting_tools,
    entered_schema,
    guided_arguments,
    guided_memory,
    guided_schema,
    portable_patterns,
    strict_value,
)
from llm_fsm.hooks import may_run
from llm_fsm.llm import LLMRequest
from llm_fsm.memory.working import with_memory_update
from llm_fsm.snapshot import Rejection
from llm_fsm.tools import calling
from llm_fsm.turn import engine
from llm_fsm.turn.engine import Decision, decide
from llm_fsm.turn.firing import BEFORE_COMMIT
from llm_fsm.turn.steps import Call, Preview, Purpose
from llm_fsm.turn.verdict import fulfilled, moved
from llm_fsm.turn.working import Working


def prompt_messages(work: Working) -> list[dict[str, Any]]:
    """The turn's prompt: the state's instructions, its tools, the context, the history, the user's text."""
    tools = work.tools.offered()
    mode = work.tools.mode() if tools else "native"
    return work.settings.prompt.messages(
        work.definition, work.snapshot(), work.user or work.note, tools=tools, tool_mode=mode,
        guided=work.settings.guided, order=work.settings.prompt_order(),
    )  # fmt: skip


def request(work: Working, messages: list[dict[str, Any]], *, longer: bool = False) -> LLMRequest:
    """A reply request with ``messages``: the reply schemas, and the state's tools in this model's form."""
    back_to = work.definition.return_target(work.base.state, work.base.came_from)  # where "$return" goes
    schema, closed = reply_schemas(work, back_to)
    strict: dict[str, Any] = closed
    tools = work.tools.offered()
    specs: tuple[dict[str, Any], ...] | None = None
    if tools and work.tools.mode() == "native":
        specs = tuple(tool.spec() for tool in tools)
    elif tools and work.tools.rounds < work.tools.limit():  # the JSON form: a reply may be a tool request
        # instead, while rounds are left (after them the schema, and a grammar held to it, asks for the answer)
        schema = {"anyOf": [schema, calling.JSON_REQUEST_SCHEMA]}
        # a grammar-driven server takes the alternatives (a provider's strict mode wants one object: the client
        # asks those for a JSON object instead). Guided (a small model, which repeats a call it has the answer
        # of): each tool once per turn
        ran = {run.name for run in work.tools.runs if run.error is None or run.approval == "rejected"}  # or refused
        offered = [tool for tool in tools if tool.name not in ran] if work.settings.guided else tools
        if offered:
            asking = calling.json_request_schema(offered, min(work.definition.max_tool_calls, len(offered)))
            waiting: dict[str, Any] | None = strict
            if work.settings.guided:
                asking = guided_arguments(asking, work.said, work.context)
                # what only a call can write, and no call of this turn has (two tools may share a result_key)
                answered = {tool.result_key for tool in tools if tool.name in ran}
                pending = {tool.result_key for tool in offered if tool.result_key} - answered
                waiting = awaiting_tools(work.definition, work.base.state, strict, work.context, pending)
                if waiting is None and any(run.error for run in work.tools.runs):
                    waiting = strict  # the call failed: the reply is offered beside it, not the call alone
            strict = asking if waiting is None else {"anyOf": [waiting, asking]}
    if work.settings.guided or "anyOf" in strict:  # for a grammar: patterns in the classes servers read
        strict = portable_patterns(strict)
    return LLMRequest(
        messages, schema, strict, state=work.base.state, context=work.context, longer=longer, tools=specs,
        back_to=back_to, definition=work.definition.name,
    )  # fmt: skip


def reply_schemas(work: Working, back_to: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of this turn (guided: made for it), with the memory's update;
    ``back_to``: where a ``"$return"`` move leads from here (None: nowhere)."""
    definition, state = work.definition, work.base.state
    if definition.memory is None:
        schema, strict = state_reply_schemas(definition, state, back_to)
    else:  # the state's schemas with the memory's update, made once per state and way back

        def compute(_: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            loose, closed = state_reply_schemas(definition, state, back_to)
            loose = with_memory_update(loose, definition, strict=False)
            return loose, with_memory_update(closed, definition, strict=True)

        schema, strict = definition.derived(f"memory_reply_schemas:{back_to}", state, compute)
    if not work.settings.guided:  # the state's, less the keys it may correct once collected, while they are not
        return schema, without_uncollected(strict, definition, state, work.context)
    # guided: made for this turn, it knows which keys are missing and which moves hold
    results = [run.result for run in work.tools.runs if run.error is None]
    guided = guided_schema(
        definition, state, work.context, opening=work.opening, back_to=back_to, said=work.said, results=results,
        earlier=[exchange.assistant for exchange in work.base.history],
    )  # fmt: skip
    refused = {r.target_state for r in work.rejected if r.kind in ("condition", "target") and r.target_state}
    strict = with_memory_update(without_moves(guided, refused), definition, strict=True, guided=True)
    if definition.memory is not None:
        language = language_code(definition.language) if definition.language else None
        strict = guided_memory(strict, work.said, language)
    return schema, strict


def state_reply_schemas(
    definition: FSMDefinition, state_id: str, back_to: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of a state, computed once per definition, state and
    ``back_to`` (where its ``"$return"`` moves go: ``FSMDefinition.return_target``). The strict one holds
    each value to its type and closed set where the definition says them (``guided.strict_value``)."""

    def compute(state: State) -> tuple[dict[str, Any], dict[str, Any]]:
        moves = definition.moves(state_id, back_to)
        # the keys of every move, "$return" unresolved, as reply_schema.model_writable_keys counts them: the
        # strict schema asks for what decide() lets the model write, wherever the way back leads
        keys = writable_keys(state, definition.code_only_keys, definition.moves(state_id, RETURN))
        # and the keys it may correct: whether they are collected yet is the engine's to judge (the schema is
        # the state's, the same on every turn)
        keys += [key for key in definition.correctable_keys(state_id) if key not in keys]
        values = {key: strict_value(definition, state, key) for key in keys}
        strict = reply_schema(state, strict=True, moves=moves, keys=keys, values=values)
        return reply_schema(state, strict=False, moves=moves), strict

    return definition.derived(f"reply_schemas:{back_to or ''}", state_id, compute)


def without_uncollected(
    strict: dict[str, Any], definition: FSMDefinition, state_id: str, context: Mapping[str, Any]
) -> dict[str, Any]:
    """``strict`` without the keys the state may only correct (``corrections``) that ``context`` does not hold
    yet: the engine refuses them, and a model asked for them fills them (a small one invents an email)."""
    asked = model_writable_keys(definition, state_id)
    later = [key for key in definition.correctable_keys(state_id) if key not in context and key not in asked]
    transition = strict["properties"]["transition"]
    update = transition["properties"]["context_update"]
    if not any(key in update.get("properties", {}) for key in later):
        return strict
    kept = {key: value for key, value in update["properties"].items() if key not in later}
    update = {**update, "properties": kept, "required": list(kept)}
    transition = {**transition, "properties": {**transition["properties"], "context_update": update}}
    return {**strict, "properties": {**strict["properties"], "transition": transition}}


def without_moves(schema: dict[str, Any], targets: set[str]) -> dict[str, Any]:
    """A guided ``schema`` without the branches that move to ``targets`` (refused earlier in the turn: a small model
    at temperature 0 would write the same move again), unless none would be left."""
    transition = schema["properties"]["transition"]
    branches = transition.get("anyOf", [transition])
    kept = [b for b in branches if b["properties"]["target_state"].get("enum", [None])[0] not in targets]
    if not targets or not kept or len(kept) == len(branches):
        return schema
    return {
        **schema,
        "properties": {**schema["properties"], "transition": kept[0] if len(kept) == 1 else {"anyOf": kept}},
    }


def correction(work: Working, text: str, problems: tuple[Rejection, ...]) -> LLMRequest:
    """The request that tells the model what was wrong with its reply ``text``."""
    feedback = work.settings.prompt.correction(problems, work.base.state)
    work.corrected = [{"role": "assistant", "content": text}, {"role": "user", "content": feedback}]
    # a reply cut at the token limit asks the client for a larger token budget on the next call
    return request(work, [*work.messages, *work.corrected], longer=any(p.kind == "truncated" for p in problems))


def entered_request(work: Working, decision: Decision) -> LLMRequest:
    """The call that writes the message of the state a guided reply that stayed was moved to
    (``verdict.fulfilled``): that state's prompt over the context the reply left, with the user's words, and a
    reply that stays there and writes nothing (``guided_entered.entered_schema``)."""
    base, target = work.base, decision.state
    way = engine.way_back(base.came_from, base.state, target)
    entered = base.model_copy(update={"state": target, "context": decision.context, "came_from": way})
    messages = work.settings.prompt.messages(
        work.definition, entered, work.user or work.note, guided=True, order=work.settings.prompt_order()
    )
    schema = entered_schema(target, [exchange.assistant for exchange in base.history])
    back_to = work.definition.return_target(target, way)
    return LLMRequest(
        messages, schema, schema, state=target, context=decision.context, back_to=back_to,
        definition=work.definition.name,
    )  # fmt: skip


def stays_in(state: str) -> Preview:
    """The preview of a reply that must stay in ``state``: its message is shown while it does."""

    def accepts(data: dict[str, Any]) -> bool:
        transition = data.get("transition")
        return isinstance(transition, dict) and transition.get("target_state") == state

    return accepts


def reply_call(work: Working, request: LLMRequest, purpose: Purpose = "reply") -> Call:
    return Call("reply", request, preview(work), purpose)


def preview(work: Working) -> Preview | None:
    """Whether a streamed reply's move will be accepted, judged on this turn's working context.

    None where the answer could still change after the reply is read: checks run on the whole
    reply, ``after_reply`` handlers may change the context the move is decided on, and handlers
    before the commit may pause the turn (the move is then not made).
    """
    state = work.definition.states[work.base.state]
    if state.checks or (
        work.hooks.handlers and may_run(work.hooks, BEFORE_COMMIT, state.id, frozenset(state.handlers))
    ):
        return None
    definition, base, context = work.definition, work.base, work.context  # replaced, never mutated
    guided = work.settings.guided

    def accepts(data: dict[str, Any]) -> bool:
        reply = partial_reply(data)
        if reply is None:
            return False
        decision = decide(definition, base.model_copy(update={"context": context}), reply)
        # guided: a reply that stays may be moved on (verdict.fulfilled), and another call writes its message
        return decision.accepted and not (guided and moved(work, reply, fulfilled(work, reply, decision)))

    return accepts
