"""A turn's rounds of tool calls (the calls themselves are checked and run by :mod:`llm_fsm.tools.calling`):
each round checked against the state's bounds, keyed, run at once, recorded in the working context and
given back to the model; a call that needs a person's approval pauses the turn, and the resume runs it
between two checkpoints, so that a retry never runs it twice."""

from __future__ import annotations

import copy
from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any

from llm_fsm.definition.texts import BUILT_IN, runtime_text
from llm_fsm.errors import ResumeError
from llm_fsm.hooks import logger, new_token, now
from llm_fsm.llm import LLMResponse, ToolCallRequest
from llm_fsm.snapshot import PendingEvent, Rejection, Snapshot
from llm_fsm.tools import calling
from llm_fsm.tools.calling import BoundTool, Prepared, ToolRun
from llm_fsm.turn.engine import record
from llm_fsm.turn.outcomes import finish
from llm_fsm.turn.prompt import PromptBuilder
from llm_fsm.turn.requests import prompt_messages
from llm_fsm.turn.steps import Checkpoint, RunTools, Step, TurnResult
from llm_fsm.turn.working import Working
from llm_fsm.values import as_json_data

DEFAULT_APPROVAL_MESSAGE = BUILT_IN["en"]["approval"]  # a definition in another language says it in its own
NO_MORE_TOOLS = "no more tool calls in this turn: give your final reply now, with what you have"
INTERRUPTED = (
    "the process running this approved call stopped before its result was saved: it may have run, so it is "
    "not run again (a tool that takes an idempotency_key would be, with the same key)"
)
# approvals saved on a held call: the decision was made, and a resume goes on with it (never another one)
DECIDED = {"approved": "already ran", "running": "may have run (its process stopped while it ran)"}


def requested_tools(work: Working, response: LLMResponse) -> list[ToolCallRequest]:
    """The tool calls a response asks for: native ones, or a reply in the JSON form (in states with tools)."""
    if response.tool_calls:
        return list(response.tool_calls)
    if not work.definition.states[work.base.state].tools or work.tools.mode() != "json":
        return []
    return calling.requested_in_text(response.text, work.tools.rounds + 1)


def use_tools(
    work: Working, calls: list[ToolCallRequest], response: LLMResponse
) -> Generator[Step, Any, tuple[Snapshot, TurnResult] | None]:
    """One round of tool calls: checked, run (all at once), their results given to the model.

    A call that needs a person's approval pauses the turn (returned: the pause) after the others ran.
    """
    state = work.definition.states[work.base.state]
    work.tools.rounds += 1
    rounds = work.tools.rounds
    calls = calling.unique_ids(calls, rounds)
    prepared = [calling.prepare(c, state, work.settings.tools, work.context, rounds) for c in calls]
    if rounds > work.tools.limit():
        # refused with a reason rather than dropped: the model is told to give its final reply
        prepared = [calling.Prepared(p.call, None, p.arguments, rounds, NO_MORE_TOOLS) for p in prepared]
    most = work.definition.max_tool_calls
    if len(prepared) > most:  # the first ones run; the rest are refused, and the model is told why
        extra = f"too many calls at once: at most {most} per round"
        prepared[most:] = [calling.Prepared(p.call, None, p.arguments, rounds, extra) for p in prepared[most:]]
    # keys counted per tool in the turn, not random: a retry of the same turn makes the same keys, so
    # a tool that takes one has its effect once
    prepared = [keyed_call(work, p) for p in prepared]
    # one call waits for approval per round; the others that need one are refused, to be asked again
    held = next((p for p in prepared if p.error is None and p.needs_approval), None)
    ready = tuple(p for p in prepared if p.error is None and not p.needs_approval)
    # the driver gives the runs back in the order of ready: matched to their calls by position below
    ran = iter((yield RunTools(ready)) if ready else ())
    runs = []
    for p in prepared:
        if p.error is not None:
            runs.append(p.refused(p.error))
        elif p is held:
            continue
        elif p.needs_approval:
            runs.append(p.refused("needs a person's approval: call it again once the pending call is decided"))
        else:
            runs.append(next(ran))
    apply_tools(work, runs)
    if held is not None:
        return pause_for_approval(work, held)
    # the correction this call answered stays in what the model reads next; earlier requests keep theirs
    work.transcript.tools_answered(tool_exchange(work, runs, response.text))
    return None


def keyed_call(work: Working, prepared: Prepared) -> Prepared:
    """``prepared`` with its idempotency key, if it may run: that of the n-th call of its tool in this turn."""
    if prepared.error is not None:
        return prepared
    name = prepared.call.name
    key = calling.call_key(work.base.uid, work.turn_index, name, work.tools.keyed[name])
    work.tools.keyed[name] += 1
    return replace(prepared, key=key)


def apply_tools(work: Working, runs: list[ToolRun]) -> None:
    """Record the runs: a rejection for each error, each result under its tool's ``result_key``."""
    for run in runs:
        work.tools.runs.append(run)
        tool = work.settings.tools.get(run.name)
        if run.error is not None:
            reason = f"tool '{run.name}': {run.error}"
            work.judged.found([Rejection(kind="tool", reason=reason, attempt=work.budget.calls)])
        elif tool is not None and tool.result_key:  # replaced, not merged: a result is a whole
            key, by = tool.result_key, f"tool:{run.name}"
            work.context = {**work.context, key: copy.deepcopy(run.result)}
            work.provenance = record(work.provenance, [key], by, work.turn_index)


def tool_exchange(work: Working, runs: list[ToolRun], text: str | None) -> list[dict[str, Any]]:
    """The messages that ask for ``runs`` and give their results (secret-looking values masked, as
    in the context the model reads), in this model's form."""
    runs = [calling.masked(run, work.definition.masked) for run in runs]
    if work.tools.mode() == "native":
        return calling.native_exchange(runs, text)
    # the request as the runtime read it, not the model's raw text: its arguments masked like the results
    return [
        {"role": "assistant", "content": calling.json_request_text(runs)},
        {"role": "user", "content": work.settings.prompt.tool_results(runs)},
    ]


def pause_for_approval(work: Working, held: Prepared) -> tuple[Snapshot, TurnResult]:
    """Pause before ``held`` runs: the pending event carries the call and the turn's earlier calls."""
    state = work.base.state
    waiting = ToolRun(
        id=held.call.id, name=held.call.name, arguments=held.arguments, round=held.round, idempotency_key=held.key
    )
    event = PendingEvent(
        reason=f"tool '{held.call.name}' needs approval",
        payload={"tool": held.call.name, "arguments": held.arguments},
        created_at=now(),
        token=new_token(),
        state=state,
        kind="tool_approval",
        tool_call=waiting.model_dump(),
        tool_runs=tuple(run.model_dump() for run in work.tools.runs),
    )
    return finish(work, state, runtime_text(work.definition, "approval"), {}, pending=event)


# -- after the approval -------------------------------------------------------------------------


def check_approval(snapshot: Snapshot, token: str, decision: Mapping[str, Any]) -> None:
    """Refuse a decision that is not one (:class:`ResumeError`), or another one about a call that was
    decided already (approved and run, or running when its process stopped)."""
    pause = snapshot.pending
    if pause is None or pause.kind != "tool_approval" or token != pause.token:
        return  # the engine refuses a resume that does not fit the pause
    _check_decision(decision, snapshot.state)
    approval = (pause.tool_call or {}).get("approval")
    if approval in DECIDED and dict(decision) != {"approved": True}:  # another decision now would be moot
        tool = pause.payload.get("tool", "?")
        raise ResumeError(
            f"the call to '{tool}' was approved and {DECIDED[approval]}: resume with {{\"approved\": true}} to go on",
            state=snapshot.state,
        )


def approval_note(prompt: PromptBuilder, pause: PendingEvent, decision: Mapping[str, Any]) -> str:
    """The user-turn text of the resume: what the person decided (approved, if it ran or is running)."""
    ran = (pause.tool_call or {}).get("approval") in DECIDED  # decided (and run, or running) before a failure
    return prompt.approval_note(pause.payload.get("tool", "?"), {"approved": True} if ran else decision)


def _check_decision(decision: Mapping[str, Any], state: str) -> None:
    """A decision about a tool call: {"approved": bool, "reason"?: str} or {"result": ...}."""
    if isinstance(decision, Mapping) and (
        set(decision) == {"result"}
        or (
            "approved" in decision
            and isinstance(decision["approved"], bool)
            and set(decision) <= {"approved", "reason"}
        )
    ):
        return
    raise ResumeError(
        'a tool approval is resumed with {"approved": true}, {"approved": false, "reason": "..."} '
        f'or {{"result": ...}}, not {decision!r:.80}',
        state=state,
    )


def after_approval(work: Working) -> Generator[Step, Any, list[dict[str, Any]]]:
    """The rest of a round paused for a tool call's approval: the call as decided, then the messages the
    model reads next (the prompt, and each round of the turn's calls with their results)."""
    pause, work.resuming = work.resuming, None
    assert pause is not None and pause.tool_call is not None
    earlier = [ToolRun.model_validate(run) for run in pause.tool_runs]
    held = ToolRun.model_validate(pause.tool_call)
    work.tools.keyed.update(run.name for run in [*earlier, held] if run.idempotency_key)  # keys already given
    # a call checkpointed with its result (approved and run) is taken as it ran, never run again;
    # "running": its process stopped during the call (see decide_call)
    decided = held if held.approval not in (None, "running") else (yield from decide_call(work, held, pause))
    # the rounds go on from the paused one, so the state's round limit counts those before the pause
    work.tools.rounds = held.round
    apply_tools(work, [decided])
    # the paused turn's messages were not saved: they are rebuilt from the prompt and the recorded runs
    messages = prompt_messages(work)
    for number in sorted({run.round for run in [*earlier, decided]}):
        runs = [run for run in [*earlier, decided] if run.round == number]
        messages = [*messages, *tool_exchange(work, runs, None)]
    return messages


def decide_call(work: Working, held: ToolRun, pause: PendingEvent) -> Generator[Step, Any, ToolRun]:
    """``held`` as the person decided: run (checkpointed before and after: never run twice), given a
    result, or refused. A call found ``running`` was approved and its process died while it ran."""
    decision = work.decision or {}
    if held.approval == "running":
        tool = work.settings.tools.get(held.name)
        if tool is None or not tool.takes_key:  # it may have run: at most once, so not again
            logger.warning("tool '%s' (key %s): %s", held.name, held.idempotency_key, INTERRUPTED)
            return held.model_copy(update={"error": INTERRUPTED, "approval": "approved"})
        return (yield from run_approved(work, held, pause, tool))  # the same key: the tool has its effect once
    if "result" in decision:
        result = as_json_data({"result": decision["result"]}, source="the supplied tool result")["result"]
        return held.model_copy(update={"result": result, "approval": "supplied"})
    if decision.get("approved") is not True:
        reason = decision.get("reason")
        error = f"a person rejected this call{': ' + str(reason) if reason else ''}"
        return held.model_copy(update={"error": error, "approval": "rejected"})
    tool = work.settings.tools.get(held.name)
    if tool is None:
        return held.model_copy(update={"error": "this tool is no longer available", "approval": "approved"})
    return (yield from run_approved(work, held, pause, tool))


def run_approved(work: Working, held: ToolRun, pause: PendingEvent, tool: BoundTool) -> Generator[Step, Any, ToolRun]:
    """Run an approved call between two checkpoints: ``running`` before (a retry after a crash then
    knows it may have run), its result after (a retry finds the result and does not run it)."""
    key = held.idempotency_key or calling.call_key(work.base.uid, pause.token, held.name, 0)  # older pauses
    held = held.model_copy(update={"idempotency_key": key})
    yield from checkpoint(work, pause, held.model_copy(update={"approval": "running"}))
    call = ToolCallRequest(held.id, held.name, calling.arguments_text(held.arguments))
    ran: ToolRun  # what the driver sends back for RunTools
    (ran,) = yield RunTools((calling.Prepared(call, tool, held.arguments, held.round, key=key),))
    ran = ran.model_copy(update={"approval": "approved"})
    yield from checkpoint(work, pause, ran)
    return ran


def checkpoint(work: Working, pause: PendingEvent, call: ToolRun) -> Generator[Step, Any, None]:
    """Hold the pause with ``call`` as its tool call, from now on (nothing to hold without a paused snapshot)."""
    if work.paused is not None:
        recorded = pause.model_copy(update={"tool_call": call.model_dump()})
        yield Checkpoint(work.paused.model_copy(update={"pending": recorded}))
