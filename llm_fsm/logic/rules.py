"""A safe JsonLogic evaluator: an allow-list of operators, no ``eval``, a nesting limit.

Rules follow JsonLogic (https://jsonlogic.com/operations.html) as implemented by json-logic-js
(``?:`` is accepted as an alias of ``if``), plus the operators the llm-fsm format adds:

* ``{"has_context": "user.email"}`` is true when that dotted key is in the data with a value that is
  not ``None``, ``""``, ``[]`` or ``{}`` (given several keys: all of them). llm-fsm's two-argument
  form ``{"has_context": [{"var": ""}, "email"]}`` looks the key up in the object the first argument
  gives (``{"var": ""}`` is the whole data); it is false when that is not an object.
* ``{"context_length": [{"var": ""}, "items"]}``: the length of the list, string or object at that
  dotted path of the object given first; ``0`` when it is absent or something else.
* ``{"contains": [container, item]}`` is ``{"in": [item, container]}``.
* ``in`` with an object on the right is true when the left is one of its keys (whatever the value).

:func:`evaluate` never mutates the data and raises nothing but :class:`LogicError`. The operators
themselves are in :mod:`llm_fsm.logic.operators`; this module reads rules, compiles and checks them.

Deliberate differences from json-logic-js:

* Arithmetic on anything but numbers and numeric strings (booleans and ``None`` included), division
  or modulo by zero, and results that are not finite give ``None`` where JavaScript gives NaN or
  Infinity. Whole-valued results are returned as ``int`` (``{"/": [4, 2]}`` is ``2``).
* ``<``, ``<=``, ``>``, ``>=`` compare two strings, or two numbers (numeric strings and booleans
  converted as in JS); every other pair is ``False``, notably ``None`` (JS turns null into 0).
* ``==`` compares two arrays or two objects by content (JS compares identity).
* ``min`` and ``max`` of no arguments are ``None``.
* Argument counts: :func:`check_rule` reports wrong ones at load time, while :func:`evaluate` is
  lenient like json-logic-js (extra arguments are ignored, absent ones read as ``None``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llm_fsm.errors import LogicError
from llm_fsm.logic.operators import (
    ABSENT,
    LAZY_OPS,
    OPS,
    Run,
    in_object_form,
    lookup,
    nth_argument,
    present_value,
    walk,
)
from llm_fsm.logic.operators import truthy as truthy  # part of this module's API (checks.py, the tests)
from llm_fsm.logic.table import OPERATORS

ALLOWED_OPERATORS: frozenset[str] = frozenset(OPERATORS)  # the table's (logic/table.py)
MAX_DEPTH = 32


# ---------------------------------------------------------------- public API


def evaluate(rule: object, data: Mapping[str, object] | None) -> object:
    """Evaluate ``rule`` against ``data``. Raises :class:`LogicError`, and nothing else."""
    return compile_rule(rule)(data)


Rule = Callable[[Mapping[str, Any] | None], object]  # a rule compiled by compile_rule: data -> result


def compile_rule(rule: object) -> Rule:
    """``rule`` as a function of the data: ``compile_rule(rule)(data) == evaluate(rule, data)``, raising
    as it does. The rule is read once; keep the function to evaluate the same rule often (a definition's
    conditions on every reply). A malformed part raises only when it is evaluated, as with ``evaluate``."""
    try:
        run = _compile(rule, 1)
    except Exception as exc:  # a rule that cannot even be read fails when evaluated, like any other
        run = _fail(_logic_error(exc))

    def evaluate_rule(data: Mapping[str, object] | None) -> object:
        try:
            return run(data)
        except LogicError:
            raise
        except Exception as exc:
            raise _logic_error(exc) from exc

    return evaluate_rule


def _logic_error(exc: Exception) -> LogicError:
    if isinstance(exc, LogicError):
        return exc
    if isinstance(exc, RecursionError):
        return LogicError("rule or data nests too deeply to evaluate")
    # any other failure is a malformed rule or unusable data
    return LogicError(f"cannot evaluate rule: {type(exc).__name__}: {exc}")


def has_key(data: Mapping[str, object], key: object) -> bool:
    """``{"has_context": key}`` on ``data`` without building the rule; a blank or malformed key name is
    never present (False, where the rule raises)."""
    return isinstance(key, str) and bool(key) and present_value(lookup(data, key))


def value_at(data: Mapping[str, object], key: str) -> object:
    """The value at the dotted ``key`` in ``data`` (as ``var`` reads it), or None where there is none."""
    found = lookup(data, key)
    return None if found is ABSENT else found


def check_rule(rule: object) -> list[tuple[str, str]]:
    """Statically check ``rule``; return ``(location, message)`` problems, empty when fine.

    Locations are relative to the rule root: ``""`` for the root, ``"and[1]"``,
    ``"and[1].==[0]"``; list items are ``"[0]"``.
    """
    problems: list[tuple[str, str]] = []
    _check(rule, "", 1, problems)
    return problems


def keys_read(rule: object) -> set[str]:
    """Every literal context key ``rule`` reads: ``var`` paths (dotted, as written) and the keys
    named by ``missing``, ``missing_some`` and ``has_context``. Keys computed at run time by a
    nested rule cannot be known and are not included. Raises :class:`LogicError` when too deep."""
    keys: set[str] = set()
    _collect(rule, 1, keys)
    return keys


# ---------------------------------------------------------------- evaluation


def _compile(rule: object, depth: int) -> Run:
    """The closure that evaluates ``rule`` at ``depth``: the rule's shape is read here once, so that
    evaluating it again only calls the operators (a definition's conditions run on every reply)."""
    if isinstance(rule, (list, tuple)):
        return _compile_list(rule, depth)
    if not isinstance(rule, Mapping) or not rule:
        return lambda data: rule
    if depth > MAX_DEPTH:
        return _fail(LogicError(f"rule nests deeper than {MAX_DEPTH} levels"))
    try:
        op, args = _split(rule)
    except LogicError as exc:  # raised when evaluated: a branch never taken cannot fail
        return _fail(exc)
    parts = [_compile(arg, depth + 1) for arg in args]
    # and/or/if evaluate their own arguments: a branch not taken is never evaluated, so it cannot fail
    if op in LAZY_OPS:
        return LAZY_OPS[op](parts)
    # (not with a third argument: evaluated, though unused, it could raise; the general form below does it)
    if op == "var" and (literal := _literal_var(args)) is not None:
        return literal
    return _compile_call(OPS[op], args, parts)


def _compile_list(rule: list[object] | tuple[object, ...], depth: int) -> Run:
    """The closure for a list in a rule: each item evaluated, or a copy when all are literals."""
    if depth > MAX_DEPTH:
        return _fail(LogicError(f"rule nests deeper than {MAX_DEPTH} levels"))
    if not any(isinstance(item, (list, tuple, Mapping)) for item in rule):
        items = list(rule)  # literals only: a fresh copy each time, as the caller may keep it
        return lambda data: list(items)
    parts = [_compile(item, depth + 1) for item in rule]
    return lambda data: [part(data) for part in parts]


def _literal_var(args: list[object]) -> Run | None:
    """The closure for ``var`` of a literal path with a literal default (the commonest node), the path
    split once here rather than on every evaluation; None for any other ``var``."""
    if not (1 <= len(args) <= 2 and isinstance(args[0], str) and args[0]):
        return None
    default = nth_argument(args, 1)
    if isinstance(default, (list, tuple, Mapping)):
        return None
    path = args[0].split(".")
    return lambda data: default if (found := walk(data, path)) is ABSENT else found


def _compile_call(run: Any, args: list[object], parts: list[Run]) -> Run:
    """The closure calling operator ``run`` on its evaluated arguments ``parts`` (``args`` as written)."""
    if not any(isinstance(arg, (list, tuple, Mapping)) for arg in args):
        constant = list(args)  # no operator writes to or returns its argument list: it can be shared
        return lambda data: run(constant, data)
    if len(parts) == 1:  # one and two arguments are most nodes: no list comprehension to call
        (only,) = parts
        return lambda data: run([only(data)], data)
    if len(parts) == 2:
        first, second = parts
        return lambda data: run([first(data), second(data)], data)
    return lambda data: run([part(data) for part in parts], data)


def _fail(error: LogicError) -> Run:
    def fail(data: object) -> object:
        raise LogicError(str(error))

    return fail


def _check_depth(depth: int) -> None:
    if depth > MAX_DEPTH:
        raise LogicError(f"rule nests deeper than {MAX_DEPTH} levels")


def _split(rule: Mapping[object, object]) -> tuple[str, list[object]]:
    if len(rule) != 1:
        raise LogicError(_shape_message(rule))
    op, raw = next(iter(rule.items()))
    if op not in ALLOWED_OPERATORS:
        raise LogicError(_unknown_message(op))
    return str(op), _as_args(raw)


def _as_args(raw: object) -> list[object]:
    # a list is passed as it is, not copied: no operator writes to its arguments
    if type(raw) is list:
        return raw
    return list(raw) if isinstance(raw, (list, tuple)) else [raw]


def _shape_message(rule: Mapping[object, object]) -> str:
    keys = ", ".join(repr(key) for key in list(rule)[:5])
    return f"an operator object must have exactly one key, this one has {len(rule)}: {keys}"


def _unknown_message(op: object) -> str:
    close = difflib.get_close_matches(str(op), sorted(ALLOWED_OPERATORS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown operator {op!r}{hint}"


# ---------------------------------------------------------------- static analysis


def _join(location: str, part: str) -> str:
    return f"{location}.{part}" if location and not part.startswith("[") else location + part


def _check(node: object, location: str, depth: int, problems: list[tuple[str, str]]) -> None:
    if not isinstance(node, (list, tuple, Mapping)) or not node:
        return
    if depth > MAX_DEPTH:
        problems.append((location, f"rule nests deeper than {MAX_DEPTH} levels"))
        return
    if isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            _check(item, _join(location, f"[{i}]"), depth + 1, problems)
        return
    if len(node) != 1:
        problems.append((location, _shape_message(node)))
        return
    op, raw = next(iter(node.items()))
    args = _as_args(raw)
    if op not in ALLOWED_OPERATORS:
        problems.append((location, _unknown_message(op)))
    elif (message := _arity_message(str(op), len(args)) or _argument_message(str(op), args)) is not None:
        problems.append((location, message))
    for i, arg in enumerate(args):
        _check(arg, _join(location, f"{op}[{i}]"), depth + 1, problems)


def _arity_message(op: str, count: int) -> str | None:
    low, high = OPERATORS[op].arity
    if low <= count and (high is None or count <= high):
        return None
    wanted = f"{low}" if low == high else f"{low} to {high}" if high else f"at least {low}"
    return f"{op!r} takes {wanted} argument(s), got {count}"


def _argument_message(op: str, args: list[object]) -> str | None:
    if op == "has_context" and in_object_form(args) and not isinstance(args[0], Mapping):
        return 'has_context\'s first argument must be an object, as in [{"var": ""}, "key"], or a key name'
    return None


def _collect(node: object, depth: int, keys: set[str]) -> None:
    if isinstance(node, (list, tuple)):
        children = list(node)
    elif isinstance(node, Mapping) and len(node) == 1:
        op, raw = next(iter(node.items()))
        children = _as_args(raw)
        keys.update(_literal_keys(op, children))
    else:
        return
    _check_depth(depth)
    for child in children:
        _collect(child, depth + 1, keys)


def _literal_keys(op: object, args: list[object]) -> list[str]:
    named: Sequence[object]
    if op in ("has_context", "context_length") and in_object_form(args):
        base, key = _var_path(nth_argument(args, 0)), nth_argument(args, 1)
        # [{"var": "user"}, "email"] reads "user.email"; a first argument computed at run time names no key
        named = [f"{base}.{key}" if base else key] if base is not None and isinstance(key, str) else []
    elif op == "var":
        named = args[:1]
    elif op == "missing_some":
        second = nth_argument(args, 1)
        named = second if isinstance(second, (list, tuple)) else []
    elif op in ("missing", "has_context"):
        named = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    else:
        return []
    return [key for key in named if isinstance(key, str) and key]


def _var_path(node: object) -> str | None:
    """The path a literal ``{"var": path}`` reads ("" for the whole data), else None."""
    if not isinstance(node, Mapping) or list(node) != ["var"]:
        return None
    path = nth_argument(_as_args(node["var"]), 0)
    return path if isinstance(path, str) else None
