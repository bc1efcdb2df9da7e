"""The state graph walk shared by the loader, the analysis and the path finder."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import llm_fsm
from llm_fsm.definition.graph import predecessors, reachable, shortest_path, successors

EDGES = {"a": ["b", "c"], "b": ["d"], "c": ["d", "a"], "d": [], "lonely": ["d"]}


def definition(**states: dict) -> llm_fsm.FSMDefinition:
    return llm_fsm.load({"name": "g", "initial_state": "a", "states": states})


def test_successors_are_distinct_targets_in_the_order_written_with_fallbacks_on_request():
    fsm = definition(
        a={"transitions": [{"target_state": "c"}, {"target_state": "b"}, {"target_state": "c"}]},
        b={"transitions": [{"target_state": "c"}], "fallback_state": "a"},
        c={},
    )
    assert successors(fsm) == {"a": ["c", "b"], "b": ["c"], "c": []}
    assert successors(fsm, fallbacks=True)["b"] == ["c", "a"]


def test_predecessors_reverse_every_edge():
    assert predecessors(EDGES) == {"a": ["c"], "b": ["a"], "c": ["a"], "d": ["b", "c", "lonely"], "lonely": []}


def test_reachable_includes_the_starts_and_follows_cycles():
    assert reachable(["a"], EDGES) == {"a", "b", "c", "d"}
    assert reachable(["d"], EDGES) == {"d"}
    assert reachable(["d", "lonely"], predecessors(EDGES)) == {"a", "b", "c", "d", "lonely"}


def test_shortest_path_takes_the_fewest_moves_and_the_first_written_on_a_tie():
    assert shortest_path("a", {"d"}, EDGES) == ["a", "b", "d"]
    assert shortest_path("c", {"b"}, EDGES) == ["c", "a", "b"]
    assert shortest_path("a", {"a"}, EDGES) == ["a"]
    assert shortest_path("d", {"a"}, EDGES) is None


class Counting(Mapping[str, list[str]]):
    """Edges that count how often each state's successors are read."""

    def __init__(self, edges: dict[str, list[str]]) -> None:
        self.edges, self.reads = edges, dict.fromkeys(edges, 0)

    def __getitem__(self, state: str) -> list[str]:
        self.reads[state] += 1
        return self.edges[state]

    def __iter__(self) -> Iterator[str]:
        return iter(self.edges)

    def __len__(self) -> int:
        return len(self.edges)


def test_walks_read_each_state_once():
    n = 2000
    chain = {f"s{i}": [f"s{j}" for j in range(i + 1, min(i + 4, n))] for i in range(n)}
    for walk in (lambda e: reachable(["s0"], e), lambda e: shortest_path("s0", {f"s{n - 1}"}, e)):
        edges = Counting(chain)
        walk(edges)
        assert max(edges.reads.values()) == 1
