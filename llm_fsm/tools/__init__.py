"""Tools: functions the model may call in the states that list them, run by the runtime.

:mod:`llm_fsm.tools.calling` binds a definition's tools to their code, checks each call the model
asks for (allowed here, arguments against the schema, approval) and runs it with its time limit;
:mod:`llm_fsm.tools.mcp` reaches tools served by MCP servers.
"""
