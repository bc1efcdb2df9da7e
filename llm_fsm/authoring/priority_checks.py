"""The check for transitions of one state that share a priority and can hold together (``ambiguous_priority``,
see :mod:`llm_fsm.authoring.analysis`), found by a sweep that tries far fewer than every pair."""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from llm_fsm.authoring.condition_solver import find_witness
from llm_fsm.authoring.requirements import Requirements
from llm_fsm.authoring.review import Finding, Review
from llm_fsm.definition.models import Transition

_PRIORITY_HINT = (
    "priority does not choose between them: the model names a target_state, and the move is accepted when "
    "any transition to that target has conditions that hold; priority only orders the transitions in the "
    "prompt (lowest first). Make the conditions exclusive if only one move may be valid, or give the "
    "preferred one a lower number so the prompt lists it first"
)


def ambiguous_priorities(review: Review) -> Iterator[Finding]:
    """``ambiguous_priority``: two transitions of one state and priority that can hold together."""
    schema = review.definition.context_schema
    for sid in review.definition.states:
        levels: dict[int, list[_Option]] = {}
        for i, transition, found in review.transitions(sid):
            if (sid, i) not in review.dead:
                levels.setdefault(transition.priority, []).append(_Option(i, transition, found))
        pairs = [pair for options in levels.values() if len(options) > 1 for pair in _Overlaps(options, schema).pairs()]
        for a, b, witness in sorted(pairs, key=lambda pair: (pair[1].index, pair[0].index)):
            yield Finding(
                ("states", sid, "transitions", b.index, "priority"),
                "ambiguous_priority",
                f"transitions[{a.index}] (to '{a.target}') and transitions[{b.index}] (to '{b.target}') share "
                f"priority {a.transition.priority} and can both hold, so the model may take either, e.g. with "
                f"context {_compact(witness)}",
                _PRIORITY_HINT,
            )


@dataclass(frozen=True)
class _Option:
    """A transition of one state and priority level, with what its conditions require."""

    index: int
    transition: Transition
    requirements: Requirements

    @property
    def target(self) -> str:
        return self.transition.target_state


class _Overlaps:
    """Pairs of options (to different targets) that can hold together, enough pairs to name every option
    that has such a partner, without trying every pair.

    The options that constrain the key most of them constrain are swept along it, sorted by where their
    domain starts: each meets only the options whose domain is still open there. Options pinned to the
    same value of that key are searched again, as a group, on their other keys (a router on two keys is
    two sweeps, not one sweep over crowded values); the options that leave the key free are searched on
    their own keys, then tried against the swept ones. An option stops looking for partners once it has
    one, and only a pair whose domains meet goes to the solver. Options that share no key are tried pair
    by pair, so the cost grows with the pairs whose domains meet: about linearly for routers
    (``choice == 1``, ``choice == 2`` ...), ranges and description-only transitions.
    """

    def __init__(self, options: list[_Option], schema: Mapping[str, Mapping[str, Any]]) -> None:
        self.options = options
        self.schema = schema  # the context_schema: a pair holds together only on values it allows
        self.covered: set[int] = set()
        self.tried: set[tuple[int, int]] = set()
        self.found: list[tuple[_Option, _Option, dict[str, Any]]] = []

    def pairs(self) -> list[tuple[_Option, _Option, dict[str, Any]]]:
        self._search(self.options, frozenset())
        return self.found

    def _search(self, options: list[_Option], swept: frozenset[str]) -> None:
        axis = _axis(options, swept)
        if axis is None:
            self._across(options, options)
            return
        on_axis = [o for o in options if axis in o.requirements.domains]
        off_axis = [o for o in options if axis not in o.requirements.domains]
        self._sweep(on_axis, axis, swept | {axis})
        self._search(off_axis, swept)
        self._across(off_axis, on_axis)
        self._across(on_axis, off_axis)

    def _sweep(self, options: list[_Option], axis: str, swept: frozenset[str]) -> None:
        spans = [option.requirements.domains[axis].span() for option in options]
        pinned = _pinned(options, spans)
        for group in pinned.values():
            if len(group) > 1:
                self._search(group, swept)
        points = {id(option) for group in pinned.values() for option in group}
        segments = sorted((start, end, n) for n, span in enumerate(spans) for start, end in span)
        ends: list[tuple[Any, int]] = []  # (end, segment) of the segments still open
        wide, narrow = _Open(), _Open()  # open segments of the other options, and of pinned ones
        for segment, (start, end, n) in enumerate(segments):
            while ends and ends[0][0] < start:
                closed = heapq.heappop(ends)[1]
                wide.close(closed)
                narrow.close(closed)
            option = options[n]
            pin = id(option) in points
            meeting = [wide] if pin else [wide, narrow]  # two pinned options meet in their group's search
            self._meet(option, meeting)
            (narrow if pin else wide).add(segment, option, option.index in self.covered)
            heapq.heappush(ends, (end, segment))

    def _meet(self, option: _Option, meeting: list[_Open]) -> None:
        """``option``, where its segment opens, and the ``meeting`` open segments: its first partner among
        them, then, once it has one, a partner for each of those still waiting."""
        if option.index not in self.covered:  # its first partner, among the open segments it meets
            any(self._try(option, other) for open_ in meeting for other in open_.options())
        if option.index in self.covered:  # then a partner for each of those still waiting

            def partnered(other: _Option) -> bool:
                return other.index in self.covered or self._try(option, other)

            for open_ in meeting:
                open_.settle(partnered)

    def _across(self, options: list[_Option], others: list[_Option]) -> None:
        """Each option without a partner tries ``others`` until one holds with it. Options without
        conditions are left out of each other's tries: the model chooses among them by description."""
        conditioned = [o for o in others if o.requirements.conditioned]
        for option in options:
            if option.index not in self.covered:
                any(self._try(option, other) for other in (others if option.requirements.conditioned else conditioned))

    def _try(self, a: _Option, b: _Option) -> bool:
        """Whether ``a`` and ``b`` make a new pair that can hold together (each pair is tried once)."""
        first, second = (a, b) if a.index < b.index else (b, a)
        pair = (first.index, second.index)
        if first.index == second.index or pair in self.tried:
            return False
        self.tried.add(pair)
        if first.target == second.target or not (first.requirements.conditioned or second.requirements.conditioned):
            return False  # the same move, or a choice the model makes from the descriptions alone
        if not first.requirements.compatible(second.requirements):
            return False
        witness = find_witness([first.transition, second.transition], schema=self.schema)
        if witness is None:
            return False
        self.found.append((first, second, witness))
        self.covered.update(pair)
        return True


class _Open:
    """Segments still open in a sweep: those of options waiting for a partner, and the others'."""

    def __init__(self) -> None:
        self.waiting: dict[int, _Option] = {}
        self.partnered: dict[int, _Option] = {}

    def options(self) -> list[_Option]:
        return [*self.waiting.values(), *self.partnered.values()]

    def add(self, segment: int, option: _Option, partnered: bool) -> None:
        (self.partnered if partnered else self.waiting)[segment] = option

    def close(self, segment: int) -> None:
        self.waiting.pop(segment, None)
        self.partnered.pop(segment, None)

    def settle(self, partnered: Callable[[_Option], bool]) -> None:
        """The waiting options that ``partnered`` says have a partner stop waiting."""
        for segment, other in list(self.waiting.items()):
            if partnered(other):
                self.partnered[segment] = self.waiting.pop(segment)


def _pinned(
    options: list[_Option], spans: list[list[tuple[tuple[Any, ...], tuple[Any, ...]]]]
) -> dict[Any, list[_Option]]:
    """Value -> the ``options`` whose domain (``spans``, one per option) is that one value."""
    pinned: dict[Any, list[_Option]] = {}
    for option, span in zip(options, spans, strict=True):
        if len(span) == 1 and span[0][0] == span[0][1]:
            pinned.setdefault(span[0][0], []).append(option)
    return pinned


def _axis(options: list[_Option], swept: Collection[str]) -> str | None:
    """The key most options constrain (on a tie, the one whose domains differ most), leaving out the
    keys already ``swept``; None when no key is left."""
    counts = Counter(key for option in options for key in option.requirements.domains if key not in swept)
    if not counts:
        return None
    spread = {
        key: len({str(o.requirements.domains[key]) for o in options if key in o.requirements.domains}) for key in counts
    }
    return max(sorted(counts), key=lambda key: (counts[key], spread[key]))


def _compact(value: object) -> str:
    return json.dumps(_printable(value), separators=(", ", ": "), ensure_ascii=False, sort_keys=True)


def _printable(value: object) -> object:
    """``value`` with integers too long for Python to print described instead (~N digits)."""
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    return value
