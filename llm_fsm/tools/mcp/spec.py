"""Server specs as definitions and MCP client configs write them: ``"python server.py"``, a URL, or an object."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llm_fsm.tools.mcp.errors import MCPError, one_line

_SPEC_KEYS = ("command", "args", "url", "env", "cwd", "name", "timeout", "headers")


def server_options(spec: str | Mapping[str, Any], relative_to: Path | None) -> dict[str, Any]:
    """The keyword arguments of :class:`~llm_fsm.tools.mcp.MCPServer` that ``spec`` stands for (see
    :meth:`~llm_fsm.tools.mcp.MCPServer.from_spec`); the command comes as ``command``."""
    base = _folder(relative_to)
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith(("http://", "https://")):
            return {"url": text}
        args = shlex.split(text)
        if not args:
            raise MCPError("invalid MCP server spec: it is empty")
        return {"command": args, "cwd": base}
    if not isinstance(spec, Mapping):
        raise MCPError(f"invalid MCP server spec: expected a string or an object, not {type(spec).__name__}")
    try:
        return _from_mapping(spec, base)
    except (TypeError, ValueError) as exc:  # a wrong type or value in the spec: say which, in one line
        raise MCPError(f"invalid MCP server spec: {one_line(str(exc))}") from None


def _from_mapping(spec: Mapping[str, Any], base: str | None) -> dict[str, Any]:
    from llm_fsm.definition.wording import did_you_mean

    for key in spec:
        if key not in _SPEC_KEYS:
            hint = did_you_mean(key, list(_SPEC_KEYS))
            raise MCPError(f"invalid MCP server spec: unknown key '{key}'" + (f" ({hint})" if hint else ""))
    options = {k: spec[k] for k in ("name", "timeout", "headers") if k in spec}
    if "url" in spec:
        if "command" in spec:
            raise MCPError("invalid MCP server spec: give a command or a url, not both")
        return {"url": str(spec["url"]), **options}
    command = spec.get("command")
    if isinstance(command, str):
        command = [command] if "args" in spec else shlex.split(command)
    if not command or not isinstance(command, list):
        raise MCPError("invalid MCP server spec: 'command' must be a non-empty string or list, or give a 'url'")
    args = [*command, *spec.get("args", [])]
    cwd = spec.get("cwd")
    cwd = str(Path(base, cwd)) if cwd is not None and base is not None else (cwd or base)
    return {"command": args, "env": spec.get("env"), "cwd": cwd, **options}


def _folder(relative_to: Path | None) -> str | None:
    if relative_to is None:
        return None
    path = Path(relative_to)
    return str(path.parent if path.is_file() else path)
