"""The checks of ``llm-fsm validate --strict``, run on the text a save would write, each placed on the graph.

The findings are :func:`llm_fsm.authoring.analysis.analyze_text`'s, on that text with the file's own path as
their source: the same words, hints and codes as the command's, and line:column in the file as it will be
saved. Each also names its ``element``, read from its dotted path (``states.greet.transitions[0].conditions``),
so the page can mark the node or edge it is about:

- ``{"kind": "state", "state": ID}``, ``{"kind": "transition", "state": ID, "index": I}`` (I: the transition's
  place in the state's ``transitions`` list),
- ``{"kind": "global_transition", "index": I}``,
- ``{"kind": "definition"}``: the top level, and anything else (a subflow file's own problems among them).

With ``states`` written as a list, a path may name a state by its place (``states[2].id``): the id is read
from the edited value.

Given the ``--hooks`` the editor was started with, the check adds what binding the definition to them refuses
(``llm-fsm chat --hooks`` would not start): a handler, Python check or tool the definition names that the hooks
do not register, or a tool whose arguments schema does not fit its function. These are the runtime's own
problems (:func:`llm_fsm.binding.check_bindings`, and for each sub-definition
:func:`llm_fsm.binding.frame_settings`), with its codes (``unbound_handler``, ``unbound_check``,
``unbound_tool``, ``tool_schema``) and words. Without hooks nothing is added: ``validate --strict`` knows no
hooks, and a definition meant for code the editor was not given is not wrong for that.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_fsm.authoring.analysis import Diagnostic
    from llm_fsm.hooks import Hooks

DEFINITION = {"kind": "definition"}
# states.ID or states[I], then (optionally) .transitions[I]
_STATE = re.compile(r"^states(?:\.(?P<id>[^.\[]+)|\[(?P<at>\d+)\])(?P<rest>.*)$")
_TRANSITION = re.compile(r"^\.transitions\[(?P<index>\d+)\]")
_GLOBAL = re.compile(r"^global_transitions\[(?P<index>\d+)\]")


def check(
    text: str, path: str | os.PathLike[str], value: Any = None, hooks: Hooks | None = None
) -> list[dict[str, Any]]:
    """Every diagnostic ``validate --strict`` would report on ``text`` saved at ``path``, as
    ``Diagnostic.to_dict()`` plus its ``element``. ``value`` is the text's JSON value, for states written as a
    list (read from ``text`` when not given). ``hooks`` (the editor's ``--hooks``; None: none given) adds the
    problems of binding the definition to them, after the others."""
    from llm_fsm.authoring.analysis import Diagnostic, analyze_text

    source = str(path)
    try:
        diagnostics = analyze_text(text, source=source, strict=True)
    except Exception as exc:  # a bug in the analysis: one problem, as validate reports it, not a failed request
        message = f"could not analyze the file: {type(exc).__name__}: {exc}"
        diagnostics = [Diagnostic("error", "internal", "", None, None, message, "please report this", source)]
    if hooks is not None:
        diagnostics += binding_problems(text, source, hooks)
    if value is None and diagnostics and "states[" in "".join(d.path for d in diagnostics):
        value = _value_of(text)
    found = []
    for diagnostic in diagnostics:
        entry = diagnostic.to_dict()
        own = diagnostic.file in (None, source)
        entry["element"] = element(diagnostic.path, value) if own else dict(DEFINITION)
        found.append(entry)
    return found


def binding_problems(text: str, source: str, hooks: Hooks) -> list[Diagnostic]:
    """What binding the definition in ``text`` to ``hooks`` refuses, as errors placed in ``text`` (a
    sub-definition's problems name it as their file). Nothing when the text does not load: its load errors
    come first, and are reported already."""
    from llm_fsm.authoring.analysis import Diagnostic, Locator
    from llm_fsm.binding import check_bindings, frame_settings
    from llm_fsm.definition.loader import load_text
    from llm_fsm.errors import DefinitionError, Problem
    from llm_fsm.turn.steps import TurnSettings

    try:
        definition = load_text(text.removeprefix("\ufeff"), source=source).definition
    except (RecursionError, ValueError):
        return []
    if definition is None:
        return []
    problems: list[Problem] = []
    try:
        try:  # the root's, as Conversation binds it ...
            check_bindings(definition, hooks)
        except DefinitionError as exc:
            problems += exc.problems
        try:  # ... and each sub-definition's (frame_settings only copies the settings it is given)
            frame_settings(definition, hooks, TurnSettings(prompt=None))  # type: ignore[arg-type]  # no prompt: only the tools are read
        except DefinitionError as exc:
            problems += exc.problems
    except Exception as exc:  # a bug in the binding: one problem, not a failed request
        message = f"could not bind the definition to the hooks: {type(exc).__name__}: {exc}"
        return [Diagnostic("error", "internal", "", None, None, message, "please report this", source)]
    locator = Locator(text.removeprefix("\ufeff"), definition)
    found = []
    for problem in problems:
        if problem.source is None:  # the root's: placed in the text
            line, column = locator.position(_loc(problem.path))
            found.append(Diagnostic("error", problem.code, problem.path, line, column, problem.message,
                                    problem.hint, source))  # fmt: skip
        else:
            found.append(Diagnostic("error", problem.code, problem.path, None, None, problem.message,
                                    problem.hint, problem.source))  # fmt: skip
    return found


_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _loc(path: str) -> list[str | int]:
    """``states.ask.checks[0].name`` → ``["states", "ask", "checks", 0, "name"]``."""
    return [int(index) if index else name for index, name in _PART.findall(path)]


def element(path: str, value: Any = None) -> dict[str, Any]:
    """The part of the graph a diagnostic's dotted ``path`` is about (see the module's docstring)."""
    if match := _GLOBAL.match(path):
        return {"kind": "global_transition", "index": int(match["index"])}
    match = _STATE.match(path)
    if match is None:
        return dict(DEFINITION)
    state = match["id"] if match["id"] is not None else _listed_id(value, int(match["at"]))
    if state is None:
        return dict(DEFINITION)
    if moved := _TRANSITION.match(match["rest"]):
        return {"kind": "transition", "state": state, "index": int(moved["index"])}
    return {"kind": "state", "state": state}


def _listed_id(value: Any, at: int) -> str | None:
    """The id of the ``at``-th state of a definition whose ``states`` is a list; None when it has none."""
    states = value.get("states") if isinstance(value, dict) else None
    if isinstance(states, list) and at < len(states) and isinstance(states[at], dict):
        sid = states[at].get("id")
        return sid if isinstance(sid, str) else None
    return None


def _value_of(text: str) -> Any:
    import json

    try:
        return json.loads(text.removeprefix("\ufeff"))
    except (ValueError, RecursionError):
        return None
