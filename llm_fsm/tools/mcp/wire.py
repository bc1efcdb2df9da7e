"""MCP's wire forms as plain data: the tools a server lists, and a tool's result as JSON data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_fsm.tools.mcp.errors import MCPToolError, one_line


@dataclass(frozen=True)
class MCPTool:
    """A tool as the server lists it; ``parameters`` is its JSON Schema (the MCP ``inputSchema``)."""

    name: str
    description: str
    parameters: dict[str, Any]


def tool_result(result: Mapping[str, Any], *, tool: str = "?", server: str = "?") -> Any:
    """An MCP ``CallToolResult`` (wire form) as JSON data, or :class:`MCPToolError` when ``isError``.

    ``structuredContent`` when present; else one content item (text parsed as JSON when it is JSON)
    or a list of them; images and other binary content become a short description.
    """
    items = [_content(item) for item in result.get("content") or []]
    if result.get("isError"):
        text = " ".join(str(i) for i in items if isinstance(i, str)) or json.dumps(items)
        raise MCPToolError(f"the MCP tool '{tool}' on '{server}' failed: {one_line(text)}", tool=tool, server=server)
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    if not items:
        return None
    return items[0] if len(items) == 1 else items


def _content(item: Mapping[str, Any]) -> Any:
    kind = item.get("type")
    if kind == "text":
        text = str(item.get("text", ""))
        try:
            return json.loads(text)
        except ValueError:
            return text
    if kind in ("image", "audio"):
        data = str(item.get("data", ""))
        return {"type": kind, "mime_type": item.get("mimeType"), "bytes": len(data) * 3 // 4}
    if kind == "resource":
        resource = item.get("resource") or {}
        described = {"type": "resource", "uri": resource.get("uri"), "mime_type": resource.get("mimeType")}
        if "text" in resource:
            described["text"] = resource["text"]
        return described
    if kind == "resource_link":
        return {"type": "resource_link", "uri": item.get("uri"), "name": item.get("name")}
    return {"type": kind}


async def next_page(session: Any, cursor: str) -> Any:
    try:
        from mcp.types import PaginatedRequestParams
    except ImportError:  # mcp < 1.12
        return await session.list_tools(cursor)
    return await session.list_tools(params=PaginatedRequestParams(cursor=cursor))


def wire_form(model: Any) -> dict[str, Any]:
    """An SDK model as its JSON wire form (camelCase), the same in mcp 1.x and 2.x."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
