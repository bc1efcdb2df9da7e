"""Reading one reply of a turn: parsed, shown to the ``after_reply`` handlers, decided on the working
context, its ``memory_update`` weighed, and the state's acceptance checks run (a judge is a model call
of the turn). What it finds wrong is what the next corrective call is told."""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from typing import Any

from llm_fsm.contract import Reply, parse_reply
from llm_fsm.definition.models import Check
from llm_fsm.errors import ReplyFormatError, ReplyTruncated
from llm_fsm.hooks import Run
from llm_fsm.llm import LLMRequest, LLMResponse
from llm_fsm.memory.working import apply_model_update
from llm_fsm.snapshot import Rejection
from llm_fsm.turn import checks
from llm_fsm.turn.engine import Decision, decide
from llm_fsm.turn.firing import fire
from llm_fsm.turn.reply_modes import PLAIN, ReplyMode, mode_of
from llm_fsm.turn.steps import Call, Step
from llm_fsm.turn.working import Working
from llm_fsm.values import clean_text

Problems = tuple[Rejection, ...]


def verdict(
    work: Working, response: LLMResponse
) -> Generator[Step, Any, tuple[Decision | None, Reply | None, Problems]]:
    """Parse and check one reply; the problems that call for another try (none: accepted)."""
    try:
        # a reply cut at the token limit is refused even if what came parses, unless it can stand (cut_reply)
        cut = response.finish_reason == "length"
        reply = cut_reply(response.text, mode_of(work)) if cut else parse_reply(response.text)
        if reply is None:
            raise ReplyTruncated(
                f"the reply was cut off at the token limit after {len(response.text)} characters: "
                "answer again, with a shorter message"
            )
        reply = mode_of(work).read(reply)  # guided: a small model's loop, cut
    except ReplyFormatError as exc:
        truncated = isinstance(exc, ReplyTruncated)
        problem = Rejection(kind="truncated" if truncated else "format", reason=str(exc), attempt=work.budget.calls)
        work.judged.found([problem])
        return None, None, (problem,)
    # after_reply handlers run before the move is decided, so the deltas they return are decided on
    yield from fire(work, "after_reply", work.base.state, reply=reply, message=reply.message)
    decision = decide(work.definition, work.snapshot(), reply, attempt=work.budget.calls)
    # guided: the move the update fulfils, checked below and told by reply_modes.moved() to the turn
    decision = mode_of(work).settle(work, reply, decision)
    work.judged.found(decision.rejected)
    proposed = reply.transition.memory_update
    if proposed:  # reported now; applied with the reply the turn settles on
        work.judged.found(
            apply_model_update(work.definition, work.memory.written, proposed, attempt=work.budget.calls)[2]
        )
    work.judged.read(decision, proposed)
    # a key the model may not write is dropped and reported, but is no reason to ask again
    # a refused memory update (above) is reported too, but is no reason to ask again either
    problems = tuple(r for r in decision.rejected if r.kind != "context_key")
    if problems or not work.definition.states[work.base.state].checks:  # most states have no checks: no run
        return decision, reply, problems
    failures = yield from run_checks(work, decision, reply.message)
    work.judged.found(failures)
    return decision, reply, tuple(failures)


# where a reply's message or reasoning starts, as the strict schemas order them: after its transition
_CUT_KEYS = re.compile(r',\s*"(message|reasoning)"\s*:\s*"')


def cut_reply(text: str, mode: ReplyMode = PLAIN) -> Reply | None:
    """A reply the token limit cut once its move and message were whole, where it can stand: cut in its
    ``reasoning`` (the last key, never shown), with the reasoning so far. A reply cut in its message stands where
    ``mode`` says it can (guided: a message that loops, up to the loop; plain: never, a message cut mid-sentence is
    not shown)."""
    cuts = list(_CUT_KEYS.finditer(text))
    if not cuts:
        return None
    found = cuts[-1]  # a message that quotes the key comes before it
    rest = ', "message": "-"}' if found[1] == "message" else "}"
    try:
        reply = parse_reply(text[: found.start()] + rest)
        so_far = clean_text(json.loads(f'"{text[found.end() :]}"'))
    except ValueError:  # no whole move, or a cut inside an escape
        return None
    if found[1] == "reasoning":
        return reply.model_copy(update={"reasoning": so_far})
    message = mode.cut_message(so_far)
    return None if message is None else reply.model_copy(update={"message": message, "reasoning": None})


def run_checks(work: Working, decision: Decision, message: str) -> Generator[Step, Any, list[Rejection]]:
    """The state's acceptance checks on the proposed move: a rejection for each that fails."""
    state = work.definition.states[work.base.state]
    proposal = checks.Proposal(message, state.id, decision.state, decision.context, decision.applied, work.user)
    failures: list[Rejection] = []
    for index, check in enumerate(state.checks):
        if check not in checks.applicable(state, proposal):
            continue
        if isinstance(check, checks.JudgeCheck) and failures:
            continue  # the turn is asked again anyway: do not pay for a judge
        name = checks.name_of(check, index)
        with work.trace.check(name, check.kind, state.id) as span:
            why = yield from check_failure(work, check, proposal, span.run)
            span.verdict(why)
        if why:
            key = check.key if isinstance(check, checks.SchemaCheck) else None
            reason = f"check '{name}' failed: {why}"
            failures.append(Rejection(kind="check", reason=reason, key=key, attempt=work.budget.calls))
    return failures


def check_failure(work: Working, check: Check, proposal: checks.Proposal, run: Run) -> Generator[Step, Any, str | None]:
    """Why ``check`` fails on ``proposal`` (None: it passes); a judge is a model call of the turn."""
    if isinstance(check, checks.JudgeCheck):
        if not work.budget.left():
            return "no LLM calls left in this turn to run the judge"
        messages = work.settings.prompt.judge_messages(work.definition, check.rubric, proposal)
        response = yield Call("judge", LLMRequest(messages, kind="judge", state=proposal.state), purpose="judge")
        work.budget.count(response)
        return checks.judge_failure(response.text)
    if isinstance(check, checks.PythonCheck):
        return (yield from checks.python_failure(check, proposal, work.hooks, run))
    return checks.failure(check, proposal)
