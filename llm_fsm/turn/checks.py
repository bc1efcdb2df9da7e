"""Refinement: the acceptance checks of a state, evaluated on a proposed turn before it is committed.

A check passes or fails with a reason; a check that cannot be evaluated (an unregistered Python
check, one that raises, a judge reply that does not parse) fails with that reason. It never
passes silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from llm_fsm.contract import strip_thinking
from llm_fsm.definition.models import (
    Check,
    JudgeCheck,
    MaxLengthCheck,
    PythonCheck,
    RegexCheck,
    RequiredKeysCheck,
    SchemaCheck,
    State,
)
from llm_fsm.hooks import Await, Awaited, Hooks, Run, resolved
from llm_fsm.logic.rules import evaluate, truthy
from llm_fsm.values import exception_text


@dataclass(frozen=True)
class Proposal:
    """The turn the model proposes: what would be shown, and the state and context it would lead to."""

    message: str
    state: str
    target: str
    context: dict[str, Any]
    update: dict[str, Any]
    user: str | None

    @property
    def leaving(self) -> bool:
        return self.target != self.state


def applicable(state: State, proposal: Proposal) -> list[Check]:
    """The state's checks that apply to this proposal (``leave`` checks only when it leaves)."""
    return [c for c in state.checks if c.on == "turn" or proposal.leaving]


def name_of(check: Check, index: int) -> str:
    return check.description or f"{check.kind} check #{index + 1}"


def failure(check: Check, proposal: Proposal) -> str | None:
    """Why ``check`` fails on ``proposal``, or None when it passes (judge and Python checks: see the turn
    and :func:`python_failure`)."""
    if isinstance(check, RequiredKeysCheck):
        # has_context, as conditions read it: a key set to "", [] or {} counts as missing
        missing = [k for k in check.keys if not truthy(evaluate({"has_context": k}, proposal.context))]
        return f"missing {', '.join(repr(k) for k in missing)}" if missing else None
    if isinstance(check, SchemaCheck):
        return _schema_failure(check, proposal)
    if isinstance(check, RegexCheck):
        found = re.search(check.pattern, proposal.message, re.IGNORECASE if check.ignore_case else 0) is not None
        if found == check.must_match:
            return None
        return f"the message {'does not match' if check.must_match else 'matches'} /{check.pattern}/"
    if isinstance(check, MaxLengthCheck):
        size = len(proposal.message)
        return f"the message has {size} characters; at most {check.max} allowed" if size > check.max else None
    return f"a '{check.kind}' check cannot be evaluated here"


def _schema_failure(check: SchemaCheck, proposal: Proposal) -> str | None:
    # an absent key passes: a required_keys check says a key must be there, this one what it must hold
    if check.key not in proposal.context:
        return None
    from llm_fsm.schemas import violation

    problem = violation(check.json_schema, proposal.context[check.key])
    return f"'{check.key}' is invalid: {problem}" if problem else None


def python_failure(
    check: PythonCheck, proposal: Proposal, hooks: Hooks, run: Run | None = None
) -> Generator[Await, Awaited, str | None]:
    """Why a registered Python check fails, or None (``yield from`` it: an async check is awaited by the driver)."""
    function = hooks.checks.get(check.name)
    if function is None:
        return f"python check '{check.name}' is not registered"
    arguments = {
        "message": proposal.message,
        "state": proposal.state,
        "target": proposal.target,
        "context": proposal.context,
        "update": proposal.update,
        "user": proposal.user,
    }
    try:
        keywords = _accepted(function, arguments)
        outcome = function(**keywords) if run is None else run(function, keywords)
        outcome = yield from resolved(outcome, f"check '{check.name}'")
    except Exception as exc:  # a check that breaks fails; it must not let the turn through
        return f"python check '{check.name}' raised {type(exc).__name__}: {exception_text(exc)}"
    return _interpret(outcome, check.name)


def _accepted(function: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    import inspect

    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return arguments
    names = {p.name for p in parameters}
    return {k: v for k, v in arguments.items() if k in names}


def _interpret(outcome: Any, name: str) -> str | None:
    if outcome is None or outcome is True:
        return None
    if outcome is False:
        return f"python check '{name}' failed"
    # a failure never passes silently: an empty or blank reason still fails, with a reason of ours
    if isinstance(outcome, str):
        return outcome if outcome.strip() else f"python check '{name}' failed (it gave no reason)"
    if isinstance(outcome, tuple) and len(outcome) == 2:
        passed, reason = outcome
        if passed:
            return None
        return (
            str(reason)
            if reason is not None and str(reason).strip()
            else f"python check '{name}' failed (it gave no reason)"
        )
    return f"python check '{name}' returned {type(outcome).__name__}, not bool, str or (bool, reason)"


def judge_failure(text: str) -> str | None:
    """The judge's verdict: None if it passed, else its reason (or why its reply is unusable)."""
    cleaned = strip_thinking(text or "").strip()
    # the outermost braces: a judge may put its verdict in a fence or among words
    start, end = cleaned.find("{"), cleaned.rfind("}")
    try:
        verdict = json.loads(cleaned[start : end + 1]) if start >= 0 else None
    except ValueError:
        verdict = None
    # only a JSON boolean counts: a judge that writes "pass": "no" is unreadable, never a pass
    if not isinstance(verdict, dict) or not isinstance(verdict.get("pass"), bool):
        return f'the judge\'s reply could not be read (expected {{"pass": bool, "reason": str}}): {text[:80]!r}'
    if verdict["pass"]:
        return None
    return f"the judge said: {verdict.get('reason') or 'no reason given'}"


__all__ = [
    "JudgeCheck", "Proposal", "PythonCheck", "SchemaCheck", "applicable", "failure", "judge_failure", "name_of",
    "python_failure",
]  # fmt: skip
