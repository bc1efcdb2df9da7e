"""The requests of a turn: the prompt's messages, the reply schemas (loose, and strict or guided for a
grammar), the tool specs or the JSON tool form, a correction's request, and the preview that says when
a streamed reply's message may be shown."""

from __future__ import annotations

from typing import Any

from llm_fsm.contract import partial_reply
from llm_fsm.definition.key_values import strict_value
from llm_fsm.definition.models import RETURN, FSMDefinition, State
from llm_fsm.definition.reply_schema import reply_schema, writable_keys
from llm_fsm.hooks import may_run
from llm_fsm.llm import LLMRequest
from llm_fsm.memory.working import with_memory_update
from llm_fsm.snapshot import Rejection
from llm_fsm.tools import calling
from llm_fsm.turn.engine import decide
from llm_fsm.turn.firing import BEFORE_COMMIT
from llm_fsm.turn.reply_modes import mode_of, moved
from llm_fsm.turn.steps import Call, Preview, Purpose
from llm_fsm.turn.working import Working


def prompt_messages(work: Working) -> list[dict[str, Any]]:
    """The turn's prompt: the state's instructions, its tools, the context, the history, the user's text."""
    tools = work.tools.offered()
    mode = work.tools.mode() if tools else "native"
    said = work.note if work.acting else work.user or work.note  # an acting state's note holds its task
    return work.settings.prompt.messages(
        work.definition, work.snapshot(), said, tools=tools, tool_mode=mode,
        guided=mode_of(work).guided, order=work.settings.prompt_order(),
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
        strict = mode_of(work).tool_request(work, strict, tools)
    strict = mode_of(work).for_grammar(strict)
    return LLMRequest(
        messages, schema, strict, state=work.base.state, context=work.context, longer=longer, tools=specs,
        back_to=back_to, definition=work.definition.name,
    )  # fmt: skip


def reply_schemas(work: Working, back_to: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of this turn (the strict one as its mode holds it: ``reply_modes``),
    with the memory's update;
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
    return schema, mode_of(work).strict_schema(work, strict, back_to)


def state_reply_schemas(
    definition: FSMDefinition, state_id: str, back_to: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loose and strict reply schemas of a state, computed once per definition, state and
    ``back_to`` (where its ``"$return"`` moves go: ``FSMDefinition.return_target``). The strict one holds
    each value to its type and closed set where the definition says them (``definition.key_values.strict_value``)."""

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


def correction(work: Working, text: str, problems: tuple[Rejection, ...]) -> LLMRequest:
    """The request that tells the model what was wrong with its reply ``text``."""
    feedback = work.settings.prompt.correction(problems, work.base.state)
    # a reply cut at the token limit asks the client for a larger token budget on the next call
    return request(work, work.transcript.corrected(text, feedback), longer=any(p.kind == "truncated" for p in problems))


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
    mode = mode_of(work)

    def accepts(data: dict[str, Any]) -> bool:
        reply = partial_reply(data)
        if reply is None:
            return False
        decision = decide(definition, base.model_copy(update={"context": context}), reply)
        # a reply that stays may be moved on (guided: reply_modes.Guided.settle), and another call writes its message
        return decision.accepted and not moved(work, reply, mode.settle(work, reply, decision))

    return accepts
