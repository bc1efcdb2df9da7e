"""How a turn holds the model's reply and what it may do with one: the seam between the turn and guided mode.

A turn asks its :class:`ReplyMode` (:func:`mode_of`: :data:`PLAIN`, or :data:`GUIDED` where
``TurnSettings.guided`` says the model is small and held to a grammar) for four things, and nothing else of the
turn knows there are two:

- the strict schema a request holds the reply to (:meth:`ReplyMode.strict_schema`), and the form of a reply that
  asks for tools instead (:meth:`ReplyMode.tool_request`);
- the reply as read: a message that loops cut (:meth:`ReplyMode.read`), a reply cut at the token limit that can
  stand (:meth:`ReplyMode.cut_message`);
- the move a reply settles on (:meth:`ReplyMode.settle`): a guided reply that stays though its update fulfils a
  move takes it, and :meth:`ReplyMode.entered_request` then asks for the message of the state it enters.

This is the one module of the turn that imports :mod:`llm_fsm.guided` (``tests/test_layout.py`` holds it to that).
The plain mode is every hosted or capable model's: it keeps the reply the model wrote, and the rule of the house is
that what helps a small model never reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from llm_fsm import guided
from llm_fsm.contract import Reply, parse_reply
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.reply_schema import model_writable_keys
from llm_fsm.definition.texts import language_code
from llm_fsm.errors import ReplyFormatError
from llm_fsm.llm import LLMRequest
from llm_fsm.memory.working import with_memory_update
from llm_fsm.snapshot import Rejection
from llm_fsm.tools import calling
from llm_fsm.tools.calling import BoundTool
from llm_fsm.turn import engine
from llm_fsm.turn.engine import Decision, decide

if TYPE_CHECKING:
    from llm_fsm.turn.working import Working

# the guided functions this seam calls, by name here so that an ablation (benchmarks/sgd/ablation.py) can turn
# one off where the turn meets it
awaiting_tools = guided.awaiting_tools
entered_schema = guided.entered_schema
fulfilled_move = guided.fulfilled_move
guided_arguments = guided.guided_arguments
guided_memory = guided.guided_memory
guided_schema = guided.guided_schema
portable_patterns = guided.portable_patterns
tidy = guided.tidy


class ReplyMode(Protocol):
    """What a turn asks about the reply it holds the model to, and about a reply it read."""

    guided: bool  # the prompt says the guided schema's key order (llm_fsm.turn.prompt)

    def strict_schema(self, work: Working, closed: dict[str, Any], back_to: str | None) -> dict[str, Any]:
        """The strict schema of this turn's reply, from the state's ``closed`` one (with the memory's update)."""
        ...

    def tool_request(self, work: Working, strict: dict[str, Any], tools: Sequence[BoundTool]) -> dict[str, Any]:
        """The strict schema of a reply that may ask for ``tools`` in the JSON form instead (``strict``: the
        answer's)."""
        ...

    def for_grammar(self, strict: dict[str, Any]) -> dict[str, Any]:
        """The request's strict schema as grammar-driven servers read it (patterns in the classes they take)."""
        ...

    def read(self, reply: Reply) -> Reply:
        """The reply as the turn judges it."""
        ...

    def cut_message(self, so_far: str) -> str | None:
        """The message of a reply the token limit cut in its message, where it can stand (None: it can't)."""
        ...

    def settle(self, work: Working, reply: Reply, decision: Decision) -> Decision:
        """The move a valid ``reply`` settles on: ``decision``, or one its update fulfils (:func:`moved`)."""
        ...


class Plain:
    """The reply as the model wrote it, held to the state's strict schema."""

    guided = False

    def strict_schema(self, work: Working, closed: dict[str, Any], back_to: str | None) -> dict[str, Any]:
        return without_uncollected(closed, work)

    def tool_request(self, work: Working, strict: dict[str, Any], tools: Sequence[BoundTool]) -> dict[str, Any]:
        asking = calling.json_request_schema(tools, min(work.definition.max_tool_calls, len(tools)))
        # a grammar-driven server takes the alternatives (a provider's strict mode wants one object: the client
        # asks those for a JSON object instead)
        return {"anyOf": [strict, asking]}

    def for_grammar(self, strict: dict[str, Any]) -> dict[str, Any]:
        return portable_patterns(strict) if "anyOf" in strict else strict  # alternatives: a grammar's

    def read(self, reply: Reply) -> Reply:
        return reply

    def cut_message(self, so_far: str) -> str | None:
        return None  # a message cut mid-sentence is not shown: the model is asked again

    def settle(self, work: Working, reply: Reply, decision: Decision) -> Decision:
        return decision


class Guided:
    """A small model held to a grammar: a schema made for each turn from what the user said, a message that loops
    cut, and a reply that stays though its update fulfils a move moved on (its message then written by another
    call, for the state it enters)."""

    guided = True

    def strict_schema(self, work: Working, closed: dict[str, Any], back_to: str | None) -> dict[str, Any]:
        definition = work.definition
        results = [run.result for run in work.tools.runs if run.error is None]
        made = guided_schema(
            definition, work.base.state, work.context, opening=work.opening, back_to=back_to, said=work.said,
            results=results, earlier=[exchange.assistant for exchange in work.base.history],
        )  # fmt: skip
        refused = work.judged.refused_targets()  # earlier in the turn: a small model would write the same move again
        strict = with_memory_update(without_moves(made, refused), definition, strict=True, guided=True)
        if definition.memory is not None:
            strict = guided_memory(strict, work.said, _language(definition))
        return strict

    def tool_request(self, work: Working, strict: dict[str, Any], tools: Sequence[BoundTool]) -> dict[str, Any]:
        # a small model repeats a call it has the answer of: each tool once per turn
        ran = {run.name for run in work.tools.runs if run.error is None or run.approval == "rejected"}  # or refused
        offered = [tool for tool in tools if tool.name not in ran]
        if not offered:
            return strict
        asking = calling.json_request_schema(offered, min(work.definition.max_tool_calls, len(offered)))
        asking = guided_arguments(asking, work.said, work.context, _language(work.definition))
        # what only a call can write, and no call of this turn has (two tools may share a result_key)
        answered = {tool.result_key for tool in tools if tool.name in ran}
        pending = {tool.result_key for tool in offered if tool.result_key} - answered
        waiting = awaiting_tools(work.definition, work.base.state, strict, work.context, pending)
        if waiting is None and any(run.error for run in work.tools.runs):
            waiting = strict  # the call failed: the reply is offered beside it, not the call alone
        return asking if waiting is None else {"anyOf": [waiting, asking]}

    def for_grammar(self, strict: dict[str, Any]) -> dict[str, Any]:
        portable: dict[str, Any] = portable_patterns(strict)
        return portable

    def read(self, reply: Reply) -> Reply:
        tidied = tidy(reply.message)
        return reply if tidied == reply.message else reply.model_copy(update={"message": tidied})

    def cut_message(self, so_far: str) -> str | None:
        # a message that loops ("You can buy it for £10. You can buy it for £10. You can...") stands, up to the loop
        message = tidy(so_far)
        return message if message != so_far else None

    def settle(self, work: Working, reply: Reply, decision: Decision) -> Decision:
        """A reply that stays though its update fulfils a move takes the move (:func:`llm_fsm.guided.fulfilled_move`),
        where a call is left in the turn to write the message of the state it enters (the reply's own was written for
        the state it leaves). A move that held before the update is not forced, and an opening, with nothing the
        user said, keeps its state."""
        base = work.base
        if not decision.accepted or decision.state != base.state or work.opening or not work.budget.left():
            return decision
        back_to = work.definition.return_target(base.state, base.came_from)
        target = fulfilled_move(work.definition, base.state, work.context, decision.context, back_to)
        if target is None:
            return decision
        moved_on = reply.model_copy(update={"transition": reply.transition.model_copy(update={"target_state": target})})
        again = decide(work.definition, work.snapshot(), moved_on, attempt=work.budget.calls)
        return again if again.accepted else decision

    def entered_request(self, work: Working, decision: Decision) -> LLMRequest:
        """The call that writes the message of the state a reply that stayed was moved to (:meth:`settle`): that
        state's prompt over the context the reply left, with the user's words, and a reply that stays there and
        writes nothing (:func:`llm_fsm.guided.entered_schema`)."""
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

    def entered_message(self, work: Working, text: str, target: str) -> str | None:
        """The message of the reply that writes ``target``'s (:meth:`entered_request`), or None, its problem
        reported: a reply that names another state would say that state's message."""
        try:
            written = parse_reply(text)
        except ReplyFormatError as exc:
            work.judged.found([Rejection(kind="format", reason=str(exc), attempt=work.budget.calls)])
            return None
        if (named := written.transition.target_state) != target:
            reason = f"the message of state '{target}' was asked for, and the reply names '{named}'"
            work.judged.found([Rejection(kind="target", reason=reason, target_state=target, attempt=work.budget.calls)])
            return None
        return tidy(written.message)


PLAIN = Plain()
GUIDED = Guided()


def moved(work: Working, reply: Reply, decision: Decision) -> bool:
    """Whether ``decision`` moves a reply that stayed (:meth:`Guided.settle`): its message is not the state's."""
    return reply.transition.target_state == work.base.state and decision.state != work.base.state


def without_uncollected(strict: dict[str, Any], work: Working) -> dict[str, Any]:
    """``strict`` without the keys the state may only correct (``corrections``) that the working context does not
    hold yet: the engine refuses them, and a model asked for them fills them (a small one invents an email)."""
    definition, state_id, context = work.definition, work.base.state, work.context
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


def _language(definition: FSMDefinition) -> str | None:
    """The built-in language the definition speaks (None: none declared, or one not built in: every language's)."""
    return language_code(definition.language) if definition.language else None


def mode_of(work: Working) -> Plain | Guided:
    """The reply mode ``work`` runs in: guided where its settings say the model is held to a guided schema."""
    return GUIDED if work.settings.guided else PLAIN


__all__ = ["GUIDED", "PLAIN", "Guided", "Plain", "ReplyMode", "mode_of", "moved"]
