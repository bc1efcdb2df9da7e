"""Writing an edited definition back into its file's own text, changing only what the author changed.

The page edits a JSON *value*; saving it with ``json.dumps`` would rewrite the whole file: its indentation,
the small objects written on one line, ``\\u00e9`` or ``é``, ``1.0`` or ``1e3``, CRLF line ends, the byte order
mark, the last newline. Then every save is a diff of the whole file, and the reviewer of a one-word change
reads a hundred lines. So :func:`render` reads the original text with a small scanner of its own (in the
spirit of :mod:`llm_fsm.definition.json_problems`, which finds where each value is to point problems at it)
that keeps, for each value, its span in the text, and for each member of an object or element of an array
the text around it: the white space before it (its *lead*), the key as written and the ``": "`` after it,
the white space before its comma (its *trail*). The new text is then built from those pieces:

- a value equal to the original one is its original text, copied. Equal is strict on types (``true`` is not
  ``1``) but not on spelling: ``1`` and ``1.0`` are equal, so ``1.0`` stays ``1.0``, and a string keeps its
  escapes;
- an object follows the order of the keys of the new value (the page keeps the file's order and appends new
  keys); a kept member keeps its key, its separator and the white space around it, and its value is written
  the same way, against the original one; a removed member goes with its lead, so no blank line or stray comma
  is left; a key that is gone, replaced by a new key at the same place, is a *rename*: the new key is written
  with the old member's separator and its value against the old value (renaming a state changes the line
  of its key and those that name it);
- an array pairs its new elements with the original ones, in order where it can (the pairing whose fits add
  up the most: equal elements first, then objects sharing most of their members, then any of the same kind;
  :class:`difflib.SequenceMatcher` for long arrays), then an element moved elsewhere found by its text, then
  a moved object that changed by its members (a transition dragged up gets a new priority). So inserting,
  deleting or moving one element leaves the others as they were, and changing one number of one transition
  rewrites that number;
- what is new is written in the file's style at its depth: its indent unit (the first indented line's; two
  spaces when none), its line ends, ``\\u`` escapes if the file writes its non-ASCII text so; objects one member
  a line; arrays of scalars as the file writes most of its own (:func:`_scalar_arrays_on_lines`): one element
  a line in a file that ``json.dumps(indent=2)`` wrote (``llm-fsm new`` makes them so, and several examples are
  so), else on one line (``["a", "b"]``, as ``insurance_claim.json`` is written), so that what the editor adds
  looks like the rest of its file;
  a container written on one line stays on one line (and what is added to it too), a container rewritten in
  place keeps its own way, and a new object among siblings that are all one-line objects is one line.
  An empty ``{}`` or ``[]`` has no style to keep: what fills it is written as new.

An original that is missing, empty, only white space or not JSON has nothing to keep: the value is written
fresh, two spaces, arrays of scalars inline, a final newline (and the byte order mark, if the text had one).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from typing import Any

# json's own string reader (the C one when there is): a string's value and where it ends, from after its quote
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # json.decoder has it; typeshed does not

_BOM = "\ufeff"
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
}
_MOST_ALIGNED = 2_500  # original × new elements of an array: up to this, all pairs are weighed (else difflib's)
_INDENT = re.compile(r"[ \t]*")
_FIRST_INDENT = re.compile(r"\n([ \t]+)[^ \t\r\n]")
_NON_ASCII_ESCAPE = re.compile(r"\\u(?!00[0-7])[0-9a-fA-F]{4}")


def render(original: str | None, value: Any) -> str:
    """The text of ``value``, written into ``original``: its unchanged parts copied, the rest in its style.

    ``render(text, json.loads(text)) == text`` for any JSON text (a leading byte order mark included). An
    ``original`` that is None, blank or not JSON gives fresh text. :class:`TypeError` if ``value`` is not JSON
    data (a key that is not a string, an object json cannot write)."""
    if original is None or not original.strip():
        return _fresh_document(value)
    bom = _BOM if original.startswith(_BOM) else ""
    text = original[len(bom) :]
    try:
        loaded = json.loads(text)  # the judge of what is JSON; the scanner below only reads what passed
        if loaded == value and _canon(loaded) == _canon(value):
            return original
        root, end = _Scanner(text).value(_skip(text, 0))
    except (ValueError, RecursionError):
        return bom + _fresh_document(value)
    writer = _Writer(text, scalar_arrays_on_lines=_scalar_arrays_on_lines(root))
    return bom + text[: root.start] + writer.value(root, value, inline=False) + text[end:]


def _skip(text: str, at: int) -> int:
    """Where the white space at ``at`` ends."""
    match = _WS.match(text, at)
    return match.end() if match else at


def _fresh_document(value: Any) -> str:
    return _Writer("").fresh(value, "", inline=False) + "\n"


def _scalar_arrays_on_lines(root: _Node) -> bool:
    """Whether most of the text's non-empty arrays of scalars are written one element a line.

    Each such array counts one: on lines if every element starts a line, on one line if it has no line break;
    an array wrapped a few elements a line is neither and does not count. A tie, or no such array, is one
    line: the shorter, and what the writer did before it looked. (A walk with a list, not recursion: the scanner
    already read the text's depth, this should not fail where it did not.)"""
    on_lines = on_one_line = 0
    pending = [root]
    while pending:
        node = pending.pop()
        if not node.items:
            continue
        if isinstance(node.value, list) and all(item.node.items is None for item in node.items):
            if all("\n" in item.lead for item in node.items):
                on_lines += 1
            elif not _multiline(node):
                on_one_line += 1
            continue
        pending.extend(item.node for item in node.items)
    return on_lines > on_one_line


def _multiline(node: _Node) -> bool:
    """Whether the container ``node`` is written on more than one line (what is added to a one-line container
    and what changes in it stays on its line)."""
    items = node.items
    assert items
    return any("\n" in item.lead for item in items) or "\n" in items[-1].trail


class _Node:
    """One value of the original text: where it is, what it is, and for a container its members."""

    __slots__ = ("canon", "end", "items", "start", "value")

    def __init__(self, start: int, end: int, value: Any, items: list[_Item] | None) -> None:
        self.start, self.end, self.value = start, end, value
        self.items = items  # None for a scalar; [] for an empty container
        self.canon: str | None = None  # json.dumps of the value, made when first needed


class _Item:
    """A member of an object (``key`` set) or an element of an array, with the text around it."""

    __slots__ = ("key", "key_text", "lead", "node", "separator", "trail")

    def __init__(self, lead: str, key: str | None, key_text: str, separator: str, node: _Node, trail: str) -> None:
        self.lead = lead  # the white space before it (after '{', '[' or ',')
        self.key, self.key_text, self.separator = key, key_text, separator  # '"key"' and '": "' as written
        self.node = node
        self.trail = trail  # the white space after it (before ',' or the closing bracket)


class _Scanner:
    """Reads JSON text that ``json.loads`` accepted into :class:`_Node` s (strings decoded by json's own code)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, start: int) -> tuple[_Node, int]:
        text = self.text
        first = text[start]
        if first == "{" or first == "[":
            return self._container(start, first == "{")
        if first == '"':
            string, end = _scanstring(text, start + 1)
            return _Node(start, end, string, None), end
        number = _NUMBER.match(text, start)
        if number:
            integer = number.group(1) is None and number.group(2) is None
            value: Any = int(number.group()) if integer else float(number.group())
            return _Node(start, number.end(), value, None), number.end()
        for word, constant in _CONSTANTS.items():
            if text.startswith(word, start):
                return _Node(start, start + len(word), constant, None), start + len(word)
        raise ValueError(f"not a JSON value at offset {start}")

    def _container(self, start: int, is_object: bool) -> tuple[_Node, int]:
        text, close = self.text, "}" if is_object else "]"
        items: list[_Item] = []
        cursor = start + 1
        at = _skip(text, cursor)
        if text[at] == close:
            return _Node(start, at + 1, {} if is_object else [], []), at + 1
        while True:
            key, key_text, separator = None, "", ""
            value_start = at
            if is_object:
                key, key_end = _scanstring(text, at + 1)
                colon = _skip(text, key_end)
                value_start = _skip(text, colon + 1)
                key_text, separator = text[at:key_end], text[key_end:value_start]
            node, value_end = self.value(value_start)
            after = _skip(text, value_end)
            items.append(_Item(text[cursor:at], key, key_text, separator, node, text[value_end:after]))
            if text[after] == close:
                break
            cursor = after + 1  # past the ','
            at = _skip(text, cursor)
        value: Any = {item.key: item.node.value for item in items} if is_object else [i.node.value for i in items]
        return _Node(start, after + 1, value, items), after + 1


def _canon(value: Any) -> str:
    return json.dumps(value)


def _node_canon(node: _Node) -> str:
    if node.canon is None:
        node.canon = _canon(node.value)
    return node.canon


def _kind(value: Any) -> type:
    """The JSON type of a value: dict, list, bool, float (every number), str or NoneType."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, int | float):
        return float
    if isinstance(value, tuple):
        return list
    return type(value)


def _same_scalar(old: Any, new: Any) -> bool:
    if _kind(old) is not _kind(new):
        return False
    if old == new:
        return True
    return isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list | tuple)


def _pair(items: list[_Item], value: list[Any]) -> list[int | None]:
    """For each new element, the original element it is (unchanged, moved or changed), or None (it is new).

    First an alignment of the two lists that keeps them in order: for arrays of up to
    :data:`_MOST_ALIGNED` pairs, the one that pairs best (:func:`_align`), else the equal runs
    :class:`SequenceMatcher` finds and what is left of each replaced run, in order. Then, among what is left, an
    element deleted in one place and inserted as it was in another (moved), and an object that shares at least
    half its members with one left (moved and changed: a transition dragged up gets a new priority)."""
    old = [_node_canon(item.node) for item in items]
    new = [_canon(element) for element in value]
    scores = _Scores(items, value, old, new)
    replaced: list[tuple[range, range]] = []
    if len(old) * len(new) <= _MOST_ALIGNED:
        paired = _align(scores)
    else:
        paired, replaced = _match(old, new)
    used = {index for index in paired if index is not None}
    if len(used) < len(old):
        _pair_moved(paired, used, old, new)
        _pair_similar(paired, used, scores)
        for olds, news in replaced:
            rest_old = [index for index in olds if index not in used]
            rest_new = [position for position in news if paired[position] is None]
            for index, position in zip(rest_old, rest_new, strict=False):
                paired[position] = index
    # Originals equal in value (a copy pasted, then reformatted) are interchangeable, and so are new elements
    # equal in value: give them out in order, so that editing one of them does not swap their texts.
    _in_order(paired, [None if index is None else old[index] for index in paired])
    _in_order(paired, new)
    return paired


def _pair_moved(paired: list[int | None], used: set[int], old: list[str], new: list[str]) -> None:
    """Pair a new element left with an original left that is equal to it: it moved."""
    moved: dict[str, list[int]] = {}
    for index, text in enumerate(old):
        if index not in used:
            moved.setdefault(text, []).append(index)
    for position, text in enumerate(new):
        if paired[position] is None and moved.get(text):
            paired[position] = index = moved[text].pop(0)
            used.add(index)


def _pair_similar(paired: list[int | None], used: set[int], scores: _Scores) -> None:
    """Pair the new objects left with the originals left that have half their members or more, best first."""
    left_old = [index for index in range(len(scores.old)) if index not in used]
    left_new = [position for position, index in enumerate(paired) if index is None]
    if not left_old or not left_new or len(left_old) * len(left_new) > _MOST_ALIGNED:
        return
    similar = [
        (-score, abs(index - position), index, position)
        for index in left_old
        for position in left_new
        if (score := scores.similarity(index, position)) >= 0.5
    ]
    for _, _, index, position in sorted(similar):
        if index not in used and paired[position] is None:
            paired[position] = index
            used.add(index)


def _in_order(paired: list[int | None], values: Sequence[str | None]) -> None:
    """Among the positions of equal ``values``, hand out their originals in order."""
    twins: dict[str, list[int]] = {}
    for position, index in enumerate(paired):
        value = values[position]
        if index is not None and value is not None:
            twins.setdefault(value, []).append(position)
    for positions in twins.values():
        if len(positions) > 1:
            in_order = sorted(index for position in positions if (index := paired[position]) is not None)
            for position, index in zip(positions, in_order, strict=True):
                paired[position] = index


class _Scores:
    """How well a new element fits an original one, for pairing them."""

    def __init__(self, items: list[_Item], value: list[Any], old: list[str], new: list[str]) -> None:
        self.items, self.value, self.old, self.new = items, value, old, new
        self._old_members: dict[int, dict[str | None, str]] = {}
        self._new_members: dict[int, dict[str, str]] = {}

    def fit(self, index: int, position: int) -> float:
        """8 if equal (more than two other fits: an element kept as it was beats two rewritten, as when two
        similar transitions swap places); 2 to 3 for objects sharing half their members or more; 1 for
        elements of the same kind; else 0 (not to be paired)."""
        if self.old[index] == self.new[position]:
            return 8.0
        before, after = self.items[index].node.value, self.value[position]
        if _kind(before) is not _kind(after):
            return 0.0
        similarity = self.similarity(index, position) if isinstance(after, dict) else 0.0
        return 2.0 + similarity if similarity >= 0.5 else 1.0

    def similarity(self, index: int, position: int) -> float:
        """The share of members two objects have equal (0 if either is not an object)."""
        node, after = self.items[index].node, self.value[position]
        if not isinstance(node.value, dict) or not isinstance(after, dict) or not node.items or not after:
            return 0.0
        if index not in self._old_members:
            self._old_members[index] = {item.key: _node_canon(item.node) for item in node.items}
        if position not in self._new_members:
            self._new_members[position] = {key: _canon(member) for key, member in after.items()}
        before, members = self._old_members[index], self._new_members[position]
        same = sum(1 for key, text in members.items() if before.get(key) == text)
        return same / max(len(before), len(members))


def _align(scores: _Scores) -> list[int | None]:
    """The in-order pairing of the new elements with the original ones whose fits add up the most."""
    n, m = len(scores.old), len(scores.new)
    fit = [[scores.fit(index, position) for position in range(m)] for index in range(n)]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for index in range(n):
        row, below, fits = best[index], best[index + 1], fit[index]
        for position in range(m):
            take = row[position] + fits[position] if fits[position] else 0.0
            below[position + 1] = max(row[position + 1], below[position], take)
    paired: list[int | None] = [None] * m
    index, position = n, m
    while index and position:
        here = fit[index - 1][position - 1]
        if here and best[index][position] == best[index - 1][position - 1] + here:
            index, position = index - 1, position - 1
            paired[position] = index
        elif best[index][position] == best[index - 1][position]:
            index -= 1
        else:
            position -= 1
    return paired


def _match(old: list[str], new: list[str]) -> tuple[list[int | None], list[tuple[range, range]]]:
    """The pairing of long arrays: the runs :class:`SequenceMatcher` finds equal; and the replaced runs."""
    paired: list[int | None] = [None] * len(new)
    replaced: list[tuple[range, range]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            paired[j1:j2] = range(i1, i2)
        elif tag == "replace":
            replaced.append((range(i1, i2), range(j1, j2)))
    return paired, replaced


class _Writer:
    """Writes new values against the original text's nodes, in the text's style."""

    def __init__(self, text: str, scalar_arrays_on_lines: bool = False) -> None:
        self.text = text
        self.scalar_arrays_on_lines = scalar_arrays_on_lines  # new arrays of scalars one element a line
        self.newline = "\r\n" if 2 * text.count("\r\n") > text.count("\n") else "\n"
        first_indent = _FIRST_INDENT.search(text)
        self.unit = first_indent.group(1) if first_indent else "  "
        self.ascii = bool(text) and text.isascii() and bool(_NON_ASCII_ESCAPE.search(text))
        self._one_line: dict[tuple[int, type], bool] = {}  # (container's offset, kind): see _like_siblings

    # -- against the original --------------------------------------------------------------------------

    def value(self, node: _Node, value: Any, inline: bool) -> str:
        """``value`` written where ``node`` was: ``node``'s text if equal, else rebuilt from its pieces."""
        if node.items is None:
            if _same_scalar(node.value, value):
                return self.text[node.start : node.end]
        elif _kind(node.value) is _kind(value):
            if node.value == value and _node_canon(node) == _canon(value):
                return self.text[node.start : node.end]
            if node.items:
                return self._object(node, value) if isinstance(value, dict) else self._array(node, value)
        return self.fresh(value, self._indent_at(node.start), inline)

    def _object(self, node: _Node, value: dict[str, Any]) -> str:
        items = node.items
        assert items
        last_of: dict[str | None, int] = {item.key: index for index, item in enumerate(items)}  # a repeated key: last
        kept = {index for index, item in enumerate(items) if last_of[item.key] == index and item.key in value}
        # the members gone, by the kept key they came after: a new key after the same kept key is a rename
        gone: dict[str | None, list[int]] = {}
        anchor: str | None = None
        for index, item in enumerate(items):
            if index in kept:
                anchor = item.key
            elif last_of[item.key] == index:
                gone.setdefault(anchor, []).append(index)
        anchor = None
        parts: list[tuple[int | None, str]] = []
        new_lead: str | None = None
        inline = not _multiline(node)
        for key, member in value.items():
            if not isinstance(key, str):
                raise TypeError(f"a JSON object's keys are strings: {key!r} is not")
            source = last_of.get(key)
            if source is not None:
                anchor = key
            elif gone.get(anchor):
                source = gone[anchor].pop(0)  # renamed: the new key, and the value against the old one
            if source is not None:
                item = items[source]
                key_text = item.key_text if item.key == key else self._string(key)
                parts.append((source, key_text + item.separator + self.value(item.node, member, inline)))
            else:
                new_lead = new_lead if new_lead is not None else self._new_lead(node)
                separator = items[0].separator if "\n" not in items[0].separator else ": "
                fresh = self.fresh(member, self._indent_of(new_lead, node), inline or self._like_siblings(node, member))
                parts.append((None, self._string(key) + separator + fresh))
        return self._join(node, parts, "{", "}")

    def _array(self, node: _Node, value: list[Any]) -> str:
        items = node.items
        assert items
        paired = _pair(items, value)
        parts: list[tuple[int | None, str]] = []
        new_lead: str | None = None
        inline = not _multiline(node)
        for position, element in enumerate(value):
            index = paired[position]
            if index is not None:
                parts.append((index, self.value(items[index].node, element, inline)))
            else:
                new_lead = new_lead if new_lead is not None else self._new_lead(node)
                indent = self._indent_of(new_lead, node)
                parts.append((None, self.fresh(element, indent, inline or self._like_siblings(node, element))))
        return self._join(node, parts, "[", "]")

    def _join(self, node: _Node, parts: list[tuple[int | None, str]], opening: str, closing: str) -> str:
        """The container's text: each part with its original lead and trail where it has them."""
        items = node.items
        assert items
        if not parts:
            return opening + closing
        last, out = len(parts) - 1, [opening]
        new_lead = self._new_lead(node) if any(index is None or index == 0 for index, _ in parts[1:]) else ""
        new_trail = items[0].trail if len(items) > 1 else ""
        for position, (index, body) in enumerate(parts):
            if position == 0:
                lead = items[0].lead
            elif index is not None and index > 0:
                lead = items[index].lead
            else:
                lead = new_lead
            if position == last:
                trail = items[-1].trail
            elif index is not None and index < len(items) - 1:
                trail = items[index].trail
            else:
                trail = new_trail
            if position:
                out.append(",")
            out += (lead, body, trail)
        out.append(closing)
        return "".join(out)

    def _like_siblings(self, node: _Node, value: Any) -> bool:
        """Whether a new ``value`` in the multi-line ``node`` is written on one line, as all the values there
        are: containers of its kind written on one line (the fields of a ``context_schema``, say)."""
        if _is_scalar(value) or not value:
            return True  # on one line anyway
        assert node.items
        kind = _kind(value)
        if (node.start, kind) not in self._one_line:
            self._one_line[node.start, kind] = all(
                _kind(item.node.value) is kind and item.node.items and "\n" not in self._span(item.node)
                for item in node.items
            )
        return self._one_line[node.start, kind]

    def _new_lead(self, node: _Node) -> str:
        """The white space before a new member of ``node``: its members', without blank lines."""
        items = node.items
        assert items
        if not _multiline(node):
            if len(items) > 1:
                return items[1].lead
            return "" if items[0].separator == ":" else " "
        for item in (*items[1:], items[0]):
            if "\n" in item.lead:
                return self.newline + item.lead[item.lead.rfind("\n") + 1 :]
        return self.newline + self._indent_at(node.start) + self.unit

    def _indent_of(self, lead: str, node: _Node) -> str:
        """The indentation of a new member of ``node`` that ``lead`` precedes."""
        if "\n" in lead:
            return lead[lead.rfind("\n") + 1 :]
        return self._indent_at(node.start) + self.unit

    def _indent_at(self, offset: int) -> str:
        """The indentation of the line ``offset`` is on."""
        match = _INDENT.match(self.text, self.text.rfind("\n", 0, offset) + 1)
        assert match
        return match.group()

    def _span(self, node: _Node) -> str:
        return self.text[node.start : node.end]

    # -- fresh -----------------------------------------------------------------------------------------

    def fresh(self, value: Any, indent: str, inline: bool) -> str:
        """``value`` written anew, its closing bracket at ``indent`` (on one line if ``inline``)."""
        if isinstance(value, dict):
            if not value:
                return "{}"
            for key in value:
                if not isinstance(key, str):
                    raise TypeError(f"a JSON object's keys are strings: {key!r} is not")
            if inline:
                return (
                    "{" + ", ".join(f"{self._string(k)}: {self.fresh(v, indent, True)}" for k, v in value.items()) + "}"
                )
            inner = self.newline + indent + self.unit
            members = (
                f"{inner}{self._string(k)}: {self.fresh(v, indent + self.unit, False)}" for k, v in value.items()
            )
            return "{" + ",".join(members) + self.newline + indent + "}"
        if isinstance(value, list | tuple):
            if not value:
                return "[]"
            if inline or (not self.scalar_arrays_on_lines and all(_is_scalar(element) for element in value)):
                return "[" + ", ".join(self.fresh(element, indent, True) for element in value) + "]"
            inner = self.newline + indent + self.unit
            elements = (inner + self.fresh(element, indent + self.unit, False) for element in value)
            return "[" + ",".join(elements) + self.newline + indent + "]"
        return json.dumps(value, ensure_ascii=self.ascii)

    def _string(self, key: str) -> str:
        return json.dumps(key, ensure_ascii=self.ascii)
