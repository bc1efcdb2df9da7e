"""A server's tools made a conversation's tools: :func:`register` one server's, :func:`connect` a definition's."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_fsm.tools.mcp.errors import MCPError
from llm_fsm.tools.mcp.server import MCPServer

if TYPE_CHECKING:
    from llm_fsm.definition.models import FSMDefinition
    from llm_fsm.hooks import Hooks


def register(hooks: Hooks, server: MCPServer, names: Iterable[str] | None = None) -> list[str]:
    """Make the server's tools (all, or those ``names``) tools of ``hooks``, with the server's schemas
    and descriptions; starts the server. Raises :class:`MCPError` for a name the server lacks."""
    offered = {tool.name: tool for tool in server.tools()}
    wanted = list(offered) if names is None else list(dict.fromkeys(names))
    for name in wanted:
        tool = offered.get(name)
        if tool is None:
            from llm_fsm.definition.wording import did_you_mean

            hint = did_you_mean(name, list(offered))
            raise MCPError(f"the MCP server '{server.name}' has no tool '{name}'" + (f" ({hint})" if hint else ""))
        own_key = "idempotency_key" in ((tool.parameters or {}).get("properties") or {})
        caller = _caller(server, name, own_key=own_key)
        hooks.add_tool(caller, name=name, description=tool.description, parameters=tool.parameters)
    return wanted


def _caller(server: MCPServer, name: str, *, own_key: bool = False) -> Callable[..., Awaitable[Any]]:
    """The tool function of one MCP tool: the call's key goes in ``_meta``, and also as the tool's own
    ``idempotency_key`` argument when its schema has one (``own_key``): the runtime's keyword takes that
    name, so the argument would otherwise never reach the server; the runtime's key, the same in every
    retry of the turn, is the one a server that dedupes by it needs."""

    async def call(*, idempotency_key: str | None = None, **arguments: Any) -> Any:
        meta = {"idempotency_key": idempotency_key} if idempotency_key else {}
        if own_key and idempotency_key:
            arguments = {**arguments, "idempotency_key": idempotency_key}
        return await server.acall(name, arguments, meta=meta)

    call.__name__ = name
    call.mcp_tool = True  # type: ignore[attr-defined]  # its schema is the server's (see binding.bind)
    return call


def connect(
    definition: FSMDefinition,
    hooks: Hooks,
    *,
    relative_to: str | os.PathLike[str] | None = None,
    servers: Sequence[MCPServer] = (),
) -> list[MCPServer]:
    """Start the definition's ``mcp_servers`` (stdio ones in ``relative_to``, the definition's folder)
    and ``servers``, and register with ``hooks`` the tools the states list that they serve and that
    ``hooks`` has no code for. A tool declared with ``mcp_server`` comes from that server only.
    Returns every server started (close them when done; they are closed at exit anyway)."""
    listed = [name for state in definition.states.values() for name in state.tools]
    needed = [name for name in dict.fromkeys(listed) if name not in hooks.tools]
    started: list[MCPServer] = []
    named = {
        key: MCPServer.from_spec(
            {"name": key, **spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)},
            relative_to=Path(relative_to) if relative_to is not None else None,
        )
        for key, spec in definition.mcp_servers.items()
    }
    try:
        for key, server in [*named.items(), *((server.name, server) for server in servers)]:
            server.start()
            started.append(server)
            offered = {tool.name for tool in server.tools()}
            declared = {name: tool.mcp_server for name, tool in definition.tools.items()}
            mine = [  # what it serves that is still missing; and what is declared as its, served or not (an error)
                name
                for name in needed
                if name not in hooks.tools
                and (declared.get(name) == key or (name in offered and declared.get(name) is None))
            ]
            register(hooks, server, mine)
    except BaseException:
        for server in started:
            server.close()
        raise
    return started
