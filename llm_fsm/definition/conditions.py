"""Whether a transition's conditions hold on a context, and if not, why (in the words a rejection gives the
model and the caller). The engine decides with them; guided mode and ``validate`` ask the same questions."""

from __future__ import annotations

from typing import Any

from llm_fsm.definition.models import Condition, Transition
from llm_fsm.errors import LogicError
from llm_fsm.logic import rules as logic


def unmet_condition(transition: Transition, context: dict[str, Any]) -> str | None:
    """Why the transition's conditions do not hold on ``context``, or None when they all hold."""
    for index, condition in enumerate(transition.conditions):
        reason = condition_failure(condition, context)
        if reason is not None:
            name = condition.description or f"#{index + 1}"
            return f"condition '{name}' {reason}"
    return None


def condition_failure(condition: Condition, context: dict[str, Any]) -> str | None:
    """Why one condition does not hold on ``context`` (a key missing, its logic false), or None when it holds."""
    missing = [k for k in condition.requires_context_keys if not logic.has_key(context, k)]
    if missing:
        return f"needs key{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}"
    if condition.logic is None:
        return None
    try:
        holds = logic.truthy(condition.holds_on(context))
    except LogicError as exc:
        return f"could not be evaluated: {exc}"
    return None if holds else "does not hold on the current context"
