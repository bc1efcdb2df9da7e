"""What a long conversation keeps besides its context and its history window.

=================  =================================================================================
module             holds
=================  =================================================================================
``working``        working memory: named text slots the model and code keep up to date (its writes,
                   their bounds, the handlers' :class:`MemoryAccess`, the prompt's sections)
``summaries``      running summaries: what is due, what the prompt shows, the summary call, its outcome
``spec``           what a definition declares about both, and the summary part of a snapshot
                   (pydantic models only: ``definition.py`` and ``engine.py`` import them)
=================  =================================================================================

Not to be confused with the ``memory:`` conversation store, which keeps whole conversations in a
dict (:mod:`llm_fsm.store.in_process`).

The working-memory functions the rest of the runtime calls are re-exported here, so that
``from llm_fsm import memory; memory.current(definition, snapshot)`` reads as what it does.
All of these modules are small and import nothing heavy: importing a definition loads them.
"""

from __future__ import annotations

from llm_fsm.memory.spec import MAX_SLOTS, MemorySpec, RunningSummary, Slot, StateSummaries, SummarySpec
from llm_fsm.memory.summaries import SummaryRun
from llm_fsm.memory.working import MemoryAccess, code_update, current, sections, with_memory_update

__all__ = [
    "MAX_SLOTS",
    "MemoryAccess",
    "MemorySpec",
    "RunningSummary",
    "Slot",
    "StateSummaries",
    "SummaryRun",
    "SummarySpec",
    "code_update",
    "current",
    "sections",
    "with_memory_update",
]
