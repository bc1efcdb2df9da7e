"""Tools for writing definitions: they read a definition and never run a conversation.

``analysis`` (the warnings of ``llm-fsm validate``), ``requirements`` (what a transition's conditions
require of each key, and why some can never hold), ``condition_solver`` (a context on which
transitions' conditions hold), ``diagram`` (Mermaid and DOT export) and ``paths`` (the shortest paths
that together visit every state).
"""
