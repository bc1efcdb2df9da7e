"""Text exports of a definition's state graph: Mermaid (``stateDiagram-v2``) and Graphviz DOT.

Both draw the same picture: an arrow from the start to the initial state, one edge per transition
labelled ``description (p10) [has email; age >= 18]``, and terminal states marked (an arrow to the
end in Mermaid, a double circle in DOT). Global transitions are drawn once each, from one "from
anywhere" node (dashed), their ``except_states`` in the label (``not in: confirm``), rather than an
edge from every state; transitions to ``"$return"`` lead to one "back where it came from" node.
An automatic move says ``auto`` before its priority (``(auto, p10)``, and bold in DOT); an acting
state says "acts on its own" in its box (a thick outline in Mermaid, bold in DOT).
:func:`short_logic` writes a JsonLogic rule as a formula.
Mermaid reads many words and characters as syntax, so its states are drawn under generated ids with
their real ids as labels, and labels code what it would misread (``tests/authoring/test_mermaid_parser.py``
reads the output back with Mermaid's own parser).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence

from llm_fsm.definition.models import RETURN, Condition, FSMDefinition, GlobalTransition, State, Transition
from llm_fsm.logic.table import INFIX, OPERATORS

LABEL_LIMIT = 80
AUTO_MARK = "auto, "  # in an automatic move's label, before its priority
ACTS_NOTE = "acts on its own"  # in an acting state's box
ELLIPSIS = "…"

# Characters Mermaid reads as syntax (or as HTML) in a label; its entity codes (#59;) render them.
_MERMAID_ESCAPES = {
    ":": "#58;",
    ";": "#59;",
    '"': "#quot;",
    "{": "#123;",
    "}": "#125;",
    "#": "#35;",
    "%": "#37;",
    "&": "#38;",
    "<": "#60;",
    ">": "#62;",
}
# Mermaid's lexer takes any line holding "direction LR" (TB, BT, RL) for a direction statement: the
# word is written with its last letter coded.
_MERMAID_DIRECTION = re.compile("(directio)(n)", re.IGNORECASE)
_DOT_START = "[start]"  # state ids are identifiers, so this node name never collides with one
_DOT_ANYWHERE = "[anywhere]"
_DOT_BACK = "[back]"
ANYWHERE_LABEL = "from anywhere"
BACK_LABEL = f"back where it came from ({RETURN})"
# Mermaid ids of the two extra nodes: states are drawn as s0, s1..., so these never clash with one.
MERMAID_ANYWHERE = "anywhere"
MERMAID_BACK = "back"


# ---------------------------------------------------------------- labels


def short_logic(rule: object) -> str:
    """A JsonLogic rule as a short formula: ``{"==": [{"var": "x"}, 1]}`` → ``x == 1``."""
    return _formula(rule, nested=False)


def _formula(rule: object, *, nested: bool) -> str:
    if isinstance(rule, list):
        return "[" + ", ".join(_formula(item, nested=False) for item in rule) + "]"
    if not isinstance(rule, Mapping):
        return _constant(rule)
    if len(rule) != 1:
        return _compact(rule)
    op, raw = next(iter(rule.items()))
    args = list(raw) if isinstance(raw, list) else [raw]
    text = _operation(str(op), args)
    if text is None:
        return _compact(rule)
    grouped = op in ("and", "or") or op in INFIX
    return f"({text})" if nested and grouped and len(args) > 1 else text


def _operation(op: str, args: list[object]) -> str | None:
    parts = [_formula(arg, nested=True) for arg in args]
    if op == "var":
        name = args[0] if args else ""
        return str(name) if isinstance(name, (str, int)) else None
    if op in ("and", "or"):
        return f" {op} ".join(parts)
    if op == "!":
        return f"not {parts[0]}" if parts else None
    if op == "!!":
        return f"bool({parts[0]})" if parts else None
    if op == "has_context":
        names = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        return "has " + ", ".join(str(name) for name in names)
    if op == "missing":
        names = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        return "missing(" + ", ".join(str(name) for name in names) + ")"
    if op in INFIX and len(args) >= 2:
        return f" {op} ".join(parts)
    if op in OPERATORS:  # as a call: an operator the table writes so, an infix one with one argument
        return f"{op}(" + ", ".join(parts) + ")"
    return None


def _constant(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return _compact(value)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def condition_text(condition: Condition) -> str:
    """A condition as a formula: ``has email`` for required keys, then its rule, joined by ``and``."""
    parts = []
    if condition.requires_context_keys:
        parts.append("has " + ", ".join(condition.requires_context_keys))
    if condition.logic is not None:
        parts.append(short_logic(condition.logic))
    return " and ".join(parts)


def edge_label(transition: Transition, limit: int = LABEL_LIMIT) -> str:
    """``description (p10) [has email; age >= 18]``, at most ``limit`` characters; an automatic move (taken by
    the runtime with no model call) says so: ``(auto, p10)``."""
    conditions = "; ".join(text for c in transition.conditions if (text := condition_text(c)))
    priority = f"({AUTO_MARK}p{transition.priority})" if transition.automatic else f"(p{transition.priority})"
    room = limit - len(priority) - 1
    if conditions:
        description = _shorten(transition.description, max(room // 2, room - len(conditions) - 3))
        room -= len(description) + 1 if description else 0
        tail = f"[{_shorten(conditions, room - 2)}]"
        return " ".join(part for part in (description, priority, tail) if part)
    description = _shorten(transition.description, room)
    return f"{description} {priority}" if description else priority


def global_label(move: GlobalTransition, limit: int = LABEL_LIMIT) -> str:
    """A global transition's label: :func:`edge_label`, then the states it does not apply in."""
    if not move.except_states:
        return edge_label(move, limit)
    excepted = "(" + _shorten("not in: " + ", ".join(move.except_states), max(limit // 2, 12) - 2) + ")"
    return f"{edge_label(move, limit - len(excepted) - 1)} {excepted}"


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())  # newlines and runs of blanks become single spaces
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


# ---------------------------------------------------------------- Mermaid


def to_mermaid(definition: FSMDefinition) -> str:
    """The definition as a Mermaid ``stateDiagram-v2``.

    Every state is drawn under a generated id (``s0``, ``s1``... in the order of the definition) with
    its real id as its label, so no state id, whatever it holds, can be read as Mermaid syntax.
    """
    ids = {**mermaid_ids(definition), RETURN: MERMAID_BACK}
    lines = ["stateDiagram-v2"]
    lines += [f'    state "{_mermaid_name(sid)}" as {ids[sid]}' for sid in definition.states]
    extra = extra_nodes(definition)
    lines += [f'    state "{mermaid_text(label)}" as {node}' for node, label in extra.items()]
    lines += [
        f"    {ids[sid]} : {mermaid_text(line)}"
        for sid, st in definition.states.items()
        for line in _notes(definition, st)
    ]
    lines.append(f"    [*] --> {ids[definition.initial_state]}")
    for sid, state in definition.states.items():
        for transition in state.transitions:
            label = mermaid_text(edge_label(transition))
            lines.append(f"    {ids[sid]} --> {ids[transition.target_state]}: {label}")
    for move in definition.global_transitions:
        lines.append(f"    {MERMAID_ANYWHERE} --> {ids[move.target_state]}: {mermaid_text(global_label(move))}")
    lines += [f"    {ids[sid]} --> [*]" for sid, state in definition.states.items() if state.terminal]
    if extra:  # dashed outlines: not states of the conversation
        lines += ["    classDef moves stroke-dasharray: 5 5", f"    class {', '.join(extra)} moves"]
    acting = [ids[sid] for sid, state in definition.states.items() if state.acts]
    if acting:  # thick outlines: states that work with no person's message
        lines += ["    classDef acts stroke-width: 3px", f"    class {', '.join(acting)} acts"]
    return "\n".join(lines) + "\n"


def mermaid_ids(definition: FSMDefinition) -> dict[str, str]:
    """The id :func:`to_mermaid` draws each state under (``s0``, ``s1``... in the definition's order)."""
    return {sid: f"s{n}" for n, sid in enumerate(definition.states)}


def extra_nodes(definition: FSMDefinition) -> dict[str, str]:
    """The Mermaid nodes drawn besides the states, by id: "from anywhere" when there are global
    transitions, "back where it came from" when a transition goes to ``"$return"``."""
    moves = [*definition.global_transitions, *(t for s in definition.states.values() for t in s.transitions)]
    nodes = {MERMAID_ANYWHERE: ANYWHERE_LABEL} if definition.global_transitions else {}
    if any(t.target_state == RETURN for t in moves):
        nodes[MERMAID_BACK] = BACK_LABEL
    return nodes


def _notes(definition: FSMDefinition, state: State) -> list[str]:
    """What a state's box says besides its id: that it acts on its own, the tools, the sub-definition it runs."""
    notes = [ACTS_NOTE] if state.acts else []
    notes += [tools_text(state.tools)] if state.tools else []
    if state.subflow is not None:
        notes.append(subflow_text(definition, state))
    return notes


def subflow_text(definition: FSMDefinition, state: State) -> str:
    """``runs subflow identity_check`` (the attached definition's name, else the reference)."""
    assert state.subflow is not None
    sub = definition.subflow_definitions.get(state.subflow.definition)
    return f"runs subflow {sub.name if sub is not None else state.subflow.definition}"


def tools_text(tools: Sequence[str]) -> str:
    """What a state's box says about the tools the model may call there."""
    return "tools: " + ", ".join(tools)


def mermaid_text(text: str) -> str:
    """``text`` as a Mermaid label shows it: blanks (line breaks included) as single spaces, and what
    Mermaid would read as syntax written as entity codes (``#59;``), which it renders as the character."""
    escaped = "".join(_MERMAID_ESCAPES.get(char) or _mermaid_code(char) for char in " ".join(text.split()))
    return _MERMAID_DIRECTION.sub(lambda m: f"{m[1]}#{ord(m[2])};", escaped)


def _mermaid_name(sid: str) -> str:
    """A state's label: brackets coded too (``state "x[[fork]]"`` would declare a fork), never empty."""
    return mermaid_text(sid).replace("[", "#91;").replace("]", "#93;") or " "


def _mermaid_code(char: str) -> str:
    """Control characters (Mermaid ends a line at a carriage return) and lone surrogates (no UTF-8 text
    holds them) as codes; any other character as is."""
    return f"#{ord(char)};" if unicodedata.category(char) in ("Cc", "Cs") else char


# ---------------------------------------------------------------- DOT


def to_dot(definition: FSMDefinition) -> str:
    """The definition as a Graphviz ``digraph``."""
    lines = [
        f"digraph {_dot_quote(definition.name)} {{",
        "    rankdir=LR;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        f'    {_dot_quote(_DOT_START)} [shape=point, label=""];',
    ]
    lines += [f"    {_dot_quote(sid)} [shape=doublecircle];" for sid, s in definition.states.items() if s.terminal]
    lines += [
        f"    {_dot_quote(sid)} [label={_dot_quote(chr(10).join([sid, *notes]))}{_dot_box(s)}];"
        for sid, s in definition.states.items()
        if (notes := _notes(definition, s))
    ]
    extra = extra_nodes(definition)
    if MERMAID_ANYWHERE in extra:
        lines.append(f"    {_dot_quote(_DOT_ANYWHERE)} [shape=note, style=dashed, label={_dot_quote(ANYWHERE_LABEL)}];")
    if MERMAID_BACK in extra:
        lines.append(f"    {_dot_quote(_DOT_BACK)} [shape=plaintext, label={_dot_quote(BACK_LABEL)}];")
    lines.append(f"    {_dot_quote(_DOT_START)} -> {_dot_quote(definition.initial_state)};")
    for sid, state in definition.states.items():
        for transition in state.transitions:
            target, label = _dot_node(transition.target_state), _dot_quote(edge_label(transition))
            style = _dot_edge_style(transition, dashed=transition.target_state == RETURN)
            lines.append(f"    {_dot_quote(sid)} -> {target} [label={label}{style}];")
    for move in definition.global_transitions:
        target, label = _dot_node(move.target_state), _dot_quote(global_label(move))
        lines.append(
            f"    {_dot_quote(_DOT_ANYWHERE)} -> {target} [label={label}{_dot_edge_style(move, dashed=True)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_box(state: State) -> str:
    """The attributes of a state's box besides its label: a double outline for a subflow, bold for acting."""
    return ", peripheries=2" * bool(state.subflow) + ', style="rounded,bold"' * state.acts


def _dot_edge_style(move: Transition, *, dashed: bool) -> str:
    """Dashed for global and going-back moves, bold for automatic ones (the label says "auto" too)."""
    styles = ["dashed"] * dashed + ["bold"] * move.automatic
    if not styles:
        return ""
    return f", style={styles[0]}" if len(styles) == 1 else f', style="{",".join(styles)}"'


def _dot_node(target: str) -> str:
    return _dot_quote(_DOT_BACK if target == RETURN else target)


def _dot_quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, line breaks as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n")
    return f'"{escaped}"'
