"""pydantic's validation errors of a JSON document, in the words of the person who wrote the file.

A :class:`Vocabulary` names the models of one kind of file (a definition's ``state``, a test file's
``case``). :func:`field_problems` turns a ``ValidationError`` into ``(location, message, code, hint)``
tuples: the location as it is in the file (``("cases", 0, "steps", 1)``, without the union members
pydantic adds to it), and the message in plain words (``expected a list of strings, got a string
("name")``, ``missing required field 'name' (a string)``, ``at least one case is needed``), never
pydantic's own wording. The loader (definitions) and the test-file reader share it.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

FieldProblem = tuple[tuple[Any, ...], str, str, str | None]  # (location in the file, message, code, hint)


@dataclass(frozen=True)
class Vocabulary:
    """The words for the models of one kind of file.

    ``nouns`` name a model, or a union of models (by its members), in the singular (``"state"``);
    ``phrases`` describe any other type outright: (a value of it, values of it)."""

    root: type[BaseModel]
    nouns: tuple[tuple[Any, str], ...] = ()
    phrases: tuple[tuple[Any, tuple[str, str]], ...] = ()


# pydantic's constraint errors: the context key holding the bound, and the words for it
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}
_SCALARS: dict[Any, tuple[str, str]] = {  # type -> (a value of it, values of it)
    str: ("a string", "strings"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "true or false values"),
    type(None): ("null", "nulls"),
}
_NUMBERS = {0: "no", 1: "one", 2: "two", 3: "three"}


def field_problems(exc: ValidationError, words: Vocabulary) -> list[FieldProblem]:
    """Each problem of ``exc`` once, in the author's words.

    pydantic reports a value that fits no member of a union once per member. When one member's
    errors reach inside the value (it is a list, and that member is a list), the others' say only
    "not this type" and are left out; the rest say the same thing and are reported once."""
    resolved = [(err, *_resolve(err["loc"], words.root)) for err in exc.errors(include_url=False)]
    found: list[tuple[bool, FieldProblem]] = []
    for err, loc, expected, _, at_member in resolved:
        if at_member and any(len(other) > len(loc) and other[: len(loc)] == loc for _, other, *_ in resolved):
            continue
        found.append((at_member, _field_problem(err, loc, expected, words)))
    # A member whose type the value has says what is wrong with it (``must be at least 0``): the
    # other members' "expected ..., got ..." adds nothing.
    fitted = {problem[0] for at_member, problem in found if at_member and problem[2] != "type"}
    problems: list[FieldProblem] = []
    for at_member, problem in found:
        if not (at_member and problem[2] == "type" and problem[0] in fitted) and problem not in problems:
            problems.append(problem)
    return problems


def _field_problem(err: Any, loc: tuple[Any, ...], expected: Any, words: Vocabulary) -> FieldProblem:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return loc, f"missing required field '{loc[-1]}' ({describe(expected, words)})", "missing_field", None
    if kind == "extra_forbidden":
        parent = _resolve(err["loc"][:-1], words.root)[2]
        return loc, f"unknown field '{loc[-1]}'", "unknown_field", did_you_mean(loc[-1], _field_names(parent))
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _tag_problem(kind, ctx, value, loc, expected, words)
    if kind in _BOUNDS:
        bound, bound_words = _BOUNDS[kind]
        return loc, f"must be {bound_words} {ctx.get(bound)}, got {what(value)}", "out_of_range", None
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return loc, _length_message(kind, ctx, value, expected, words), "out_of_range", None
    if kind == "multiple_of":
        return loc, f"must be a multiple of {ctx.get('multiple_of')}, got {what(value)}", "out_of_range", None
    if kind == "string_pattern_mismatch":
        return loc, f"must match the pattern {ctx.get('pattern')!r}, got {what(value)}", "invalid", None
    if kind in ("value_error", "assertion_error"):  # a model's own rule: its message is written for the author
        return loc, str(ctx.get("error") or err["msg"]), "invalid", None
    if _is_a(value, expected):  # a rule of its type the value breaks, not its type: never "expected a string,
        # got a string"; pydantic's words for the rule ("Input should be a finite number": "must be ...")
        rule = re.sub(r"^\w+ should\b", "must", err["msg"])
        return loc, f"{rule}, got {what(value)}", "invalid", None
    choices = get_args(_bare(expected)) if get_origin(_bare(expected)) is Literal else ()
    hint = did_you_mean(value, choices) if choices and isinstance(value, str) else None
    return loc, f"expected {describe(expected, words)}, got {what(value)}", "type", hint


def _tag_problem(
    kind: str, ctx: Mapping[str, Any], value: Any, loc: tuple[Any, ...], expected: Any, words: Vocabulary
) -> FieldProblem:
    """A member of a discriminated union (a check, by its ``kind``) that is missing or unknown."""
    key = str(ctx.get("discriminator", "")).strip("'")
    tags = [tag for member in _members(expected) for tag in _tags(member, key)]
    given = value.get(key) if isinstance(value, Mapping) else None
    if kind == "union_tag_not_found":
        return (*loc, key), f"missing required field '{key}' ({one_of(tags)})", "missing_field", None
    if not isinstance(given, str):
        return (*loc, key), f"expected {one_of(tags)}, got {what(given)}", "type", None
    message = f"unknown {_noun(expected, words)} {key} '{given}': expected {one_of(tags)}"
    return (*loc, key), message, "unknown_kind", did_you_mean(given, tags)


def _length_message(kind: str, ctx: Mapping[str, Any], value: Any, expected: Any, words: Vocabulary) -> str:
    """``at least one case is needed``, ``at most 3 items are allowed, got 5``, ``at most 64 characters are
    allowed, got 10000`` (a string's length is counted in characters)."""
    short = kind.endswith("too_short")
    bound = int(ctx.get("min_length" if short else "max_length") or 0)
    args = get_args(_bare(expected))
    noun = _noun(args[0], words) if get_origin(_bare(expected)) in (list, tuple) and args else None
    item = "character" if kind.startswith("string_") else noun or "item"
    counted = f"{_NUMBERS.get(bound, bound)} {item}" if bound == 1 else f"{_NUMBERS.get(bound, bound)} {item}s"
    if short:
        needed = f"at least {counted} {'is' if bound == 1 else 'are'} needed"
        return needed if value in ([], (), "") else f"{needed}, got {len(value)}"
    return f"at most {counted} {'is' if bound == 1 else 'are'} allowed, got {len(value)}"


def _is_a(value: Any, expected: Any) -> bool:
    """Whether ``value`` has the scalar type ``expected`` (a bool is no number, as the models take them)."""
    bare = _bare(expected)
    if bare not in (str, int, float) or isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if bare is float else bare)


def _resolve(pydantic_loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[tuple[Any, ...], Any, Any, bool]:
    """pydantic's location of an error → (the location in the file, the type the file should hold there,
    the type pydantic reached, whether the location ends on a union member). In a union pydantic adds
    the member it tried (``int``, ``list[Rule]``, a check's kind ``regex``): that part is not in the
    file, and what the file should hold there is the whole union."""
    loc: list[Any] = []
    expected = reached = root
    at_member = False
    for part in pydantic_loc:
        members = _members(reached)
        if len(members) > 1:  # ``X | None`` is one type to pydantic: no member in the location
            reached, at_member = _member(members, part), True
            continue
        reached = expected = _child(reached, part)
        loc.append(part)
        at_member = False
    return tuple(loc), expected, reached, at_member


def _member(members: tuple[Any, ...], label: Any) -> Any:
    """The member of a union pydantic's ``label`` names: a discriminator's value (``regex``), a model's
    class name, or a type's name (``int``, ``list[Rule]``, ``dict[str,any]``)."""
    name = str(label).split("[", 1)[0]
    for member in members:
        if get_origin(member) is Annotated and any(getattr(m, "tag", None) == label for m in get_args(member)[1:]):
            return _bare(member)  # a member of a union with a callable discriminator: its Tag
        bare = _bare(member)
        if any(label in _tags(bare, key) for key in _field_names(bare)):
            return bare
        if getattr(get_origin(bare) or bare, "__name__", None) == name:
            return bare
    return Any


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and, when one type is left, without ``| None``."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    members = _members(tp)
    return _bare(members[0]) if len(members) == 1 else tp


def _members(tp: Any) -> tuple[Any, ...]:
    """The types of a union, ``None`` left out; () for any other type."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) not in (Union, types.UnionType):
        return ()
    return tuple(member for member in get_args(tp) if member is not type(None))


def _child(tp: Any, part: Any) -> Any:
    tp = _bare(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return next((f.annotation for n, f in tp.model_fields.items() if part in (n, f.alias)), Any)
    args = get_args(tp)
    if get_origin(tp) is dict:
        return args[1]
    if get_origin(tp) in (tuple, list) and args:
        return args[0]
    return Any


def _field_names(model: Any) -> list[str]:
    return (
        [f.alias or n for n, f in model.model_fields.items()]
        if isinstance(model, type) and issubclass(model, BaseModel)
        else []
    )


def _tags(tp: Any, key: str) -> tuple[Any, ...]:
    """The values a model's ``key`` field may take when it is a ``Literal`` (a check's ``kind``)."""
    field = tp.model_fields.get(key) if isinstance(tp, type) and issubclass(tp, BaseModel) else None
    return get_args(field.annotation) if field is not None and get_origin(field.annotation) is Literal else ()


def _same_type(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are one type: equal once bare, or unions of the same members."""
    if _bare(a) == _bare(b):
        return True
    ma, mb = _members(a), _members(b)
    return bool(ma) and len(ma) == len(mb) and all(m in mb for m in ma)


def _noun(tp: Any, words: Vocabulary) -> str | None:
    return next((noun for known, noun in words.nouns if _same_type(tp, known)), None)


def describe(tp: Any, words: Vocabulary, *, plural: bool = False) -> str:
    """What a value of type ``tp`` is, in words: 'a list of strings', 'an object (a transition)'."""
    phrase = next((p for known, p in words.phrases if _same_type(tp, known)), None)
    if phrase is not None:
        return phrase[plural]
    tp = _bare(tp)
    origin, args = get_origin(tp), get_args(tp)
    if noun := _noun(tp, words):
        return f"{noun}s" if plural else f"an object ({'an' if noun[0] in 'aeiou' else 'a'} {noun})"
    if tp in _SCALARS:
        return _SCALARS[tp][plural]
    if origin is Literal:
        return one_of(args)
    if members := _members(tp):
        return " or ".join(describe(member, words, plural=plural) for member in members)
    if origin in (tuple, list):
        return "lists" if plural else f"a list of {describe(args[0], words, plural=True)}"
    if origin is dict:
        if _noun(args[1], words) == "state":
            return "an object of states keyed by id, or a list of states"
        if _bare(args[1]) is Any:
            return "objects" if plural else "an object"
        return "objects" if plural else f"an object of {describe(args[1], words, plural=True)}"
    return "values" if plural else "a JSON value"


def one_of(values: Sequence[object]) -> str:
    """``one of 'a', 'b' or 'c'`` (or ``'a'`` alone)."""
    quoted = [f"'{value}'" for value in values]
    return f"one of {', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else " ".join(quoted)


def what(value: Any) -> str:
    """What ``value`` is, in words, with a short scalar shown: 'a string ("high")', 'a list'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})" if abs(value) < 1e15 else "a number"
    if isinstance(value, str):
        shown = json.dumps(value if len(value) <= 40 else value[:40] + "…", ensure_ascii=False)
        return f"a string ({shown})" if value else "an empty string"
    if isinstance(value, (list, tuple)):
        return "a list" if value else "an empty list"
    if isinstance(value, Mapping):
        return "an object" if value else "an empty object"
    return "a value"


def did_you_mean(name: str, choices: object) -> str | None:
    """A hint naming the closest choice, or None."""
    options = [str(c) for c in choices] if isinstance(choices, (list, tuple, set, frozenset, dict)) else []
    close = difflib.get_close_matches(str(name), options, n=1)
    return f"did you mean '{close[0]}'?" if close else None
