"""``benchmarks/bench_workflow.py``: issue 48's figure, a 5-step workflow with 3 tool calls costs 5 model calls."""

from __future__ import annotations

import pytest


def test_the_workflow_costs_five_model_calls_at_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from benchmarks import bench_workflow

    monkeypatch.setattr(litellm, "completion", litellm.completion)  # the benchmark replaces it: put it back after
    automatic, not_automatic = bench_workflow.measure(True, 1), bench_workflow.measure(False, 1)
    assert (automatic["calls"], automatic["counted"]) == (5, 5)
    assert [len(step[4]) for step in automatic["steps"]] == [1, 1, 0, 1, 0]  # 3 tool calls in 5 steps
    assert (not_automatic["calls"], len(not_automatic["steps"])) == (8, 5)  # reading each result: one call more
    assert bench_workflow.table({True: automatic, False: not_automatic})[2].startswith("| 1 | act | research → read")
