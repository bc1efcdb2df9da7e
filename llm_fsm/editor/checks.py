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
"""

from __future__ import annotations

import os
import re
from typing import Any

DEFINITION = {"kind": "definition"}
# states.ID or states[I], then (optionally) .transitions[I]
_STATE = re.compile(r"^states(?:\.(?P<id>[^.\[]+)|\[(?P<at>\d+)\])(?P<rest>.*)$")
_TRANSITION = re.compile(r"^\.transitions\[(?P<index>\d+)\]")
_GLOBAL = re.compile(r"^global_transitions\[(?P<index>\d+)\]")


def check(text: str, path: str | os.PathLike[str], value: Any = None) -> list[dict[str, Any]]:
    """Every diagnostic ``validate --strict`` would report on ``text`` saved at ``path``, as
    ``Diagnostic.to_dict()`` plus its ``element``. ``value`` is the text's JSON value, for states written as a
    list (read from ``text`` when not given)."""
    from llm_fsm.authoring.analysis import Diagnostic, analyze_text

    source = str(path)
    try:
        diagnostics = analyze_text(text, source=source, strict=True)
    except Exception as exc:  # a bug in the analysis: one problem, as validate reports it, not a failed request
        message = f"could not analyze the file: {type(exc).__name__}: {exc}"
        diagnostics = [Diagnostic("error", "internal", "", None, None, message, "please report this", source)]
    if value is None and diagnostics and "states[" in "".join(d.path for d in diagnostics):
        value = _value_of(text)
    found = []
    for diagnostic in diagnostics:
        entry = diagnostic.to_dict()
        own = diagnostic.file in (None, source)
        entry["element"] = element(diagnostic.path, value) if own else dict(DEFINITION)
        found.append(entry)
    return found


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
