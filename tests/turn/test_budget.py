"""A turn's budget (llm_fsm.turn.budget): the calls counted and their usage summed, from the first call on."""

from __future__ import annotations

from llm_fsm.llm import LLMResponse, Usage
from llm_fsm.turn.budget import Budget


def test_a_turn_that_made_no_call_used_nothing():
    budget = Budget(3)
    assert budget.calls == 0 and budget.usage == Usage() and budget.left()


def test_one_call_is_the_turns_usage_and_the_next_ones_add_to_it():
    budget = Budget(2)
    first, second = Usage(10, 2, 12, 0.5, 4, 1), Usage(7, 3, 10, None, 0, 2)
    budget.count(LLMResponse("a", first))
    assert budget.usage == first and budget.calls == 1 and budget.left()
    budget.count(LLMResponse("b", second))
    assert budget.usage == Usage(17, 5, 22, 0.5, 4, 3) and not budget.left()
    assert first == Usage(10, 2, 12, 0.5, 4, 1)  # the first call's own usage is left as it was


def test_budgets_do_not_share_what_they_count():
    one, other = Budget(3), Budget(3)
    one.count(LLMResponse("a", Usage(1, 1, 2)))
    assert other.usage == Usage() and other.calls == 0
