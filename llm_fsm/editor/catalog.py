"""What the code beside a definition provides, by name, for the editor's forms: tools, checks and handlers.

A state's ``tools`` and ``handlers`` and a ``{"kind": "python", "name": ...}`` check name things that live in
Python (the ``Hooks`` object of ``--hooks``) or in the definition (its ``tools``). The forms list them beside the
fields that name them, each with what it needs, so an author picks a name that exists and sees what it takes:

- ``tools``: name, description, ``parameters`` (the JSON Schema its arguments are checked against: the
  definition's, else the one registered, else one made from the function's signature), ``required`` (the
  arguments it cannot do without), and where it comes from (``declared`` in the definition, ``registered`` in
  the hooks: a tool the states list needs both, or an MCP server);
- ``checks``: name and ``accepts``, the keywords the function takes (None: any, it takes ``**kwargs``);
- ``handlers``: name, ``timings``, whether states must list it (``named``) or the ``states``/``targets``/``keys``
  it is limited to, ``arguments`` (the keywords it takes; None: any) and ``policy``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from llm_fsm.hooks import Hooks


def catalog(hooks: Hooks | None, value: Any = None) -> dict[str, list[dict[str, Any]]]:
    """The tools, checks and handlers of ``hooks`` and the tools ``value`` (the edited definition) declares."""
    hooks = hooks or Hooks()
    return {"tools": _tools(hooks, value), "checks": _checks(hooks), "handlers": _handlers(hooks)}


def _tools(hooks: Hooks, value: Any) -> list[dict[str, Any]]:
    declared = value.get("tools") if isinstance(value, dict) else None
    declared = declared if isinstance(declared, dict) else {}
    names = list(dict.fromkeys([*declared, *hooks.tools]))
    entries = []
    for name in names:
        written = declared.get(name)
        written = written if isinstance(written, dict) else {}
        code = hooks.tools.get(name)
        parameters = written.get("parameters")
        if not isinstance(parameters, dict) and code is not None:
            parameters = code.parameters if code.parameters is not None else _signature_schema(code.function)
        description = written.get("description") if isinstance(written.get("description"), str) else None
        if not description and code is not None:
            description = code.description
        required = parameters.get("required", []) if isinstance(parameters, dict) else []
        entries.append(
            {
                "name": name,
                "description": description or "",
                "parameters": parameters if isinstance(parameters, dict) else None,
                "required": [r for r in required if isinstance(r, str)] if isinstance(required, list) else [],
                "declared": name in declared,
                "registered": code is not None,
            }
        )
    return entries


def _signature_schema(function: Callable[..., Any]) -> dict[str, Any] | None:
    from llm_fsm.tools.binding import signature_schema

    try:
        return signature_schema(function)
    except Exception:  # a signature pydantic cannot read: the form shows no parameters
        return None


def _checks(hooks: Hooks) -> list[dict[str, Any]]:
    return [{"name": name, "accepts": _keywords(function)} for name, function in sorted(hooks.checks.items())]


def _handlers(hooks: Hooks) -> list[dict[str, Any]]:
    def listed(names: frozenset[str] | None) -> list[str] | None:
        return sorted(names) if names is not None else None

    return [
        {
            "name": handler.name,
            "timings": sorted(handler.timings),
            "named": handler.named,
            "states": listed(handler.states),
            "targets": listed(handler.targets),
            "keys": listed(handler.keys),
            "arguments": listed(handler.accepts),
            "policy": handler.policy,
        }
        for handler in hooks.handlers
    ]


def _keywords(function: Callable[..., Any]) -> list[str] | None:
    """The keywords ``function`` takes, in order; None when it takes any (``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL]
