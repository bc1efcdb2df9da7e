"""What one turn has spent against its limit: model calls and their usage, corrective calls, the time it took.

The turn's loop (:mod:`llm_fsm.turn.runner`) and its judgment of replies (:mod:`llm_fsm.turn.verdict`) count
calls here and ask whether another fits; the result (:mod:`llm_fsm.turn.outcomes`) reads the totals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llm_fsm.llm import LLMResponse, Usage

NO_USAGE = Usage()  # a turn's usage before its first call: shared, as a Usage is frozen (two fewer made a turn)


@dataclass
class Budget:
    """The model calls a turn may make (``limit``: the settings' ``max_calls_per_turn``) and what it has spent."""

    limit: int
    calls: int = 0
    usage: Usage = NO_USAGE
    refinements: int = 0  # corrective calls for failed checks or refused values (within the state's max_retries)
    started: float = field(default_factory=time.perf_counter)

    def count(self, response: LLMResponse) -> None:
        """One call made: its tokens join the turn's."""
        self.calls += 1
        if self.usage is NO_USAGE and type(response.usage) is Usage:  # the first call's: nothing to add it to
            self.usage = response.usage  # the sum it would make, equal field by field (a Usage is frozen)
        else:
            self.usage += response.usage

    def left(self) -> bool:
        """Whether one more call fits in the turn."""
        return self.calls < self.limit

    def elapsed(self) -> float:
        """Seconds since the turn began."""
        return time.perf_counter() - self.started
