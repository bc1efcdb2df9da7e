"""What one turn does with the state's tools: the tools it offers, in which form, how many rounds it may make,
and the calls it has run so far (the rounds themselves: :mod:`llm_fsm.turn.tool_rounds`)."""

from __future__ import annotations

from collections import Counter
from functools import cached_property

from llm_fsm.definition.models import FSMDefinition, State
from llm_fsm.tools.calling import BoundTool, ToolMode, ToolRun
from llm_fsm.turn.steps import TurnSettings


class ToolUse:
    """The tool calls of one turn in ``state``: ``runs`` (each call as it ran, refused or failed), ``rounds``
    (the rounds made), and the calls of each tool given an idempotency key (``keyed``)."""

    def __init__(self, definition: FSMDefinition, state: str, settings: TurnSettings) -> None:
        self.definition = definition
        self.state_name = state
        self.settings = settings
        self.runs: list[ToolRun] = []
        self.rounds = 0

    @cached_property
    def keyed(self) -> Counter[str]:
        """Calls of each tool given an idempotency key (made when a tool first asks: a turn without tools pays
        nothing for it)."""
        return Counter()

    @property
    def state(self) -> State:
        """The state the turn began in (looked up when asked: a turn that never asks may begin anywhere)."""
        return self.definition.states[self.state_name]

    def mode(self) -> ToolMode:
        """How the model is offered the tools: natively, or as a JSON form of the reply."""
        return self.settings.tool_mode()

    def limit(self) -> int:
        """The rounds of calls the state allows in one turn."""
        limit = self.state.max_tool_rounds
        return self.definition.max_tool_rounds if limit is None else limit

    def offered(self) -> list[BoundTool]:
        """The tools the model may call now (none once the state allows no rounds of calls)."""
        # a state that allows no rounds gets no tools at all: the model is not offered calls it may not make
        if self.limit() == 0:
            return []
        bound = self.settings.tools
        return [bound[name] for name in self.state.tools if name in bound]
