"""Mermaid and DOT exports, and the short form of JsonLogic used in their edge labels."""

from __future__ import annotations

import re

import pytest

import llm_fsm
from llm_fsm.authoring.diagram import LABEL_LIMIT, edge_label, mermaid_text, short_logic, to_dot, to_mermaid
from llm_fsm.definition.models import FSMDefinition, Transition
from tests.conftest import EXAMPLES, SIGNUP


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ({"==": [{"var": "x"}, 1]}, "x == 1"),
        ({">=": [{"var": ["age", 0]}, 18]}, "age >= 18"),
        ({"<=": [1, {"var": "n"}, 10]}, "1 <= n <= 10"),
        ({"and": [{"==": [{"var": "a"}, "yes"]}, {"!": {"var": "b"}}]}, "(a == 'yes') and not b"),
        ({"or": [{"var": "a"}, {"and": [{"var": "b"}, {"var": "c"}]}]}, "a or (b and c)"),
        ({"in": [{"var": "country"}, ["US", "CA"]]}, "country in ['US', 'CA']"),
        ({"has_context": "email"}, "has email"),
        ({"has_context": ["name", "email"]}, "has name, email"),
        ({"missing": ["x", "y"]}, "missing(x, y)"),
        ({"==": [{"%": [{"var": "q"}, 1]}, 0]}, "(q % 1) == 0"),
        ({"if": [{"var": "a"}, 1, 2]}, "if(a, 1, 2)"),
        ({"!!": [{"var": "a"}]}, "bool(a)"),
        (True, "true"),
        ({"weird": 1, "two": 2}, '{"weird":1,"two":2}'),
    ],
)
def test_short_logic(rule, text):
    assert short_logic(rule) == text


def transition(**fields) -> Transition:
    return Transition.model_validate({"target_state": "done", **fields})


def test_edge_label_has_description_priority_and_conditions():
    t = transition(
        description="Adult with email",
        priority=10,
        conditions=[
            {"requires_context_keys": ["email"]},
            {"description": "adult", "logic": {">=": [{"var": "age"}, 18]}},
        ],
    )
    assert edge_label(t) == "Adult with email (p10) [has email; age >= 18]"
    assert edge_label(transition()) == "(p100)"


def test_edge_labels_are_shortened_with_an_ellipsis():
    long_rule = {"and": [{"==": [{"var": f"key_{i}"}, i]} for i in range(20)]}
    t = transition(description="word " * 40, conditions=[{"logic": long_rule}])
    label = edge_label(t)
    assert len(label) <= LABEL_LIMIT and label.count("…") == 2 and "(p100)" in label and label.endswith("…]")
    assert len(edge_label(transition(description="word " * 40))) <= LABEL_LIMIT


@pytest.fixture
def signup() -> llm_fsm.FSMDefinition:
    return llm_fsm.load(SIGNUP)


def test_mermaid_marks_the_start_the_end_and_labels_edges(signup):
    text = to_mermaid(signup)
    lines = text.splitlines()
    assert lines[:4] == [
        "stateDiagram-v2",
        '    state "ask_name" as s0',
        '    state "ask_email" as s1',
        '    state "done" as s2',
    ]
    assert text.endswith("\n")
    assert "    [*] --> s0" in lines
    assert "    s2 --> [*]" in lines
    (edge,) = [line for line in lines if line.startswith("    s1 --> s2")]
    assert edge == "    s1 --> s2: The email is known and approved (p10) [has email#59; approved == true]"
    assert len([line for line in lines if "-->" in line]) == 1 + 3 + 1  # start, three transitions, one end


def test_mermaid_escapes_what_its_labels_cannot_hold():
    t = {"target_state": "b", "description": 'Say "hi": {now}; # then\nmore <b>100%</b> & [x]'}
    definition = llm_fsm.load({"name": "x", "initial_state": "a", "states": {"a": {"transitions": [t]}, "b": {}}})
    (edge,) = [line for line in to_mermaid(definition).splitlines() if line.startswith("    s0 --> s1")]
    label = edge.split(": ", 1)[1]
    assert not set(re.sub(r"#\w+;", "", label)) & set(':;"{}#%&<>\n')  # Mermaid decodes #58; etc. before parsing
    assert label.startswith(
        "Say #quot;hi#quot;#58; #123;now#125;#59; #35; then more #60;b#62;100#37;#60;/b#62; #38; [x]"
    )


def test_mermaid_never_writes_a_state_id_as_syntax():
    """Every state is drawn as s0, s1... with its id as a label: keywords (note, end, class, direction...),
    blanks, quotes and line breaks cannot reach Mermaid's lexer."""
    ids = ["note", "end", "class", "style", "direction", "default", 'a "b"', "two words", "x\ny", "", "日本"]
    states = {sid: {"id": sid, "transitions": [{"target_state": "done", "description": "direction LR"}]} for sid in ids}
    definition = FSMDefinition.model_validate(
        {"name": "x", "initial_state": "note", "states": {**states, "done": {"id": "done"}}}
    )
    lines = to_mermaid(definition).splitlines()
    declared = lines[1 : len(ids) + 2]
    assert declared[:4] == [
        '    state "note" as s0',
        '    state "end" as s1',
        '    state "class" as s2',
        '    state "style" as s3',
    ]
    assert declared[6:11] == [
        '    state "a #quot;b#quot;" as s6',
        '    state "two words" as s7',
        '    state "x y" as s8',
        '    state " " as s9',
        '    state "日本" as s10',
    ]
    edges = [line.split() for line in lines[len(ids) + 2 :]]
    assert all(re.fullmatch(r"s\d+|\[\*\]", edge[0]) and re.fullmatch(r"s\d+:?|\[\*\]", edge[2]) for edge in edges)
    assert "    s0 --> s11: directio#110; LR (p100)" in lines  # a line holding "direction LR" is a direction statement


def test_mermaid_codes_what_no_file_can_hold():
    assert mermaid_text("a\x00b\ud800c\u2028d") == "a#0;b#55296;c d"


def dot_tokens(text: str) -> list[str]:
    """Quoted strings (escapes resolved), identifiers and punctuation; fails on an unterminated string."""
    pattern = re.compile(r'"((?:[^"\\]|\\.)*)"|([A-Za-z_][\w.]*|-?[0-9.]+)|(->|[{}\[\];=,])|(\s+)', re.DOTALL)
    tokens, position = [], 0
    while position < len(text):
        match = pattern.match(text, position)
        assert match, f"unexpected DOT text at {position}: {text[position : position + 20]!r}"
        if match.group(1) is not None:
            tokens.append("STR:" + re.sub(r"\\(.)", r"\1", match.group(1)))
        elif match.group(4) is None:
            tokens.append(match.group(0))
        position = match.end()
    return tokens


def test_dot_is_well_formed_and_marks_start_and_terminal_states(signup):
    text = to_dot(signup)
    tokens = dot_tokens(text)
    assert tokens[:3] == ["digraph", "STR:signup", "{"] and tokens[-1] == "}"
    assert tokens.count("{") == tokens.count("}") == 1
    assert '"[start]" [shape=point, label=""];' in text
    assert '"[start]" -> "ask_name";' in text
    assert '"done" [shape=doublecircle];' in text and '"ask_name" [shape=doublecircle]' not in text
    assert (
        '"ask_email" -> "done" [label="The email is known and approved (p10) [has email; approved == true]"];' in text
    )


def test_dot_escapes_quotes_backslashes_and_newlines():
    t = {"target_state": "b", "description": 'Say "hi" \\ then\nmore'}
    definition = llm_fsm.load(
        {"name": 'my "bot"', "initial_state": "a", "states": {"a": {"transitions": [t]}, "b": {}}}
    )
    tokens = dot_tokens(to_dot(definition))
    assert 'STR:my "bot"' in tokens
    assert 'STR:Say "hi" \\ then more (p100)' in tokens


WORKFLOW = {
    "name": "w",
    "initial_state": "ask",
    "states": {
        "ask": {"transitions": [{"target_state": "research"}]},
        "research": {
            "acts": True,
            "tools": ["search"],
            "transitions": [
                {"target_state": "done", "automatic": True, "conditions": [{"requires_context_keys": ["notes"]}]},
                {"target_state": "$return", "automatic": True, "priority": 200, "conditions": [{"logic": False}]},
            ],
        },
        "done": {"acts": True},
    },
    "tools": {"search": {"description": "Search the web"}},
}


def test_an_automatic_move_says_auto_before_its_priority():
    assert edge_label(transition(automatic=True, priority=10)) == "(auto, p10)"
    t = transition(description="Notes ready", automatic=True, conditions=[{"requires_context_keys": ["notes"]}])
    assert edge_label(t) == "Notes ready (auto, p100) [has notes]"
    assert len(edge_label(transition(description="word " * 40, automatic=True))) <= LABEL_LIMIT


def test_mermaid_notes_and_outlines_acting_states():
    lines = to_mermaid(llm_fsm.load(WORKFLOW)).splitlines()
    assert "    s1 : acts on its own" in lines and "    s1 : tools#58; search" in lines
    assert "    s2 : acts on its own" in lines and "    s0 : acts on its own" not in lines
    assert lines[-2:] == ["    classDef acts stroke-width: 3px", "    class s1, s2 acts"]
    assert "    s1 --> s2: (auto, p100) [has notes]" in lines


def test_dot_draws_acting_states_and_automatic_moves_bold():
    text = to_dot(llm_fsm.load(WORKFLOW))
    assert '    "research" [label="research\\nacts on its own\\ntools: search", style="rounded,bold"];' in text
    assert '    "done" [label="done\\nacts on its own", style="rounded,bold"];' in text
    assert '    "research" -> "done" [label="(auto, p100) [has notes]", style=bold];' in text
    assert '    "research" -> "[back]" [label="(auto, p200) [false]", style="dashed,bold"];' in text
    assert '"ask" -> "research" [label="(p100)"];' in text
    dot_tokens(text)  # well formed


def test_a_definition_without_workflow_fields_draws_as_before(signup):
    assert "auto" not in to_mermaid(signup) + to_dot(signup)
    assert "acts" not in to_mermaid(signup) + to_dot(signup)
    assert "bold" not in to_dot(signup)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_exports(path):
    definition = llm_fsm.load(path)
    mermaid, dot = to_mermaid(definition), to_dot(definition)
    transitions = sum(len(s.transitions) for s in definition.states.values())
    transitions += len(definition.global_transitions)  # each drawn once, from "anywhere"
    assert sum(" --> " in line and "[*]" not in line for line in mermaid.splitlines()) == transitions
    labels = [t[4:] for t in dot_tokens(dot) if t.startswith("STR:")]
    assert all(len(label) <= LABEL_LIMIT for label in labels)
    assert dot.count(" -> ") == transitions + 1
