"""JSON text as a person wrote it: why it is not JSON, in plain words and at which line:column, and
where each value of it is (to point problems at their place). Used by the loader and by test files."""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

_BOM = "\ufeff"
_WIDE_BOMS = {  # the byte order marks of UTF-32 and UTF-16; UTF-32's first, as its marks start like UTF-16's
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}
_YAML = re.compile(r"---|%YAML|-\s|[\w\"'-][\w \"'.-]*:(\s|$)")
_WORD = re.compile(r"[A-Za-z_][\w.-]*")
_PYTHON_CONSTANTS = frozenset({"True", "False", "None", "TRUE", "FALSE", "NULL", "Null"})
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_BRACKET = re.compile(rf"{_STRING}|[\[\]{{}}]")
_TOKEN = re.compile(rf"{_STRING}|[\[\]{{}}:,]|[^\s\[\]{{}}:,\"]+")
# What json's messages mean, for the cases that need no more than the message and the place.
_JSON_MESSAGES = {
    "Expecting ',' delimiter": "a ',' is missing between two items",
    "Expecting ':' delimiter": "a ':' is missing after the key",
    "Expecting value": "a value is missing",
    "Expecting property name enclosed in double quotes": "a key in double quotes is missing",
    "Invalid control character at": "a string cannot hold a line break or a tab: write \\n or \\t",
    "Invalid \\uXXXX escape": "'\\u' must be followed by four hexadecimal digits",
}


def encoding_message(raw: bytes, start: int) -> str:
    for bom, name in _WIDE_BOMS.items():
        if raw.startswith(bom):
            return f"the file is {name} text: save it as UTF-8"
    line, column = raw.count(b"\n", 0, start) + 1, start - (raw.rfind(b"\n", 0, start) + 1) + 1
    return f"the file is not UTF-8 text: byte 0x{raw[start]:02X} at {line}:{column} (save the file as UTF-8)"


def line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def json_problem(text: str, exc: json.JSONDecodeError) -> tuple[str, int]:
    """Why ``text`` is not JSON, in plain words ending with where, and the offset to point at."""
    if not text.strip():
        return "the file is empty: a definition is a JSON object, starting with '{'", 0
    for reading in (_foreign_syntax, _cut_off, _bare_word, _bad_escape_or_extra):
        if problem := reading(text, exc):
            return problem
    return f"{_JSON_MESSAGES.get(exc.msg, 'this is not valid JSON')} at {_at(text, exc.pos)}", exc.pos


def _at(text: str, where: int) -> str:
    return "{}:{}".format(*line_column(text, where))


def _foreign_syntax(text: str, exc: json.JSONDecodeError) -> tuple[str, int] | None:
    """Something other formats allow and JSON does not: YAML, comments, single quotes, a BOM, a trailing comma."""
    offset, rest = exc.pos, text[exc.pos :]
    first = len(text) - len(text.lstrip())
    if offset == first and _YAML.match(text, first):
        return (
            f"this looks like YAML, but a definition file must be JSON (starting with '{{') at {_at(text, first)}",
            first,
        )
    if rest.startswith(("//", "/*")):
        kind = "//" if rest.startswith("//") else "/* */"
        return f"JSON does not allow comments: remove the '{kind}' comment at {_at(text, offset)}", offset
    if rest.startswith("'"):
        return f"JSON needs double quotes around keys and strings: replace the ' at {_at(text, offset)}", offset
    if rest.startswith(_BOM):
        return f"a byte order mark (BOM) cannot be here: remove it at {_at(text, offset)}", offset
    before = text[:offset].rstrip()
    if rest[:1] in ("}", "]") and before.endswith(","):
        comma = len(before) - 1
        return f"JSON does not allow a trailing comma: remove the ',' at {_at(text, comma)}", comma
    return None


def _cut_off(text: str, exc: json.JSONDecodeError) -> tuple[str, int] | None:
    """The file ends inside a string or with a container still open."""
    offset = exc.pos
    if exc.msg.startswith("Unterminated string"):
        where = _at(text, offset)
        message = f"the file ends before the JSON does (is it cut off?): the string at {where} is never closed"
        return message, len(text)
    if not text[offset:].strip():
        opened = _unclosed(text)
        what = (
            f"the '{text[opened]}' at {_at(text, opened)} is never closed" if opened is not None else "it is incomplete"
        )
        return f"the file ends before the JSON does (is it cut off?): {what}", offset
    return None


def _bare_word(text: str, exc: json.JSONDecodeError) -> tuple[str, int] | None:
    """A word without quotes where JSON wants a value or a key: a Python constant, a key, a string."""
    offset = exc.pos
    word = _WORD.match(text, offset)
    if not word:
        return None
    if word.group() in _PYTHON_CONSTANTS:
        return f"JSON writes true, false and null in lowercase: '{word.group()}' at {_at(text, offset)}", offset
    if exc.msg.startswith("Expecting property name"):
        return f'keys need double quotes: write "{word.group()}" at {_at(text, offset)}', offset
    if exc.msg == "Expecting value":
        return f'text needs double quotes: write "{word.group()}" at {_at(text, offset)}', offset
    return None


def _bad_escape_or_extra(text: str, exc: json.JSONDecodeError) -> tuple[str, int] | None:
    """A backslash escape JSON does not know, or text after the object's end."""
    offset = exc.pos
    if exc.msg.startswith("Invalid \\escape"):
        escape = text[offset : offset + 2]
        return f"'{escape}' is not a JSON escape: write '\\\\' for a backslash, at {_at(text, offset)}", offset
    if exc.msg == "Extra data":
        return f"there is more after the end of the JSON object: the '{text[offset]}' at {_at(text, offset)}", offset
    return None


def _unclosed(text: str) -> int | None:
    """The offset of the innermost '{' or '[' that ``text`` leaves open (strings skipped), or None."""
    opened: list[int] = []
    for match in _BRACKET.finditer(text):
        token = match.group()
        if token in "{[":
            opened.append(match.start())
        elif token in "}]" and opened:
            opened.pop()
    return opened[-1] if opened else None


@dataclass(slots=True)
class _Open:
    """A container :func:`_values` is inside: where it is, and which of its members it is at."""

    path: tuple[str | int, ...]
    is_object: bool
    member: str | int = 0  # the key (in an object) or the index (in a list) of the current value
    key_offset: int | None = None


def _values(text: str) -> Iterator[tuple[tuple[str | int, ...], int, int | None]]:
    """Each value of the JSON ``text`` in order: its path, its offset, and the offset of its key (in an
    object) or None. ``text`` is JSON that parsed (a repeated key aside)."""
    inside: list[_Open] = []
    container: _Open | None
    expecting_key = False
    for match in _TOKEN.finditer(text):
        token, offset = match.group(), match.start()
        if token == ":":
            continue
        if token == ",":
            container = inside[-1]
            if container.is_object:
                expecting_key = True
            else:
                container.member = int(container.member) + 1
            continue
        if token in ("}", "]"):
            inside.pop()
            expecting_key = False
            continue
        if expecting_key:
            inside[-1].member, inside[-1].key_offset = _key(token), offset
            expecting_key = False
            continue
        container = inside[-1] if inside else None
        path = (*container.path, container.member) if container else ()
        yield path, offset, container.key_offset if container and container.is_object else None
        if token in ("{", "["):
            inside.append(_Open(path, token == "{"))
            expecting_key = token == "{"


def _key(token: str) -> str:
    return token[1:-1] if "\\" not in token else json.loads(token)


def first_duplicate(text: str) -> tuple[tuple[str | int, ...], int, int]:
    """The path of the first key that repeats in its object, where it repeats, and where it was first."""
    seen: dict[tuple[str | int, ...], int] = {}
    for path, _, key_offset in _values(text):
        if key_offset is None:
            continue
        if path in seen:
            return path, key_offset, seen[path]
        seen[path] = key_offset
    raise AssertionError("the text has no repeated key")  # only called after the parser found one


def positions(text: str) -> dict[str, tuple[int, int]]:
    """JSON pointer → 1-based (line, column) of each value (of its key, for object members)."""
    line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
    result = {}
    for path, offset, key_offset in _values(text):
        where = key_offset if key_offset is not None else offset
        line = bisect.bisect_right(line_starts, where)
        pointer = json_pointer(path)
        result[pointer] = (line, where - line_starts[line - 1] + 1)
    return result


def json_pointer(path: Sequence[str | int]) -> str:
    """``("states", "a b/c", 0)`` → ``/states/a b~1c/0`` (RFC 6901)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


class DuplicateKey(ValueError):
    """Raised while parsing: an object repeats a key (where is found afterwards, by :func:`first_duplicate`)."""


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) < len(pairs):
        raise DuplicateKey()
    return result
