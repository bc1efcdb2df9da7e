"""Regular expressions in guided schemas, written as a grammar-driven server (llama.cpp) holds them:
:func:`portable_pattern` rewrites a declared pattern; :func:`containing` makes one for text that must
contain given characters (an email's "@"). Both bound their repeats, since a grammar ignores ``maxLength``."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

MAX_TEXT = 80  # characters of a text value (a small model loops: "I'm going to the mountains, I'm going...")

# what a value's characters may be in a pattern: any but the quote, the backslash and control characters, so
# a grammar held to the pattern writes valid JSON (llama.cpp's "." would let a raw quote through)
_TEXT_EXCLUDED = r'"\\\x7F\x00-\x1F'
_REGEX_SPECIAL = frozenset("^$.[]()|{}*+?")


def literal(text: str) -> str | None:
    """``text`` as a regular expression that both Python and llama.cpp's patterns read; None for text a
    JSON value cannot hold unescaped (quotes, backslashes, control characters)."""
    if not text or any(c in '"\\' or ord(c) < 0x20 or c == "\x7f" for c in text):
        return None
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)


def _in_class(char: str) -> str:
    return "\\" + char if char in "[]-^" else char


def containing(parts: list[str], limit: int, without: str = "") -> str | None:
    """A bounded pattern of text holding every one of ``parts`` (in any order) and never the character
    ``without``: one part, or up to three distinct single characters (longer parts could overlap, which the
    orders below would miss)."""
    parts = list(dict.fromkeys(parts))
    literals = [literal(part) for part in parts]
    if len(parts) > 3 or (len(parts) > 1 and any(len(p) != 1 for p in parts)) or None in literals:
        return None
    if without and (literal(without) is None or any(without in part for part in parts)):
        return None
    free = max(0, limit - sum(map(len, parts))) // (len(parts) + 1)
    gap = f"[^{_TEXT_EXCLUDED}{_in_class(without) if without else ''}]{{0,{free}}}"
    orders = [gap + gap.join(order) + gap for order in itertools.permutations(literals)]  # type: ignore[arg-type]  # no None: refused above
    return "^" + (orders[0] if len(orders) == 1 else "(?:" + "|".join(orders) + ")") + "$"


OPENING_CHARS = 12  # a message may not open with the first this many letters and digits of an earlier one
_PREFIX, _EXACT = "prefix", "exact"  # an opening ends here: whatever follows repeats it / only ending here does
_ASCII = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def not_opening_like(earlier: Iterable[str], limit: int) -> str | None:
    """A pattern of text up to about ``limit`` characters that repeats none of ``earlier``'s openings: its first
    :data:`OPENING_CHARS` letters and digits, in any case, with anything else between them (spaces, commas,
    curly apostrophes, emoji); an earlier message shorter than that is avoided only as a whole ("Ok." forbids
    "ok!", not "Okay, booked"). A 135M model wrote its greeting again, word for word, turn after turn, and
    dodged a first cut of this rule with a comma. None when there is nothing to avoid.

    Each character is either a letter the earlier messages use (or an ASCII one), which goes on with an opening
    or leaves it, or anything else, which is skipped (up to three in a row; a fourth leaves every opening)."""
    trie, letters = _openings(earlier)
    if not trie:
        return None
    known = _class(letters)
    other = f"[^{_TEXT_EXCLUDED}{known}]"

    def either(char: str) -> str:
        return f"[{_in_class(char)}{_in_class(char.upper())}]" if char.upper() != char else literal(char) or ""

    def going_on(node: dict[str, Any]) -> list[str]:
        return [char for char in node if char and node[char].get("") != _PREFIX and literal(char) is not None]

    def diverging(node: dict[str, Any]) -> str:  # the opening's start, then a letter it does not go on with
        taken = {c for char in node if char for c in (char, char.upper())}
        ways = [f"[{_class(letters - taken)}]"] + [either(char) + diverging(node[char]) for char in going_on(node)]
        return f"(?:{other}{{4}}|{other}{{0,3}}(?:{'|'.join(ways)}))"

    def shorter(node: dict[str, Any]) -> str | None:  # a message that ends before an opening does
        ways = [f"{either(char)}{found}" for char in going_on(node) if (found := shorter(node[char])) is not None]
        if node.get("") == _EXACT:  # the whole of a short earlier message: ending here repeats it
            return f"{other}{{0,3}}(?:{'|'.join(ways)})" if ways else None
        return f"{other}{{0,3}}" + (f"(?:{'|'.join(ways)})?" if ways else "")

    # one tail after the divergence: a grammar expands each bounded repetition, and llama.cpp refused a
    # pattern with one per character of the opening
    tail = f"[^{_TEXT_EXCLUDED}]{{0,{max(0, limit - 2 * OPENING_CHARS)}}}"
    ended = shorter(trie)
    return "^(?:" + diverging(trie) + tail + (f"|{ended}" if ended is not None else "") + ")$"


def _openings(earlier: Iterable[str]) -> tuple[dict[str, Any], set[str]]:
    """The openings of ``earlier`` as a trie of their lower-case letters and digits (an opening ends where a node's
    ``""`` says how: :data:`_PREFIX` for one of :data:`OPENING_CHARS` characters, whatever follows it repeating it;
    :data:`_EXACT` for a whole short message), and the letters a message may use: ASCII's and theirs, both cases."""
    trie: dict[str, Any] = {}
    letters = set(_ASCII)
    for text in earlier:
        chars = [char for char in text.lower() if char.isalnum() and len(char.upper()) == 1]
        letters.update(chars + [char.upper() for char in chars])
        if not chars:
            continue
        node = trie
        for char in chars[:OPENING_CHARS]:
            if node.get("") == _PREFIX:  # a shorter opening ends here: this one is avoided already
                break
            node = node.setdefault(char, {})
        else:
            if len(chars) > OPENING_CHARS:
                node.clear()
                node[""] = _PREFIX
            elif "" not in node:
                node[""] = _EXACT
    return trie, letters


def _class(chars: Iterable[str]) -> str:
    """The inside of a bracket class of ``chars``, consecutive runs written as ranges (``A-Z``)."""
    ordered = sorted(set(chars))
    runs: list[list[str]] = []
    for char in ordered:
        if runs and ord(char) == ord(runs[-1][-1]) + 1:
            runs[-1].append(char)
        else:
            runs.append([char])
    return "".join(
        _in_class(run[0]) + ("-" + _in_class(run[-1]) if len(run) > 2 else _in_class(run[-1]) if len(run) == 2 else "")
        for run in runs
    )


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
    in_class = False
    limit = max(1, limit // max(1, _open_repeats(pattern)))  # the repeats share the length
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(_escape(pattern[i + 1], in_class))
            i += 2
        elif in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            opened, i = _class_opening(pattern, i)
            in_class = True
            out.append(opened)
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


def _escape(escaped: str, in_class: bool) -> str:
    """The escape of ``escaped`` (the character after a backslash) as llama.cpp reads it: a shorthand class
    (``\\d``) as its characters inside brackets, else as a bracket class; its negation (``\\D``, outside
    brackets) a negated class that never matches what ends a JSON string; any other escape as it was."""
    if escaped in _SHORTHANDS:
        return _SHORTHANDS[escaped] if in_class else f"[{_SHORTHANDS[escaped]}]"
    if escaped.lower() in _SHORTHANDS and not in_class:
        return f"[^{_SHORTHANDS[escaped.lower()]}{_TEXT_EXCLUDED}]"
    return "\\" + escaped


def _class_opening(pattern: str, i: int) -> tuple[str, int]:
    """The opening of the bracket class at ``pattern[i]`` (a ``[``) as written for a grammar, and where the class's
    own characters go on: a negated class first excludes what ends a JSON string, and a ``]`` or ``-`` right after
    the opening, a character of the class, is escaped."""
    negated = pattern[i + 1 : i + 2] == "^"
    i += 2 if negated else 1
    opened = "[^" if negated else "["
    if negated and not pattern.startswith(_TEXT_EXCLUDED, i):  # first, so nothing after makes it a range
        opened += _TEXT_EXCLUDED
    if pattern[i : i + 1] in ("]", "-"):  # a character of the class where it stands: escaped after ours
        opened += "\\" + pattern[i]
        i += 1
    return opened, i


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
