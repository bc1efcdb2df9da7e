"""What flows along the state graph: strongly connected components, and marks carried to every state
a path reaches (the analysis asks "is this key collected on some path to here?" for all keys at once)."""

from __future__ import annotations

import random

from llm_fsm.definition.graph import carry, components, reachable

EDGES = {"a": ["b", "c"], "b": ["d"], "c": ["d", "a"], "d": [], "lonely": ["d"]}


def test_components_group_states_that_lead_to_each_other_in_topological_order():
    found = components(EDGES)
    assert sorted(map(sorted, found)) == [["a", "c"], ["b"], ["d"], ["lonely"]]
    position = {state: n for n, component in enumerate(found) for state in component}
    for state, targets in EDGES.items():
        assert all(position[state] <= position[target] for target in targets)


def test_components_of_a_long_chain_need_no_recursion():
    chain = {f"s{i}": [f"s{i + 1}"] for i in range(20_000)} | {"s20000": ["s0"]}
    assert len(components(chain)) == 1
    chain["s20000"] = []
    assert len(components(chain)) == 20_001


def test_carry_gives_each_state_the_marks_of_every_state_with_a_path_to_it():
    marks = {"a": 0b001, "b": 0b010, "lonely": 0b100}
    carried = {state: union for component, union in carry(marks, EDGES) for state in component}
    assert carried == {"a": 0b001, "c": 0b001, "b": 0b011, "d": 0b111, "lonely": 0b100}


def test_carry_agrees_with_one_walk_per_mark_on_random_graphs():
    rng = random.Random(7)
    for _ in range(50):
        states = [f"s{i}" for i in range(rng.randint(1, 30))]
        edges = {s: rng.sample(states, rng.randint(0, min(3, len(states)))) for s in states}
        marks = {s: 1 << n for n, s in enumerate(states) if rng.random() < 0.3}
        carried = {state: union for component, union in carry(marks, edges) for state in component}
        for state in states:
            expected = sum(mark for source, mark in marks.items() if state in reachable([source], edges))
            assert carried[state] == expected
