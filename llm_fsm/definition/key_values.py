"""What the definition says a context key's value is, read from its ``context_schema``, its conditions and its
tools, for the reply schemas the model is held to.

- the type the conditions compare a key as (:func:`inferred_type`: ``{">": [{"var": "age"}, 17]}`` is a number);
- a closed set: a key the definition never declares, and whose every use in any condition is a comparison with
  text constants (``==``, ``===``, ``in`` a list), can only ever route on those constants (:func:`closed_set`:
  ``support_triage``'s ``category``: ``billing``, ``technical``, ``account_access``);
- the shape of text ordered against text constants (:func:`text_shape`: ``"17:00" <= time``), and the shape the
  definition's tools take an argument of the key's name in (:func:`tool_shape`);
- from these, a key's value in the plain strict schema every provider's strict mode takes (:func:`strict_value`),
  with the definition's ``any_value`` (:func:`strict_any`).

The plain strict schema (:mod:`llm_fsm.definition.reply_schema`, through the turn's requests) and guided mode's
schemas (:mod:`llm_fsm.guided`) both read them, so what a key holds is read once, in one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from llm_fsm.definition.models import RETURN, FSMDefinition, State, Transition
from llm_fsm.definition.reply_schema import SCALAR
from llm_fsm.logic.table import of_kind

_NUMERIC_OPS = of_kind("order", "arithmetic")


_EQUALITY_OPS = of_kind("equality")


def inferred_type(moves: Iterable[Transition], key: str) -> str | None:
    """The type the conditions of ``moves`` compare ``key`` as: boolean, integer, number or string (None: none
    compares it)."""
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
            if not any(reads(argument, key) for argument in arguments):
                continue
            constants = [a for a in arguments if not isinstance(a, dict | list)]
            if operator == "%" and len(arguments) == 2 and arguments[1] == 1 and reads(arguments[0], key):
                kinds.update(("number", "integer"))
            elif operator in _EQUALITY_OPS and constants and all(isinstance(c, bool) for c in constants):
                kinds.add("boolean")
            elif all(is_number(c) for c in constants) and (
                operator in _NUMERIC_OPS or constants and operator in _EQUALITY_OPS
            ):
                kinds.add("number")  # compared with numbers, or tested equal to one
            elif constants:  # compared with text (or null): text; with an expression: nothing known
                kinds.add("text")


def reads(node: Any, key: str) -> bool:
    """Whether ``node`` is a read of ``key``'s own value (``{"var": "key"}``, with or without a default)."""
    if not isinstance(node, dict) or "var" not in node:
        return False
    name = node["var"][0] if isinstance(node["var"], list) and node["var"] else node["var"]
    return isinstance(name, str) and name == key  # "key.part" reads inside an object: not the key's own value


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (a boolean is not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


_ORDERS = of_kind("order")


def closed_set(definition: FSMDefinition, key: str) -> list[str] | None:
    """The text constants ``key`` is compared with, when every condition of the definition that reads
    it compares it with text constants only; None otherwise (or when nothing compares it)."""
    sets = definition.derived("key_values:closed_sets", definition.initial_state, lambda _: _closed_sets(definition))
    return sets.get(key)


def _closed_sets(definition: FSMDefinition) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    opened: set[str] = set()  # keys read some other way: not closed
    for transition in every_transition(definition):
        for condition in transition.conditions:
            if condition.logic is not None:
                _walk(condition.logic, found, opened)
    declared = definition.context_schema or {}
    return {key: values for key, values in found.items() if key not in opened and key not in declared}


def text_shape(definition: FSMDefinition, key: str) -> str | None:
    """A pattern for ``key`` when conditions order it against text constants of one shape (``"17:00" <=
    time``): compared as text, a value only orders right when written in that shape (``21:00``, not ``9
    pm``); digits stand for any digit, letters for any letter. None otherwise."""
    shapes = definition.derived("key_values:text_shapes", definition.initial_state, lambda _: _text_shapes(definition))
    return shapes.get(key)


def tool_shape(definition: FSMDefinition, key: str) -> dict[str, Any] | None:
    """The shape of text a key with no schema of its own holds where the definition's tools take an argument of
    its name: the ``pattern`` and ``format`` every such argument declares, when they agree (``date``:
    ``^\\d{4}-\\d{2}-\\d{2}$``); None where none declares one, or they differ. A 135M model wrote "21:00" as the
    date of a booking whose tools take dates as ``YYYY-MM-DD``."""
    shapes = set()
    for tool in definition.tools.values():
        argument = ((tool.parameters or {}).get("properties") or {}).get(key)
        if isinstance(argument, dict):
            shape = (argument.get("pattern"), argument.get("format"))
            shapes.add(shape if argument.get("type") == "string" else (None, None))
    if len(shapes) != 1 or (shape := shapes.pop()) == (None, None):
        return None
    return {name: value for name, value in zip(("pattern", "format"), shape, strict=True) if value is not None}


def _text_shapes(definition: FSMDefinition) -> dict[str, str]:
    constants: dict[str, set[str]] = {}
    for transition in every_transition(definition):
        for condition in transition.conditions:
            todo = [condition.logic]
            while todo:
                node = todo.pop()
                if isinstance(node, list):
                    todo.extend(node)
                elif isinstance(node, dict):
                    for operator, args in node.items():
                        todo.append(args)
                        if operator in _ORDERS and isinstance(args, list):
                            names = [name for arg in args if (name := key_read(arg)) is not None]
                            texts = [arg for arg in args if isinstance(arg, str)]
                            for name in names if texts else []:
                                constants.setdefault(name, set()).update(_shape(text) for text in texts)
    return {key: f"^{shapes.pop()}$" for key, shapes in constants.items() if len(shapes) == 1}


def _shape(text: str) -> str:
    return "".join(
        "[0-9]" if c.isdigit() else "[A-Za-z]" if c.isascii() and c.isalpha() else re.escape(c) for c in text
    )


def every_transition(definition: FSMDefinition) -> Iterable[Transition]:
    """Every transition of the definition: each state's, then the global ones."""
    for state in definition.states.values():
        yield from state.transitions
    yield from definition.global_transitions


def _walk(node: Any, found: dict[str, list[str]], opened: set[str]) -> None:
    """Record, per key, the text constants it is compared with; a key read any other way is ``opened``."""
    if isinstance(node, list):
        for item in node:
            _walk(item, found, opened)
        return
    if not isinstance(node, dict):
        return
    if "var" in node and len(node) == 1:  # a read outside a comparison with constants (or with a default)
        name = key_read(node, plain=False)
        if name is not None:
            opened.add(name.split(".")[0])
        return
    for operator, args in node.items():
        arguments = args if isinstance(args, list) else [args]
        key, constants = _text_comparison(operator, arguments)
        if key is not None:
            values = found.setdefault(key, [])
            values.extend(c for c in constants if c not in values)
            continue
        _walk(arguments, found, opened)


def _text_comparison(operator: str, args: list[Any]) -> tuple[str | None, list[str]]:
    """(key, constants) for ``key == "text"`` or ``key in ["a", "b"]``; (None, []) otherwise."""
    if operator in ("==", "===") and len(args) == 2:
        for this, other in ((args[0], args[1]), (args[1], args[0])):
            name = key_read(this)
            if name is not None and isinstance(other, str):
                return name, [other]
    if operator == "in" and len(args) == 2 and isinstance(args[1], list) and args[1]:
        name = key_read(args[0])
        if name is not None and all(isinstance(v, str) for v in args[1]):
            return name, list(args[1])
    return None, []


def key_read(node: Any, *, plain: bool = True) -> str | None:
    """The key a ``{"var": ...}`` reads; with ``plain``, only a whole key read without a default."""
    if not isinstance(node, dict) or "var" not in node or len(node) != 1:
        return None
    read = node["var"]
    if isinstance(read, list):
        if not read or (plain and len(read) > 1):
            return None
        read = read[0]
    if not isinstance(read, str) or not read:
        return None
    return read if not plain else (read if "." not in read else None)


_JSON_TYPES = {str: "string", bool: "boolean", int: "number", float: "number"}


def nullable_enum(values: Sequence[Any]) -> dict[str, Any]:
    """One of ``values`` (text, numbers, yes/no) or null, as every provider's strict mode takes it."""
    kinds = sorted({_JSON_TYPES[type(v)] for v in values})
    return {"type": [*kinds, "null"], "enum": [*values, None]}


def strict_value(definition: FSMDefinition, state: State, key: str) -> dict[str, Any]:
    """A value of ``key`` in a plain strict schema, held to what every provider's strict mode takes: the type
    ``context_schema`` declares, or the one its conditions in ``state`` compare it as, and null (a ``confirmed``
    flag compared with ``true`` is a boolean); the closed set ``context_schema`` declares, and null; any scalar
    where nothing says; and the definition's ``any_value`` (:func:`strict_any`). A set only read from the
    conditions (a ``severity`` routed on three constants) is a guided reply's: a capable model may write another
    value, which a move that only needs the key present takes."""
    return strict_any(_held(definition, state, key), definition.any_value)


_SCALARS = ("string", "number", "integer", "boolean")


def _held(definition: FSMDefinition, state: State, key: str) -> dict[str, Any]:
    declared = (definition.context_schema or {}).get(key)
    if declared:
        values = declared.get("enum")
        if isinstance(values, list) and all(type(v) in _JSON_TYPES for v in values):
            return nullable_enum(values)
        kind = declared.get("type")
        if isinstance(kind, list) and "null" in kind:  # null is offered anyway
            rest = [name for name in kind if name != "null"]
            kind = rest[0] if len(rest) == 1 else rest
    else:
        kind = inferred_type(definition.moves(state.id, RETURN), key)
        if kind is None and (closed_set(definition, key) or tool_shape(definition, key)):
            kind = "string"  # compared only with text constants, or a tool's text argument
    return {"type": [kind, "null"]} if isinstance(kind, str) and kind in _SCALARS else dict(SCALAR)


def strict_any(schema: dict[str, Any], any_value: str | None) -> dict[str, Any]:
    """A plain strict schema's value ``schema`` (``guided.strict_value``'s: a type or a closed set, and null)
    that also takes ``any_value``, in the forms every provider's strict mode takes."""
    kinds = schema.get("type")
    if any_value is None or (isinstance(kinds, list) and "string" in kinds and "enum" not in schema):
        return schema  # any text is taken already
    if isinstance(schema.get("enum"), list) and isinstance(kinds, list):
        if any_value in schema["enum"]:
            return schema
        types = [*sorted({*kinds, "string"} - {"null"}), *(["null"] if "null" in kinds else [])]
        return {"type": types, "enum": [*(v for v in schema["enum"] if v is not None), any_value, None]}
    return {"anyOf": [schema, {"type": "string", "enum": [any_value]}]}
