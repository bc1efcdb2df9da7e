"""The JsonLogic operators a definition may use, in one table: each one's name, how many arguments it takes, its
kind, and how a diagram writes it (``llm-fsm graph``'s edge labels). The evaluator (:mod:`llm_fsm.logic.rules`)
allows exactly these, the guided schemas, the condition probes and the authoring tools ask the table which operators
compare, count or read, and :mod:`llm_fsm.logic.operators` implements each one (a test holds the two to the same
names).

Adding an operator: a row here, its function in ``operators.OPS`` (or ``LAZY_OPS``), a test of what it does, and a
line in the operator table of ``docs/authoring.md`` whose example holds (``tests/logic/test_operator_table.py``
checks both). The loader, ``validate`` and the diagrams then know it; guided mode narrows a reply's values only for
the comparisons it knows (``guided/conditions.py``), and leaves any other condition to the engine to check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["reads", "equality", "order", "membership", "arithmetic", "logic", "text"]
Written = Literal["call", "infix", "own"]


@dataclass(frozen=True)
class Operator:
    """One operator. ``arity``: the fewest and most arguments (None: any number). ``kind``: ``reads`` takes values
    from the context (``var``, ``missing``), ``equality`` and ``order`` compare two values (``order``: numbers, or
    text in JavaScript's way; ``<`` and ``<=`` take a third, between), ``membership`` tells whether one holds the
    other, ``arithmetic`` computes a number, ``logic`` combines truth values, ``text`` builds or measures text.
    ``written``: how a diagram writes it: ``call`` as a function of its arguments (``min(a, b)``), ``infix`` between
    them (``a < b``; with one argument, as a call), ``own`` in words of its own (``has email``, ``not a``)."""

    name: str
    arity: tuple[int, int | None]
    kind: Kind
    written: Written = "call"


_ROWS = (
    Operator("var", (1, 2), "reads", written="own"),
    Operator("missing", (0, None), "reads", written="own"),
    Operator("missing_some", (2, 2), "reads"),
    Operator("has_context", (1, None), "reads", written="own"),
    Operator("context_length", (2, 2), "text"),
    Operator("==", (2, 2), "equality", written="infix"),
    Operator("!=", (2, 2), "equality", written="infix"),
    Operator("===", (2, 2), "equality", written="infix"),
    Operator("!==", (2, 2), "equality", written="infix"),
    Operator("<", (2, 3), "order", written="infix"),
    Operator("<=", (2, 3), "order", written="infix"),
    Operator(">", (2, 2), "order", written="infix"),
    Operator(">=", (2, 2), "order", written="infix"),
    Operator("in", (2, 2), "membership", written="infix"),
    Operator("contains", (2, 2), "membership"),
    Operator("+", (1, None), "arithmetic", written="infix"),
    Operator("-", (1, 2), "arithmetic", written="infix"),
    Operator("*", (1, None), "arithmetic", written="infix"),
    Operator("/", (2, 2), "arithmetic", written="infix"),
    Operator("%", (2, 2), "arithmetic", written="infix"),
    Operator("min", (1, None), "arithmetic"),
    Operator("max", (1, None), "arithmetic"),
    Operator("!", (1, 1), "logic", written="own"),
    Operator("!!", (1, 1), "logic", written="own"),
    Operator("and", (1, None), "logic", written="own"),
    Operator("or", (1, None), "logic", written="own"),
    Operator("if", (0, None), "logic"),
    Operator("?:", (0, None), "logic"),
    Operator("cat", (0, None), "text"),
)
OPERATORS: dict[str, Operator] = {row.name: row for row in _ROWS}


def of_kind(*kinds: Kind) -> frozenset[str]:
    """The names of the operators of these kinds."""
    return frozenset(name for name, row in OPERATORS.items() if row.kind in kinds)


INFIX: frozenset[str] = frozenset(name for name, row in OPERATORS.items() if row.written == "infix")
