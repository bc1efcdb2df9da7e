"""What a long conversation keeps besides its context and its history window.

=================  =================================================================================
module             holds
=================  =================================================================================
``working``        working memory: named text slots the model and code keep up to date (its writes,
                   their bounds, the handlers' :class:`MemoryAccess`, the prompt's sections)
``summaries``      running summaries: what is due, what the prompt shows, the summary call, its outcome
=================  =================================================================================

What a definition declares about both, and the summary part of a snapshot, are definition models:
:mod:`llm_fsm.definition.memory` (re-exported here too).

Not to be confused with the ``memory:`` conversation store, which keeps whole conversations in a
dict (:mod:`llm_fsm.store.in_process`).

The working-memory functions the rest of the runtime calls are re-exported here, so that
``from llm_fsm import memory; memory.current(definition, snapshot)`` reads as what it does. Each name
is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_fsm.definition.memory import MAX_SLOTS, MemorySpec, RunningSummary, Slot, StateSummaries, SummarySpec
    from llm_fsm.memory.summaries import SummaryRun
    from llm_fsm.memory.working import MemoryAccess, code_update, current, sections, with_memory_update

_HOMES = {
    **dict.fromkeys(
        ["MAX_SLOTS", "MemorySpec", "RunningSummary", "Slot", "StateSummaries", "SummarySpec"], "definition.memory"
    ),
    "SummaryRun": "memory.summaries",
    **dict.fromkeys(["MemoryAccess", "code_update", "current", "sections", "with_memory_update"], "memory.working"),
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(f"llm_fsm.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llm_fsm.memory' has no attribute {name!r}")


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
