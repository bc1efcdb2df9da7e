"""The checks the loader runs on a whole raw definition (a dict, before and beside validation): states,
targets and fallbacks exist, conditions and approval rules are valid JsonLogic, schemas and patterns
compile, tools and MCP servers are well named, and a terminal state can be reached."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from llm_fsm.definition.graph import reachable
from llm_fsm.definition.models import RETURN
from llm_fsm.definition.wording import did_you_mean
from llm_fsm.logic import rules as logic

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what providers accept as a function name
# error(loc, message, code=..., hint=...): how a check reports a problem (the loader's _Reader.error)
Report = Callable[..., None]


class FileChecks:
    """Each check reports every problem it finds through ``error``; none stops at the first."""

    def __init__(self, error: Report) -> None:
        self.error = error

    def graph(self, data: dict[str, Any], *, ids_known: bool = True) -> None:
        states = data.get("states")
        if not isinstance(states, dict):
            return
        # When states of a list lack their id, which states there are is not known: names are not judged.
        known = states if ids_known else None
        if known is not None and not states:
            self.error(("states",), "a definition needs at least one state", code="no_states")
            return
        for sid in states:
            if not _IDENTIFIER.match(sid):
                self.error(
                    ("states", sid), f"state id '{sid}' is not a valid identifier (letters, digits, _)", code="bad_id"
                )
        initial = data.get("initial_state")
        if known is not None and isinstance(initial, str) and initial not in states:
            self.error(
                ("initial_state",),
                f"unknown initial state '{initial}'",
                code="unknown_state",
                hint=did_you_mean(initial, states),
            )
        for sid, state in dict_items(states):
            self._check_transitions(("states", sid, "transitions"), get(state, "transitions"), known)
            self._check_refinement(sid, state, known)
        self._check_global_transitions(data.get("global_transitions"), known)
        if known is not None and isinstance(initial, str) and initial in states:
            self._check_terminal_reachable(initial, states, data.get("global_transitions"))
        self._check_schemas(("context_schema",), data.get("context_schema"), per_key=True)

    def _check_global_transitions(self, moves: Any, states: dict[str, Any] | None) -> None:
        """Global transitions: targets and conditions as a state's; each state they except exists."""
        self._check_transitions(("global_transitions",), moves, states)
        for i, move in _list_items(moves):
            for j, sid in _list_items(get(move, "except_states")):
                if states is not None and isinstance(sid, str) and sid not in states:
                    loc = ("global_transitions", i, "except_states", j)
                    self.error(loc, f"unknown state '{sid}'", code="unknown_state", hint=did_you_mean(sid, states))

    def _check_refinement(self, sid: str, state: Any, states: dict[str, Any] | None) -> None:
        """A fallback state must exist; patterns must compile; schemas must be valid JSON Schemas.
        ``states`` is None when which states there are is not known."""
        fallback = get(state, "fallback_state")
        if states is not None and isinstance(fallback, str) and fallback not in states:
            self.error(
                ("states", sid, "fallback_state"),
                f"unknown state '{fallback}'",
                code="unknown_state",
                hint=f'a fallback is a state; "{RETURN}" is a transition target only'
                if fallback == RETURN
                else did_you_mean(fallback, states),
            )
        if get(state, "on_exhausted") == "fallback_state" and not fallback:
            self.error(
                ("states", sid, "on_exhausted"),
                'on_exhausted is "fallback_state" but no fallback_state is set',
                code="missing_fallback",
            )
        for i, check in _list_items(get(state, "checks")):
            loc = ("states", sid, "checks", i)
            if get(check, "kind") == "regex" and isinstance(get(check, "pattern"), str):
                try:
                    re.compile(check["pattern"])
                except (re.error, OverflowError, RecursionError, ValueError) as exc:
                    reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
                    self.error((*loc, "pattern"), f"invalid regular expression: {reason}", code="bad_regex")
            if get(check, "kind") == "schema":
                self._check_schemas((*loc, "schema"), get(check, "schema"))

    def _check_schemas(self, loc: tuple[Any, ...], value: Any, *, per_key: bool = False) -> None:
        if not isinstance(value, dict) or not value:
            return
        from llm_fsm.schemas import schema_problem  # jsonschema is imported only for files that use schemas

        items = list(value.items()) if per_key else [(None, value)]
        for key, schema in items:
            where = (*loc, key) if key is not None else loc
            problem = schema_problem(schema) if isinstance(schema, dict) else None
            if problem:
                self.error(where, f"invalid JSON Schema: {problem}", code="bad_schema")

    def _check_transitions(self, where: tuple[Any, ...], transitions: Any, states: dict[str, Any] | None) -> None:
        """The transitions listed at ``where`` (a state's, or the global ones) lead to states or to
        ``"$return"``, and their conditions are valid JsonLogic."""
        for i, transition in _list_items(transitions):
            target = get(transition, "target_state")
            loc = (*where, i)
            if states is not None and isinstance(target, str) and target not in states and target != RETURN:
                hint = did_you_mean(target, [*states, RETURN])
                if hint is None and target.lower().lstrip("$") in ("return", "back", "previous"):
                    hint = f'write "{RETURN}" to go back to the state the conversation came from'
                self.error((*loc, "target_state"), f"unknown state '{target}'", code="unknown_state", hint=hint)
            for j, condition in _list_items(get(transition, "conditions")):
                rule = get(condition, "logic")
                for spot, message in logic.check_rule(rule) if rule is not None else ():
                    path = (*loc, "conditions", j, "logic")
                    self.error(path, f"{spot + ': ' if spot else ''}{message}", code="logic")

    def tools(self, data: dict[str, Any]) -> None:
        """Tool names, schemas, approval rules, servers; the tools each state lists must be declared
        (or may come from an MCP server, which is asked when a conversation starts)."""
        tools, servers = data.get("tools"), data.get("mcp_servers")
        declared = tools if isinstance(tools, dict) else {}
        known_servers = servers if isinstance(servers, dict) else {}
        for name, tool in dict_items(declared):
            self._check_tool(("tools", name), name, tool, known_servers)
        for name, server in dict_items(known_servers):
            if isinstance(server, dict) and (server.get("command") is None) == (server.get("url") is None):
                self.error(
                    ("mcp_servers", name), "an MCP server has a command or a url (one of the two)", code="bad_server"
                )
        states = data.get("states")
        for sid, state in dict_items(states if isinstance(states, dict) else {}):
            for i, name in _list_items(get(state, "tools")):
                if isinstance(name, str) and name not in declared and not known_servers:
                    hint = did_you_mean(name, declared) or 'declare it in the top-level "tools"'
                    self.error(("states", sid, "tools", i), f"unknown tool '{name}'", code="unknown_tool", hint=hint)

    def _check_tool(self, loc: tuple[Any, ...], name: str, tool: Any, known_servers: dict[str, Any]) -> None:
        """One declared tool: its name, its parameters' schema, its approval rule, its MCP server."""
        if not _TOOL_NAME.match(name):
            self.error(loc, f"tool name '{name}' is not valid (1 to 64 letters, digits, _ or -)", code="bad_id")
        parameters = get(tool, "parameters")
        if isinstance(parameters, dict):
            self._check_schemas((*loc, "parameters"), parameters)
            if parameters.get("type", "object") != "object":
                self.error(
                    (*loc, "parameters"), "a tool's parameters are a JSON Schema of type object", code="bad_schema"
                )
        rule = get(get(tool, "approval"), "when")
        if rule is not None:
            for where, message in logic.check_rule(rule):
                self.error((*loc, "approval", "when"), f"{where + ': ' if where else ''}{message}", code="logic")
            self._check_approval_reads((*loc, "approval", "when"), rule, parameters)
        server = get(tool, "mcp_server")
        if isinstance(server, str) and server not in known_servers:
            hint = did_you_mean(server, known_servers)
            self.error((*loc, "mcp_server"), f"unknown MCP server '{server}'", code="unknown_server", hint=hint)

    def _check_approval_reads(self, loc: tuple[Any, ...], rule: Any, parameters: Any) -> None:
        """An approval rule reads ``args.<parameter>`` or ``context.<key>``: anything else is always
        missing, and a rule that reads a missing value would let every call through unasked."""
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        for path in sorted(logic.keys_read(rule)):
            root, _, rest = path.partition(".")
            argument = rest.split(".")[0]
            if root not in ("args", "context"):
                hint = f"did you mean 'args.{path}'?" if properties is None or path in properties else None
                message = f"an approval rule reads args.<argument> or context.<key>, not '{path}'"
                self.error(loc, message, code="approval_var", hint=hint)
            elif root == "args" and argument and isinstance(properties, dict) and argument not in properties:
                message = f"'{path}': the tool has no argument '{argument}'"
                self.error(loc, message, code="approval_var", hint=did_you_mean(argument, properties))

    def _check_terminal_reachable(self, initial: str, states: dict[str, Any], moves: Any) -> None:
        if not _graph_is_known(states, moves):  # a malformed transition is reported: what it would change is unknown
            return
        edges = {sid: _known_targets(sid, state, states, moves) for sid, state in states.items()}
        if not any(not get(states[s], "transitions") for s in reachable([initial], edges)):
            hint = "add a final state with no transitions and a transition leading to it"
            if moves:
                hint += " (a global transition does not apply in the states its except_states lists)"
            self.error(
                ("initial_state",),
                "no terminal state (a state without transitions) is reachable from the initial state",
                code="no_terminal",
                hint=hint,
            )


def _graph_is_known(states: dict[str, Any], moves: Any) -> bool:
    """Every state's transitions, and the global ones, are a list (or unset) of objects that name a target
    (a global one's except_states a list of text)."""
    for transitions in [*(get(state, "transitions") for state in states.values()), moves]:
        if transitions is not None and not isinstance(transitions, list):
            return False
        if not all(isinstance(get(t, "target_state"), str) for t in transitions or ()):
            return False
    excepted = [get(move, "except_states") for move in moves or ()]
    return all(e is None or (isinstance(e, list) and all(isinstance(s, str) for s in e)) for e in excepted)


def _known_targets(sid: str, state: Any, states: dict[str, Any], moves: Any) -> list[str]:
    """The states a raw state's transitions lead to, and the global ones that apply there (not in a
    terminal state, nor its except_states, nor to itself), leaving out targets that name no state.
    ``"$return"`` leads back to a state visited before: it reaches nothing new."""
    own = [get(t, "target_state") for _, t in _list_items(get(state, "transitions"))]
    anywhere = [
        get(move, "target_state") for _, move in _list_items(moves) if sid not in (get(move, "except_states") or ())
    ]
    targets = [*own, *anywhere] if own else []
    return [target for target in targets if isinstance(target, str) and target in states]


def get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def dict_items(obj: Any) -> list[tuple[str, Any]]:
    return list(obj.items()) if isinstance(obj, dict) else []


def _list_items(obj: Any) -> list[tuple[int, Any]]:
    return list(enumerate(obj)) if isinstance(obj, list) else []
