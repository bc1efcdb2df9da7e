"""The working state of one turn: what it reads (definition, base snapshot, hooks, settings) and what it
changes as it goes: the context and provenance, and the small objects that own the rest (the calls' budget, the
tool use, the replies judged, the transcript, the working memory).

Every unit of a turn (:mod:`llm_fsm.turn.requests`, :mod:`llm_fsm.turn.verdict`, :mod:`llm_fsm.turn.firing`,
:mod:`llm_fsm.turn.tool_rounds`, :mod:`llm_fsm.turn.outcomes`) is a plain function of this state; the loop in
:mod:`llm_fsm.turn.runner` drives them. Nothing outside it changes until the turn's snapshot is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from llm_fsm.definition.clearing import removed, written
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.hooks import Hooks
from llm_fsm.memory.working import MemoryAccess
from llm_fsm.snapshot import Origin, PendingEvent, Snapshot
from llm_fsm.telemetry import NO_TRACE, NoTrace
from llm_fsm.turn.budget import Budget
from llm_fsm.turn.engine import record
from llm_fsm.turn.judged import Judged
from llm_fsm.turn.steps import TurnSettings
from llm_fsm.turn.tool_use import ToolUse
from llm_fsm.turn.transcript import Transcript

if TYPE_CHECKING:
    from llm_fsm.telemetry.spans import TurnTrace


class Working:
    """Everything one turn from ``base`` works on: ``user`` text, or None for the opening or a resume.

    ``handle`` is passed to handlers as ``conversation``.
    """

    def __init__(
        self,
        definition: FSMDefinition,
        base: Snapshot,
        hooks: Hooks,
        settings: TurnSettings,
        *,
        user: str | None,
        note: str | None = None,
        handle: Any = None,
        resuming: PendingEvent | None = None,
        paused: Snapshot | None = None,
        decision: Mapping[str, Any] | None = None,
        acting: bool = False,
    ) -> None:
        self.definition = definition
        self.base = base
        self.hooks = hooks
        self.settings = settings
        self.user = user
        self.note = note  # the user-turn text of an opening or a resume
        self.handle = handle
        self.resuming = resuming  # the pause this turn continues: its handlers that ran are not run again
        self.paused = paused  # the snapshot that paused (a tool approval's checkpoint is made from it)
        self.decision = decision  # a person's decision about the tool call the pause waits for
        self.acting = acting  # a turn of a state that acts on its own: its prompt's user turn is ``note``
        self.step: Literal["turn", "act", "automatic"] = "act" if acting else "turn"  # TurnResult.step
        self.exchange = True  # whether the turn records an exchange (an automatic move that says nothing: no)
        self.budget = Budget(settings.max_calls_per_turn)  # the calls made and their usage, against the limit
        self.judged = Judged()  # the problems found in the replies read, and the last reply's decision
        # the context and provenance as the turn changes them: replaced on each change, never mutated
        self.context: dict[str, Any] = dict(base.context)
        self._found = self.context  # the context as the turn found it, until the turn replaces it
        self.provenance: dict[str, Origin] = dict(base.provenance)
        self.memory = MemoryAccess(definition, base.memory)  # handlers' ``memory``: the turn's working memory
        self.fallback = False  # no reply accepted: the turn says the fallback message
        self.transcript = Transcript()  # the messages sent to the model: the prompt, tool rounds, a correction
        self.tools = ToolUse(definition, base.state, settings)  # the state's tools and the calls made of them
        self._snapshot: Snapshot | None = None
        # the index commit() will give this turn: the opening is turn 0, a resume counts as a turn of its own
        self.turn_index = base.turns + (1 if user is not None or base.history else 0)
        self.trace: TurnTrace | NoTrace = NO_TRACE  # the driver's, when the turn is traced
        # states that leave this level for a level below it (llm_fsm.subflows.stack): reached without
        # this level's handlers or summaries, since the level is dropped at once
        self.exits: frozenset[str] = frozenset()

    @property
    def said(self) -> str | None:
        """What the user said that this turn answers: its text, or, where it goes on after a person decided about a
        tool call, the text of the turn that asked for the call (guided values and arguments are taken from it)."""
        if self.user is None and self.decision is not None and self.base.history:
            return self.base.history[-1].user
        return self.user

    @property
    def opening(self) -> bool:
        """Whether this is the conversation's first turn (no user text, nothing said yet)."""
        return self.user is None and not self.base.history and self.exchange

    def snapshot(self) -> Snapshot:
        """The snapshot every decision of this turn is made on: the base with the working context."""
        if self.context is self._found:  # not replaced yet: a copy of the base's, which says the same (no copy made)
            return self.base
        if self._snapshot is None or self._snapshot.context is not self.context:  # replaced, not changed
            self._snapshot = self.base.model_copy(update={"context": self.context})
        return self._snapshot

    def set(self, context: dict[str, Any], update: Mapping[str, Any], by: str) -> None:
        """Take ``context`` as the working one, the keys of ``update`` written by ``by`` (a None value: removed)."""
        self.context = context
        self.provenance = record(self.provenance, written(update), by, self.turn_index, removed(update))
