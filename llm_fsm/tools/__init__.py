"""Tools the runtime can call: :mod:`llm_fsm.tools.mcp` adapts tools served by MCP servers."""

__all__: list[str] = []
