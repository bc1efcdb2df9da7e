"""The JsonLogic operators a definition may use, in one table: each one's name, how many arguments it takes, its
kind, and how a diagram writes it. The evaluator (:mod:`llm_fsm.logic.rules`) allows exactly these, the guided
schemas, the condition probes and the authoring tools ask the table which operators compare, count or read, and
:mod:`llm_fsm.logic.operators` implements each one (a test holds the two to the same names).

Adding an operator: a row here, its function in ``operators.OPS`` (or ``LAZY_OPS``), and a test of what it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["reads", "equality", "order", "membership", "arithmetic", "logic", "text"]


@dataclass(frozen=True)
class Operator:
    """One operator. ``arity``: the fewest and most arguments (None: any number). ``kind``: ``reads`` takes values
    from the context (``var``, ``missing``), ``equality`` and ``order`` compare two values (``order``: numbers, or
    text in JavaScript's way; ``<`` and ``<=`` take a third, between), ``membership`` tells whether one holds the
    other, ``arithmetic`` computes a number, ``logic`` combines truth values, ``text`` builds or measures text.
    ``infix``: a diagram writes it between its arguments (``a < b``)."""

    name: str
    arity: tuple[int, int | None]
    kind: Kind
    infix: bool = False


_ROWS = (
    Operator("var", (1, 2), "reads"),
    Operator("missing", (0, None), "reads"),
    Operator("missing_some", (2, 2), "reads"),
    Operator("has_context", (1, None), "reads"),
    Operator("context_length", (2, 2), "text"),
    Operator("==", (2, 2), "equality", infix=True),
    Operator("!=", (2, 2), "equality", infix=True),
    Operator("===", (2, 2), "equality", infix=True),
    Operator("!==", (2, 2), "equality", infix=True),
    Operator("<", (2, 3), "order", infix=True),
    Operator("<=", (2, 3), "order", infix=True),
    Operator(">", (2, 2), "order", infix=True),
    Operator(">=", (2, 2), "order", infix=True),
    Operator("in", (2, 2), "membership", infix=True),
    Operator("contains", (2, 2), "membership"),
    Operator("+", (1, None), "arithmetic", infix=True),
    Operator("-", (1, 2), "arithmetic", infix=True),
    Operator("*", (1, None), "arithmetic", infix=True),
    Operator("/", (2, 2), "arithmetic", infix=True),
    Operator("%", (2, 2), "arithmetic", infix=True),
    Operator("min", (1, None), "arithmetic"),
    Operator("max", (1, None), "arithmetic"),
    Operator("!", (1, 1), "logic"),
    Operator("!!", (1, 1), "logic"),
    Operator("and", (1, None), "logic"),
    Operator("or", (1, None), "logic"),
    Operator("if", (0, None), "logic"),
    Operator("?:", (0, None), "logic"),
    Operator("cat", (0, None), "text"),
)
OPERATORS: dict[str, Operator] = {row.name: row for row in _ROWS}


def of_kind(*kinds: Kind) -> frozenset[str]:
    """The names of the operators of these kinds."""
    return frozenset(name for name, row in OPERATORS.items() if row.kind in kinds)


INFIX: frozenset[str] = frozenset(name for name, row in OPERATORS.items() if row.infix)
