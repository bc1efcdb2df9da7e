"""Tools for writing definitions: they read a definition and never run a conversation.

``analysis`` (the warnings of ``llm-fsm validate``), ``condition_solver`` (a context on which
transitions' conditions hold), ``diagram`` (Mermaid and DOT export) and ``paths`` (the shortest
paths that together visit every state).
"""
