"""``llm-fsm edit FILE``: a definition file edited in the browser, as a graph with forms, checked as it changes.

The room holds the editor's local server (:mod:`llm_fsm.editor.app`), the file it edits and nothing else
(:mod:`llm_fsm.editor.document`), the writer that changes only what the author changed
(:mod:`llm_fsm.editor.json_edit`), the checks of ``validate --strict`` placed on the graph
(:mod:`llm_fsm.editor.checks`), what ``--hooks`` provides by name (:mod:`llm_fsm.editor.catalog`), the chat
beside it (:mod:`llm_fsm.editor.tryit`) and the page (``static/``). Nothing here is imported by ``llm_fsm``.
"""
