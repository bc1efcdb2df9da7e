"""Binding a definition to its code: every handler, Python check and tool it names must be registered
in the :class:`~llm_fsm.hooks.Hooks`, in it and in each sub-definition it runs (a conversation refuses
to start otherwise, naming every one that is missing)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.subflows import has_subflows, tree, unattached
from llm_fsm.definition.wording import did_you_mean
from llm_fsm.errors import DefinitionError, Problem
from llm_fsm.hooks import Hooks
from llm_fsm.tools import calling
from llm_fsm.turn.steps import Runtime, TurnSettings


def check_bindings(definition: FSMDefinition, hooks: Hooks) -> dict[str, calling.BoundTool]:
    """Every handler, Python check and tool the definition names must be registered: the bound tools."""
    tools, problems = calling.bind(definition, hooks) if definition.tools or _lists_tools(definition) else ({}, [])
    named = sorted(h.name for h in hooks.handlers if h.named)
    for sid, state in definition.states.items():
        for i, name in enumerate(state.handlers):
            if hooks.named_handler(name) is None:
                message = f"state '{sid}' names handler '{name}', which is not registered"
                problems.append(
                    Problem(
                        f"states.{sid}.handlers[{i}]", message, hint=did_you_mean(name, named), code="unbound_handler"
                    )
                )
        for i, check in enumerate(state.checks):
            if check.kind == "python" and check.name not in hooks.checks:
                message = f"state '{sid}' uses python check '{check.name}', which is not registered"
                hint = did_you_mean(check.name, sorted(hooks.checks))
                problems.append(Problem(f"states.{sid}.checks[{i}].name", message, hint=hint, code="unbound_check"))
    if problems:
        raise DefinitionError(problems, source=definition.name)
    return tools


def runtime(definition: FSMDefinition, hooks: Hooks, settings: TurnSettings, handle: Any) -> Runtime:
    """What the turns of a conversation on ``definition`` are opened with (``handle``: the conversation)."""
    subs = frame_settings(definition, hooks, settings)
    # the sub-definitions' settings are bound only for a definition with sub-conversations
    return Runtime(hooks, lambda d: subs.get(id(d), settings), handle, stacked=bool(subs))


def frame_settings(definition: FSMDefinition, hooks: Hooks, settings: TurnSettings) -> dict[int, TurnSettings]:
    """The turn settings of each sub-definition (its own tools), by ``id``, once each is known to load and
    be bound (empty for a definition without sub-conversations)."""
    if not has_subflows(definition):
        return {}
    if problems := unattached(definition):
        raise DefinitionError(problems, source=definition.name)
    bound, problems = {}, []
    for sub in tree(definition):
        try:
            bound[id(sub)] = replace(settings, tools=check_bindings(sub, hooks))
        except DefinitionError as exc:  # name the sub-definition: its paths are not the root's
            problems += [replace(p, source=p.source or f"subflow '{sub.name}'") for p in exc.problems]
    if problems:
        raise DefinitionError(problems, source=definition.name)
    return bound


def _lists_tools(definition: FSMDefinition) -> bool:
    return any(state.tools for state in definition.states.values())
