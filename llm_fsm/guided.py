"""Guided replies: a reply schema made for each turn, for small models held to it by a grammar.

A small model (SmolLM2-135M, say) held to the plain strict schema writes valid JSON but stays in its
state nearly every turn: it chooses ``target_state`` before it has written what it learned, from an
enum that offers every move. The guided schema, built per turn from the state, its transitions and
the context so far, changes three things (``benchmarks/REAL_MODEL.md`` has the figures):

- ``context_update`` comes before ``target_state``, so the move is chosen after the extraction;
- the moves are narrowed to those the update can make possible, and tied to it: a move whose
  conditions read keys the context lacks is offered only together with values for those keys, and
  staying only while one of them is left null (a branch per move, as ``anyOf``); a move that needs a
  key this state may not write, or whose conditions already fail on keys it may not change, is not
  offered at all; and where an earlier (lower ``priority`` number) move holds on the mere presence of
  its keys, a later move is offered only with one of those left null, as the prompt says priority works;
- values are typed: from ``context_schema`` when it describes the key, otherwise from how the
  conditions use it (compared with ``true``/``false``: boolean; with numbers: number; else text), and
  text is bounded, so a looping model ends its value instead of running to the token limit; text a
  condition needs a value to contain (``{"in": ["@", {"var": "email"}]}``) is a pattern, and a declared
  email holds an "@";
- patterns are written as a grammar holds them (:func:`portable_pattern`).

The turn (``llm_fsm.turn``) adds the JSON tool form's request, bounded to as many calls as there are
tools that have not answered yet in the turn, and only while tool rounds are left; the prompt of a guided
turn has no reply template and no example dialogue (a 135M model copied both).

The engine still checks every reply as usual: the schema only makes the likely moves easy to write.
An opening (no user text yet) offers no keys at all, since there is nothing to extract.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypeVar

from llm_fsm.contract import writable_keys
from llm_fsm.definition import RETURN, FSMDefinition, State, Transition

MAX_TEXT = 80  # characters of a text value (a small model loops: "I'm going to the mountains, I'm going...")
MAX_MESSAGE = 240  # characters of the message
MAX_STAY_BRANCHES = 8  # past this, staying is left unconstrained (the schema would grow as a product)

_VALUE_KEYWORDS = ("type", "enum", "const", "minimum", "maximum", "maxLength", "minLength", "pattern")
_NUMERIC_OPS = frozenset({"<", "<=", ">", ">=", "+", "-", "*", "/", "%", "min", "max"})
_EQUALITY_OPS = frozenset({"==", "===", "!=", "!=="})


def guided_schema(
    definition: FSMDefinition,
    state_id: str,
    context: Mapping[str, Any],
    *,
    opening: bool = False,
    protected: Collection[str] = (),
    eager: bool = True,
    narrow: bool = True,
    back_to: str | None = None,
) -> dict[str, Any]:
    """The reply schema of one turn in ``state_id`` on ``context`` (see the module's description).

    The moves are the state's own and the global ones that apply (``FSMDefinition.moves``), a
    ``"$return"`` one going to ``back_to`` (left out without it). ``eager=False`` lets the model stay
    whatever it wrote; ``narrow=False`` leaves out the values the transitions' simple comparisons
    allow. Both are on in guided mode: the variants exist to measure them.
    """
    state = definition.states[state_id]
    every = definition.moves(state_id, RETURN)
    keys = [] if opening else writable_keys(state, protected or definition.code_only_keys, every)
    values = {key: value_schema(definition, state, key) for key in keys}
    moves: list[dict[str, Any]] = []
    # per earlier move that an update can be seen to fulfil: key -> a value that breaks it (None: only null)
    fulfilled: list[dict[str, dict[str, Any] | None]] = []
    for transition in definition.moves(state_id, back_to):
        needed = _needed(transition, context, keys)
        if needed is None:
            continue
        narrowed = {key: _narrowed(values[key], transition, key, _format_parts(definition, key)) for key in needed}
        narrowed = narrowed if narrow else {}
        own = {**values, **narrowed}
        # an earlier (higher-priority) move the update fulfils wins: this one is offered with one of its keys
        # left null or given a value that breaks it
        groups = [_breakers(earlier, needed) for earlier in fulfilled] if eager else []
        for combo in _combos([group for group in groups if group is not None]):
            moves.append(_branch(transition.target_state, own, need=needed, given=_given(combo)))
        breaking = {
            key: _breaking(values[key], own[key], _contained(transition, key), _format_parts(definition, key))
            for key in needed
        }
        if needed and eager and all(value is not False for value in breaking.values()):
            # staying (or a later move) leaves one of its keys null, or gives a value that breaks it
            fulfilled.append(breaking)  # type: ignore[arg-type]  # False was ruled out just above
    stays = [_branch(state.id, values, given=_given(combo)) for combo in _combos([list(m.items()) for m in fulfilled])]
    branches = _unique([*moves, *stays])
    transitions = branches[0] if len(branches) == 1 else {"anyOf": branches}
    return {
        "type": "object",
        "properties": {"transition": transitions, "message": {"type": "string", "maxLength": MAX_MESSAGE}},
        "required": ["transition", "message"],
        "additionalProperties": False,
    }


T = TypeVar("T")
NULL: dict[str, Any] = {"type": "null"}


def _combos(groups: list[list[T]]) -> list[tuple[T, ...]]:
    """One item from each group (a group left empty cannot be satisfied: no combination); bounded."""
    if any(not group for group in groups):
        return []
    combos = list(itertools.product(*groups))
    return combos if len(combos) <= MAX_STAY_BRANCHES else [()]


def _breakers(
    earlier: Mapping[str, dict[str, Any] | None], needed: Collection[str]
) -> list[tuple[str, dict[str, Any] | None]] | None:
    """The ways a move needing ``needed`` can leave an earlier one unfulfilled: one of the earlier move's
    keys null or breaking it. None when the two moves need a key in common: then what tells them apart
    is the value or the description, and the model chooses (the engine checks), as without guidance."""
    if any(key in needed for key in earlier):
        return None
    return list(earlier.items())


def _given(combo: Iterable[tuple[str, dict[str, Any] | None]]) -> dict[str, dict[str, Any]]:
    """The value schema of each key a combination constrains (null, or null or a breaking value)."""
    given: dict[str, dict[str, Any]] = {}
    for key, breaking in combo:
        schema = NULL if breaking is None else {"anyOf": [breaking, NULL]}
        given[key] = NULL if key in given and given[key] != schema else schema
    return given


def _breaking(
    base: dict[str, Any], narrowed: dict[str, Any], parts: list[str], given: list[str]
) -> dict[str, Any] | None | bool:
    """A schema of the values ``narrowed`` rules out (within ``base``): None when it narrows nothing
    (only null breaks it), False when that cannot be said in JSON Schema without ``not``. ``parts``: the
    text the move needs the value to contain, ``given``: what its format already makes it contain; a value
    breaks the move by lacking one of the others (said only for single characters)."""
    parts = [part for part in parts if part not in given]
    if parts:
        changed = {k for k in {*base, *narrowed} if base.get(k) != narrowed.get(k)}
        if changed != {"pattern"} or any(len(part) != 1 for part in parts):
            return False
        limit = int(base.get("maxLength", MAX_TEXT))
        lacking = [_containing(given, limit, without=part) for part in parts]
        if None in lacking:
            return False
        branches = [{**base, "pattern": pattern} for pattern in lacking]
        return branches[0] if len(branches) == 1 else {"anyOf": branches}
    if narrowed == base:
        return None
    allowed = [narrowed["const"]] if "const" in narrowed else narrowed.get("enum")
    universe = [True, False] if base.get("type") == "boolean" else base.get("enum")
    if allowed is not None and universe is not None:  # a finite set of values: the others break it
        allowed = [value for value in allowed if _within(narrowed, value)]
        rest = [value for value in universe if value not in allowed]
        return None if not rest else {**base, "enum": rest}
    kind = narrowed.get("type")
    if kind in ("integer", "number") and not {"const", "enum"} & set(narrowed):
        outside = []
        if "minimum" in narrowed:
            outside.append({"type": kind, "exclusiveMaximum": narrowed["minimum"]})
        if "exclusiveMinimum" in narrowed:
            outside.append({"type": kind, "maximum": narrowed["exclusiveMinimum"]})
        if "maximum" in narrowed:
            outside.append({"type": kind, "exclusiveMinimum": narrowed["maximum"]})
        if "exclusiveMaximum" in narrowed:
            outside.append({"type": kind, "minimum": narrowed["exclusiveMaximum"]})
        if outside:
            return outside[0] if len(outside) == 1 else {"anyOf": outside}
    return False


def _within(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` keeps the numeric bounds of ``schema`` (a value that is not a number keeps none)."""
    if not _is_number(value):
        return not {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(schema)
    return (
        value >= schema.get("minimum", value)
        and value <= schema.get("maximum", value)
        and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
        and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"])
    )


def value_schema(definition: FSMDefinition, state: State, key: str) -> dict[str, Any]:
    """What a value of ``key`` may be: its ``context_schema`` (types, enums and bounds), else the type its
    conditions in ``state`` compare it as; text is bounded to :data:`MAX_TEXT` characters."""
    declared = (definition.context_schema or {}).get(key)
    if declared:
        schema = {k: v for k, v in declared.items() if k in _VALUE_KEYWORDS}
    else:
        schema = {"type": _inferred_type(definition.moves(state.id, RETURN), key)}
    types = schema.get("type")
    if (types == "string" or (isinstance(types, list) and "string" in types)) and "enum" not in schema:
        schema["maxLength"] = min(int(schema.get("maxLength", MAX_TEXT)), MAX_TEXT)
    parts = _format_parts(definition, key)
    if parts and types == "string" and "pattern" not in schema:
        schema["pattern"] = _containing(parts, schema["maxLength"])
    elif declared and declared.get("format") in _GRAMMAR_FORMATS:
        schema["format"] = declared["format"]
    if not schema.get("type") and "enum" not in schema and "const" not in schema:
        schema = {"type": ["string", "number", "boolean"], "maxLength": MAX_TEXT}
    return schema


# the formats llama.cpp's grammars hold; an email (all jsonschema checks of one: an "@") becomes a pattern
_GRAMMAR_FORMATS = frozenset({"date", "time", "date-time", "uuid"})


def _format_parts(definition: FSMDefinition, key: str) -> list[str]:
    """The text ``key``'s declared format makes its value contain (an email's "@")."""
    declared = (definition.context_schema or {}).get(key) or {}
    return ["@"] if declared.get("format") in ("email", "idn-email") and "pattern" not in declared else []


def _needed(transition: Transition, context: Mapping[str, Any], writable: list[str]) -> list[str] | None:
    """The keys an update must give for ``transition`` to be able to hold; None when no update can
    make it hold (it requires a key this state may not write, or fails on keys it may not change).

    Only plain requirements count: ``requires_context_keys`` and conditions made of comparisons of a
    key with constants (joined by ``and``). A move with any other condition (``or`` of keys, ``!``,
    ``missing``, ``if``, a default, a nested path, a comparison with null) is offered as it is and never
    forced: when it holds is the engine's to check."""
    from llm_fsm.engine import unmet_condition

    required, plain = _required_keys(transition)
    missing = sorted(key for key in required if context.get(key) is None)
    if any(key not in writable for key in missing):
        return None  # a plain requirement no update can meet: the conditions cannot all hold
    if not plain or not required:
        return []
    if not missing and not set(required) & set(writable) and unmet_condition(transition, dict(context)) is not None:
        return None
    return missing


def _required_keys(transition: Transition) -> tuple[list[str], bool]:
    """The keys the transition's conditions plainly require (see :func:`_needed`), and whether every
    part of them is such a plain requirement."""
    keys: list[str] = []
    plain = True
    key: str | None
    for condition in transition.conditions:
        for key in condition.requires_context_keys:
            if "." in key:
                plain = False
            else:
                keys.append(key)
        for rule in _conjuncts(condition.logic):
            key = _compared_key(rule) or _whole_key(rule)
            if key is None or not (_comparison(rule, key) or _whole_key(rule)):
                plain = False
            else:
                keys.append(key)
    return list(dict.fromkeys(keys)), plain


def _whole_key(rule: Any) -> str | None:
    """The key of a whole-number test, ``{"==": [{"%": [{"var": key}, 1]}, 0]}``, or None."""
    if not isinstance(rule, dict) or set(rule) != {"=="} or not isinstance(rule["=="], list):
        return None
    args = rule["=="]
    if len(args) != 2 or args[1] != 0 or not isinstance(args[0], dict) or set(args[0]) != {"%"}:
        return None
    modulo = args[0]["%"]
    if not isinstance(modulo, list) or len(modulo) != 2 or modulo[1] != 1:
        return None
    return _compared_key({"==": [modulo[0], 0]})


def _compared_key(rule: Any) -> str | None:
    """The one plain key (no dots, no default) a comparison reads, or None."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return None
    ((operator, args),) = rule.items()
    if not isinstance(args, list):
        return None
    if operator == "or":
        keys = {_compared_key(part) for part in args}
        return keys.pop() if len(keys) == 1 else None
    names = [a["var"] for a in args if isinstance(a, dict) and "var" in a]
    if len(names) != 1 or not isinstance(names[0], str) or "." in names[0] or not names[0]:
        return None
    return names[0]


def _narrowed(schema: dict[str, Any], transition: Transition, key: str, given: list[str]) -> dict[str, Any]:
    """``schema`` with what the transition's simple comparisons of ``key`` say (a constant, a list of
    values, numeric bounds), when they fit its type; anything else is left to the engine to check."""
    narrowed = dict(schema)
    parts = _contained(transition, key)
    limit = int(schema.get("maxLength", MAX_TEXT))
    pattern = _containing([*given, *parts], limit) if parts and schema.get("type") == "string" else None
    if pattern is not None:
        narrowed["pattern"] = pattern
    for condition in transition.conditions:
        for rule in _conjuncts(condition.logic):
            for keyword, value in _comparison(rule, key):
                if keyword == "contains":
                    continue
                if keyword in ("const", "enum"):
                    values = value if keyword == "enum" else [value]
                    if all(_fits(schema, v) for v in values):
                        narrowed.pop("maxLength", None)
                        narrowed[keyword] = value
                elif schema.get("type") in ("number", "integer"):  # the tightest of several bounds
                    tighter = max if keyword in ("minimum", "exclusiveMinimum") else min
                    narrowed[keyword] = tighter(narrowed[keyword], value) if keyword in narrowed else value
    return narrowed


def _conjuncts(rule: Any) -> list[Any]:
    if isinstance(rule, dict) and len(rule) == 1 and isinstance(rule.get("and"), list):
        return [part for item in rule["and"] for part in _conjuncts(item)]
    return [] if rule is None else [rule]


def _contained(transition: Transition, key: str) -> list[str]:
    """The text the transition's conditions require ``key``'s value to contain (``{"in": ["@", key]}``)."""
    return [
        value
        for condition in transition.conditions
        for rule in _conjuncts(condition.logic)
        for keyword, value in _comparison(rule, key)
        if keyword == "contains"
    ]


# what a value's characters may be in a pattern: any but the quote, the backslash and control characters, so
# a grammar held to the pattern writes valid JSON (llama.cpp's "." would let a raw quote through)
_TEXT_EXCLUDED = r'"\\\x7F\x00-\x1F'
_REGEX_SPECIAL = frozenset("^$.[]()|{}*+?")


def _literal(text: str) -> str | None:
    """``text`` as a regular expression that both Python and llama.cpp's patterns read; None for text a
    JSON value cannot hold unescaped (quotes, backslashes, control characters)."""
    if not text or any(c in '"\\' or ord(c) < 0x20 or c == "\x7f" for c in text):
        return None
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)


def _in_class(char: str) -> str:
    return "\\" + char if char in "[]-^" else char


def _containing(parts: list[str], limit: int, without: str = "") -> str | None:
    """A bounded pattern of text holding every one of ``parts`` (in any order) and never the character
    ``without``: one part, or up to three distinct single characters (longer parts could overlap, which the
    orders below would miss)."""
    parts = list(dict.fromkeys(parts))
    literals = [_literal(part) for part in parts]
    if len(parts) > 3 or (len(parts) > 1 and any(len(p) != 1 for p in parts)) or None in literals:
        return None
    if without and (_literal(without) is None or any(without in part for part in parts)):
        return None
    free = max(0, limit - sum(map(len, parts))) // (len(parts) + 1)
    gap = f"[^{_TEXT_EXCLUDED}{_in_class(without) if without else ''}]{{0,{free}}}"
    orders = [gap + gap.join(order) + gap for order in itertools.permutations(literals)]  # type: ignore[arg-type]  # no None: refused above
    return "^" + (orders[0] if len(orders) == 1 else "(?:" + "|".join(orders) + ")") + "$"


_BOUNDS = {"<": ("exclusiveMinimum", "exclusiveMaximum"), "<=": ("minimum", "maximum")}
_FLIPPED = {">": "<", ">=": "<="}


def _comparison(rule: Any, key: str) -> list[tuple[str, Any]]:
    """(keyword, value) pairs for a comparison of ``key`` with constants; [] for anything else."""
    if not isinstance(rule, dict) or len(rule) != 1:
        return []
    ((operator, args),) = rule.items()
    if not isinstance(args, list):
        return []
    if operator == "or" and args:  # each part names values of the key: any of them
        values: list[Any] = []
        for part in args:
            found = _comparison(part, key)
            if not found or found[0][0] not in ("const", "enum"):
                return []
            values.extend(found[0][1] if found[0][0] == "enum" else [found[0][1]])
        return [("enum", list(dict.fromkeys(values)))]
    if operator in ("==", "===") and len(args) == 2:
        other = args[1] if _reads(args[0], key) else args[0] if _reads(args[1], key) else None
        return [("const", other)] if other is not None and not isinstance(other, dict | list) else []
    if operator == "in" and len(args) == 2 and _reads(args[1], key) and isinstance(args[0], str):  # text in text
        return [("contains", args[0])] if _literal(args[0]) is not None else []
    if operator == "in" and len(args) == 2 and _reads(args[0], key) and isinstance(args[1], list):
        return [("enum", args[1])] if args[1] and all(not isinstance(v, dict | list) for v in args[1]) else []
    if operator in _FLIPPED:
        operator, args = _FLIPPED[operator], list(reversed(args))
    if operator not in _BOUNDS or len(args) not in (2, 3):
        return []
    low, high = _BOUNDS[operator]
    if len(args) == 3 and _reads(args[1], key) and _is_number(args[0]) and _is_number(args[2]):
        return [(low, args[0]), (high, args[2])]
    if len(args) == 2 and _reads(args[0], key) and _is_number(args[1]):
        return [(high, args[1])]
    if len(args) == 2 and _reads(args[1], key) and _is_number(args[0]):
        return [(low, args[0])]
    return []


def _fits(schema: dict[str, Any], value: Any) -> bool:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind is None:
        return True
    names = {bool: "boolean", str: "string", int: "integer", float: "number"}
    name = names.get(type(value))
    return (
        name in kinds
        or (name == "integer" and "number" in kinds)
        or (name == "number" and "integer" in kinds and float(value).is_integer())
    )


def _branch(
    target: str,
    values: Mapping[str, dict[str, Any]],
    *,
    need: Collection[str] = (),
    given: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    given = given or {}

    def value(key: str) -> dict[str, Any]:
        if key in need:
            return values[key]
        if key in given:
            return given[key]
        return {"anyOf": [values[key], NULL]}

    update = {
        "type": "object",
        "properties": {key: value(key) for key in values},
        "required": list(values),
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"context_update": update, "target_state": {"type": "string", "enum": [target]}},
        "required": ["context_update", "target_state"],
        "additionalProperties": False,
    }


def _inferred_type(moves: Iterable[Transition], key: str) -> str | None:
    kinds: set[str] = set()
    for transition in moves:
        for condition in transition.conditions:
            if condition.logic is not None:
                _collect_kinds(condition.logic, key, kinds)
    if kinds == {"boolean"}:
        return "boolean"
    if kinds == {"number", "integer"}:  # compared as a number, and tested to be whole ({"%": [key, 1]} == 0)
        return "integer"
    if kinds <= {"number", "integer"} and kinds:
        return "number"
    return "string" if kinds else None


def _collect_kinds(rule: Any, key: str, kinds: set[str]) -> None:
    """How the rule compares ``key``: with booleans, numbers, or anything else (text)."""
    todo = [rule]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for operator, args in node.items():
            arguments = args if isinstance(args, list) else [args]
            todo.extend(arguments)
            if not any(_reads(argument, key) for argument in arguments):
                continue
            constants = [a for a in arguments if not isinstance(a, dict | list)]
            if operator == "%" and len(arguments) == 2 and arguments[1] == 1 and _reads(arguments[0], key):
                kinds.update(("number", "integer"))
            elif operator in _EQUALITY_OPS and constants and all(isinstance(c, bool) for c in constants):
                kinds.add("boolean")
            elif all(_is_number(c) for c in constants) and (
                operator in _NUMERIC_OPS or constants and operator in _EQUALITY_OPS
            ):
                kinds.add("number")  # compared with numbers, or tested equal to one
            elif constants:  # compared with text (or null): text; with an expression: nothing known
                kinds.add("text")


def _reads(node: Any, key: str) -> bool:
    if not isinstance(node, dict) or "var" not in node:
        return False
    name = node["var"][0] if isinstance(node["var"], list) and node["var"] else node["var"]
    return isinstance(name, str) and name == key  # "key.part" reads inside an object: not the key's own value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unique(branches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for branch in branches:
        if branch not in seen:
            seen.append(branch)
    return seen


# shorthand classes llama.cpp's patterns lack (it then accepts any text); in a JSON string a space is the only
# whitespace written as itself, so \s is a space
_SHORTHANDS = {"d": "0-9", "w": "A-Za-z0-9_", "s": " "}


def portable_patterns(node: Any) -> Any:
    """``node`` (a schema) with every ``pattern`` made fit for a grammar (see :func:`portable_pattern`), bounded
    by the node's ``maxLength`` (else :data:`MAX_TEXT`)."""
    if isinstance(node, list):
        return [portable_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: portable_patterns(value) for key, value in node.items()}
    if isinstance(node.get("pattern"), str):
        limit = node.get("maxLength")
        out["pattern"] = portable_pattern(node["pattern"], limit if isinstance(limit, int) and limit > 0 else MAX_TEXT)
    return out


def portable_pattern(pattern: str, limit: int = MAX_TEXT) -> str:
    """``pattern`` as a grammar-driven server (llama.cpp) holds it, matching no more than it did:

    - ``\\d``, ``\\w``, ``\\s`` and (outside brackets) their negations as bracket classes, which llama.cpp reads;
    - ``.`` and negated classes never match a quote, a backslash or a control character: the grammar writes
      the value's characters as they are, and a raw one of those ends the JSON string or breaks it (llama.cpp
      then answers 500);
    - ``+``, ``*`` and ``{n,}`` bounded by ``limit``: a grammar ignores ``maxLength`` next to a pattern, and a
      small model loops until the token limit (they share ``limit``, so the whole stays near it)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    negated = in_class = False
    limit = max(1, limit // max(1, _open_repeats(pattern)))  # the repeats share the length
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            escaped = pattern[i + 1]
            if escaped in _SHORTHANDS:
                out.append(_SHORTHANDS[escaped] if in_class else f"[{_SHORTHANDS[escaped]}]")
            elif escaped.lower() in _SHORTHANDS and not in_class:
                out.append(f"[^{_SHORTHANDS[escaped.lower()]}{_TEXT_EXCLUDED}]")
            else:
                out.append(c + escaped)
            i += 2
        elif in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            negated = pattern[i + 1 : i + 2] == "^"
            in_class = True
            i += 2 if negated else 1
            out.append("[^" if negated else "[")
            if negated and not pattern.startswith(_TEXT_EXCLUDED, i):  # first, so nothing after makes it a range
                out.append(_TEXT_EXCLUDED)
            if pattern[i : i + 1] in ("]", "-"):  # a character of the class where it stands: escaped after ours
                out.append("\\" + pattern[i])
                i += 1
        elif c == ".":
            out.append(f"[^{_TEXT_EXCLUDED}]")
            i += 1
        elif c in "+*":
            out.append(f"{{{1 if c == '+' else 0},{limit}}}")
            i += 1
        elif c == "{" and (m := _OPEN_REPEAT.match(pattern, i)):
            least = int(m.group(1))
            out.append(f"{{{least},{max(least, limit)}}}")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


_OPEN_REPEAT = re.compile(r"\{(\d+),\}")


def _open_repeats(pattern: str) -> int:
    """How many ``+``, ``*`` and ``{n,}`` repeat something in ``pattern`` (outside brackets and escapes)."""
    count, i, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":  # "^" and a "]" right after the opening belong to the class
            in_class = True
            i += 1 + (pattern[i + 1 : i + 2] == "^")
            i += pattern[i : i + 1] == "]"
            continue
        elif c in "+*" or (c == "{" and _OPEN_REPEAT.match(pattern, i)):
            count += 1
        i += 1
    return count
