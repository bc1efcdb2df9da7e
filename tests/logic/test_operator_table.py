"""The operator table (llm_fsm.logic.table) against what people read: the guide's table of operators
(docs/authoring.md, "Conditions") names every operator of the table and no other, and each of its examples holds on
the data it says; a diagram writes every operator as the table says, an unknown one as its JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

from llm_fsm.authoring.diagram import short_logic
from llm_fsm.logic.rules import evaluate
from llm_fsm.logic.table import OPERATORS

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "authoring.md"


def guide_table() -> tuple[dict[str, object], list[tuple[set[str], list[object]]]]:
    """The data the guide's examples are true on, and per row the operators it names and its examples."""
    text = GUIDE.read_text(encoding="utf-8")
    head = re.search(r"^\| Operators \| Example \(true on `(.*?)`\) \|$", text, re.MULTILINE)
    assert head, "docs/authoring.md has the operator table under 'Conditions'"
    rows = []
    for line in text[head.end() :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        names, examples = line.strip("|").split(" | ")
        rows.append((set(re.findall(r"`([^`]+)`", names)), [json.loads(e) for e in re.findall(r"`([^`]+)`", examples)]))
    return json.loads(head.group(1)), rows


def test_the_guide_names_every_operator_of_the_table_and_no_other():
    _, rows = guide_table()
    named = {name for names, _ in rows for name in names if " " not in name}  # "a < b < c" is a reading
    assert named == set(OPERATORS)


def test_every_example_of_the_guide_holds_on_its_data():
    data, rows = guide_table()
    examples = [example for _, found in rows for example in found]
    assert len(examples) >= len(rows)
    for example in examples:
        assert evaluate(example, data) is True, example


def test_a_diagram_writes_each_operator_as_the_table_says():
    for name, row in OPERATORS.items():
        args = [{"var": "a"}, 1]
        written = short_logic({name: args})
        if row.written == "infix":
            assert written == f"a {name} 1"
        elif row.written == "call":
            assert written == f"{name}(a, 1)", written
    assert short_logic({"starts_with": [{"var": "a"}, "x"]}) == '{"starts_with":[{"var":"a"},"x"]}'  # not an operator
