"""Fuzzing definition files: every mutation of every example loads, or fails with a clean DefinitionError.

The contract checked for each mutated file (see :func:`check`):

* ``llm_fsm.load(path)`` returns a definition or raises :class:`DefinitionError`, and nothing else;
  every problem has a non-empty ``message`` and, unless it is about the file as a whole (encoding,
  JSON syntax, a top level that is not an object), a non-empty ``path``;
* ``llm-fsm validate FILE`` exits 0 or 1, 1 exactly when ``load`` failed, prints something, never a
  traceback, and never reports an ``internal`` error (the analysis itself crashing).

The mutation code lives here and is shared with ``tests/stress/fuzz_definitions.py`` (10,000+ mutations,
with counts of each outcome). Mutation kinds that break the contract (:data:`KNOWN_BUG_KINDS`, now empty)
would be left out of the default random pool; the bugs this fuzzing found are pinned by regression tests at the end.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import string
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import llm_fsm
from llm_fsm.errors import DefinitionError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "fsm_definitions").glob("*.json"))

# Problems about the file as a whole carry no path (the loader's codes for them).
FILE_LEVEL_CODES = frozenset({"unreadable", "encoding", "json", "duplicate_key", "type"})
HUGE_STATES = 5_000
DEEP = 10_000

Path_ = tuple[str | int, ...]


# ---------------------------------------------------------------- the examples


@dataclass(frozen=True)
class Example:
    name: str
    text: str

    @property
    def data(self) -> dict[str, Any]:
        """A fresh copy of the parsed example, free to mutate."""
        return copy.deepcopy(_parsed(self.text))


@cache
def _parsed(text: str) -> dict[str, Any]:
    return json.loads(text)


@cache
def examples() -> tuple[Example, ...]:
    return tuple(Example(path.stem, path.read_text(encoding="utf-8")) for path in EXAMPLES)


# ---------------------------------------------------------------- helpers over the JSON tree


def _dump(data: Any) -> bytes:
    return json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")


def _paths(node: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """The path of every value below ``node`` (not ``node`` itself)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _at(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _set(data: Any, path: Path_, value: Any) -> None:
    _at(data, path[:-1])[path[-1]] = value


def _states(data: dict[str, Any]) -> dict[str, Any]:
    states = data.get("states")
    return states if isinstance(states, dict) else {}


def _transitions(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for s in _states(data).values() for t in s.get("transitions", []) if isinstance(t, dict)]


def _any_transition(rng: random.Random, data: dict[str, Any]) -> dict[str, Any]:
    """A random transition, added to a random state when the example has none."""
    found = _transitions(data)
    if found:
        return rng.choice(found)
    state = rng.choice(list(_states(data).values()))
    state["transitions"] = [{"target_state": data["initial_state"], "description": "back"}]
    return state["transitions"][0]


def _any_condition(rng: random.Random, data: dict[str, Any]) -> dict[str, Any]:
    transition = _any_transition(rng, data)
    conditions = transition.setdefault("conditions", [])
    if not conditions:
        conditions.append({"description": "added by the fuzzer"})
    return rng.choice(conditions)


def _typo(rng: random.Random, word: str, taken: Any = ()) -> str:
    """``word`` with one letter changed (or one more), never equal to it nor to a name in ``taken``."""
    while True:
        i = rng.randrange(len(word) + 1)
        typo = word[:i] + rng.choice(string.ascii_lowercase) + word[i + 1 :]
        if typo != word and typo not in taken:
            return typo


def _with_placeholder(data: dict[str, Any], place: Callable[[str], None], raw: str) -> bytes:
    """Serialise ``data`` after ``place`` put a marker somewhere, then swap each marker for ``raw`` JSON text."""
    marker = "__FUZZ_PLACEHOLDER__"
    place(marker)
    return _dump(data).replace(json.dumps(marker).encode(), raw.encode("utf-8"))


def _nested(depth: int, shape: str, leaf: str = "true") -> str:
    """JSON text nesting ``leaf`` ``depth`` levels deep, built as text (json.dumps would recurse)."""
    opening, closing = {
        "not": ('{"!": ', "}"),
        "and": ('{"and": [', "]}"),
        "list": ("[", "]"),
        "var": ('{"var": ', "}"),
    }[shape]
    return opening * depth + leaf + closing * depth


# ---------------------------------------------------------------- the mutations

WRONG_VALUES: tuple[Callable[[random.Random], Any], ...] = (
    lambda rng: rng.choice([0, -1, 7, 2**63, 10**30]),
    lambda rng: rng.choice([1.5, -0.0, 1e308]),
    lambda rng: rng.choice([[], [1, "a"], [None], [[[]]]]),
    lambda rng: rng.choice([{}, {"x": 1}, {"": None}]),
    lambda rng: None,
    lambda rng: "x" * rng.choice([10_000, 100_000]),
    lambda rng: rng.choice([True, False]),
    lambda rng: rng.choice(["", "wrong", "🙂"]),
)
UNKNOWN_OPERATORS = (
    "eval", "exec", "__import__", "map", "reduce", "filter", "all", "some", "none", "merge", "substr",
    "log", "method", "", "VAR", "missing ", "= =", "constructor", "__proto__", "0",
)  # fmt: skip
GARBAGE = (b"\x00", b"\xff", b"\xfe\xff", b"\xc3", b"{", b"}", b"[", b'"', b",", b":", b"\\", b"\n", b"\x1b[31m")


def delete_field(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    path = rng.choice([p for p in _paths(data) if isinstance(_at(data, p[:-1]), dict)])
    del _at(data, path[:-1])[path[-1]]
    return _dump(data), f"deleted {path}"


def wrong_type(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    path = rng.choice(list(_paths(data)))
    value = rng.choice(WRONG_VALUES)(rng)
    _set(data, path, value)
    shown = repr(value) if len(repr(value)) < 40 else f"{type(value).__name__} of {len(value)}"
    return _dump(data), f"{path} = {shown}"


def dangle_target(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    transition = _any_transition(rng, data)
    old = transition["target_state"]
    names = [_typo(rng, old, _states(data)), "nowhere", "", "ümlaut", "a b", old + "_x"]
    transition["target_state"] = target = rng.choice([n for n in names if n not in _states(data)])
    return _dump(data), f"target {old!r} -> {target!r}"


def cycle_no_terminal(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    states = _states(data)
    ids = list(states)
    for state in states.values():
        if not state.get("transitions"):
            back = data["initial_state"] if rng.random() < 0.5 else rng.choice(ids)
            state["transitions"] = [{"target_state": back, "description": "loop"}]
    return _dump(data), "every terminal state loops back"


def duplicate_state_ids(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    listed = [{"id": sid, **{k: v for k, v in state.items() if k != "id"}} for sid, state in _states(data).items()]
    victim = rng.choice(listed)
    if rng.random() < 0.5:  # the same state twice
        twin = copy.deepcopy(victim)
    else:  # another state takes an existing id
        twin = copy.deepcopy(rng.choice(listed))
        twin["id"] = victim["id"]
    listed.insert(rng.randrange(len(listed) + 1), twin)
    data["states"] = listed
    return _dump(data), f"list form, id {victim['id']!r} twice"


def list_form(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    """A control: the valid list form of the same states, shuffled."""
    data = ex.data
    listed = [{"id": sid, **state} for sid, state in _states(data).items()]
    rng.shuffle(listed)
    data["states"] = listed
    return _dump(data), "list form"


def rename_initial(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    initial = data["initial_state"]
    if rng.random() < 0.5:  # the state's key changes, the references to it do not
        new = initial + "_renamed"
        data["states"] = {new if sid == initial else sid: state for sid, state in _states(data).items()}
        return _dump(data), f"state {initial!r} renamed {new!r}"
    names = [_typo(rng, initial, _states(data)), initial.upper(), "", " " + initial]
    data["initial_state"] = new = rng.choice([n for n in names if n not in _states(data)])
    return _dump(data), f"initial_state {initial!r} -> {new!r}"


def unknown_operator(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    condition = _any_condition(rng, data)
    op = rng.choice(UNKNOWN_OPERATORS)
    logic = condition.get("logic")
    nodes = [()] if isinstance(logic, dict) and len(logic) == 1 else []
    nodes += [p for p in _paths(logic) if isinstance(_at(logic, p), dict) and len(_at(logic, p)) == 1]
    if nodes and rng.random() < 0.7:  # rename an operator in place
        path = rng.choice(nodes)
        node = _at(logic, path) if path else logic
        (old, args) = next(iter(node.items()))
        node.clear()
        node[op] = args
        return _dump(data), f"operator {old!r} -> {op!r}"
    condition["logic"] = {op: [logic if logic is not None else {"var": "x"}]}
    return _dump(data), f"wrapped in {op!r}"


def deep_logic(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    condition = _any_condition(rng, data)
    depth = rng.choice([DEEP, DEEP, 2_000, 600, 100, 33])
    shape = rng.choice(["not", "and", "list", "var"])

    def place(marker: str) -> None:
        condition["logic"] = marker

    return _with_placeholder(data, place, _nested(depth, shape)), f"logic nested {depth} deep ({shape})"


def huge(rng: random.Random, ex: Example, states: int | None = None) -> tuple[bytes, str]:
    """Pad the definition to ``states`` (default :data:`HUGE_STATES`) states, chained to one another.

    The padding is not reachable from the example's own states (see :func:`reachable_chain` for one that is).
    """
    states = states or HUGE_STATES
    data = ex.data
    base = _states(data)
    ids = list(base)
    conditions = [c for t in _transitions(data) for c in t.get("conditions", [])] or [{"description": "always"}]
    extra = states - len(base)
    for i in range(extra):
        target = f"pad_{i + 1}" if i + 1 < extra else rng.choice(ids)
        transition = {"target_state": target, "description": "next", "conditions": [rng.choice(conditions)]}
        base[f"pad_{i}"] = {"purpose": f"padding {i}", "transitions": [transition]}
    return json.dumps(data, ensure_ascii=False).encode("utf-8"), f"{len(base)} states"


def reachable_chain(ex: Example, states: int) -> dict[str, Any]:
    """:func:`huge`, with a transition from the initial state into the padding: every state is reachable."""
    data = json.loads(huge(random.Random(states), ex, states)[0])
    initial = data["states"][data["initial_state"]]
    initial.setdefault("transitions", []).append({"target_state": "pad_0", "description": "into the padding"})
    return data


def truncate(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    raw = ex.text.encode("utf-8")
    cut = rng.randrange(len(raw))
    return raw[:cut], f"cut at byte {cut} of {len(raw)}"


def garbage_bytes(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    raw = bytearray(ex.text.encode("utf-8"))
    notes = []
    for _ in range(rng.randint(1, 3)):
        junk = rng.choice(GARBAGE) if rng.random() < 0.7 else rng.randbytes(rng.randint(1, 8))
        at = rng.randrange(len(raw) + 1)
        raw[at:at] = junk
        notes.append(f"{junk!r}@{at}")
    return bytes(raw), "inserted " + ", ".join(notes)


def utf16(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    encoding = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
    return ex.text.encode(encoding), encoding


def latin1(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    data["persona"] = f"{data.get('persona', '')} Café naïve façade, Größe ±5 °C, señor".strip()
    text = json.dumps(data, indent=2, ensure_ascii=False)
    return text.encode(rng.choice(["latin-1", "cp1252"])), "non-ASCII persona in Latin-1"


def bom(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    raw = ex.text.encode("utf-8")
    variant = rng.choice(["utf-8 BOM", "two BOMs", "BOM mid-file", "utf-16 BOM on utf-8"])
    if variant == "utf-8 BOM":
        return b"\xef\xbb\xbf" + raw, variant
    if variant == "two BOMs":
        return b"\xef\xbb\xbf\xef\xbb\xbf" + raw, variant
    if variant == "BOM mid-file":
        at = raw.index(b",") + 1
        return raw[:at] + b"\xef\xbb\xbf" + raw[at:], variant
    return b"\xff\xfe" + raw, variant


def binary_junk(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    size = rng.choice([1, 16, 4096, 100_000])
    prefix = rng.choice([b"", b"{", b"\x89PNG\r\n\x1a\n", b"PK\x03\x04", b"\x1f\x8b"])
    return prefix + rng.randbytes(size), f"{len(prefix) + size} random bytes"


def empty(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    raw = rng.choice([b"", b" ", b"\n\n\t\r\n", b"\xef\xbb\xbf"])
    return raw, f"{raw!r}"


def top_level_array(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    value = rng.choice([[ex.data], [], [ex.data, ex.data]])
    return _dump(value), f"array of {len(value)}"


def top_level_scalar(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    raw = rng.choice(["42", '"definition"', "null", "true", "1.5", "-0", "NaN", "Infinity"])
    return raw.encode(), raw


def duplicate_key(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    objects = [()] + [p for p in _paths(data) if isinstance(_at(data, p), dict) and _at(data, p)]
    path = rng.choice(objects)
    obj = _at(data, path)
    key = rng.choice(list(obj))

    def place(marker: str) -> None:
        obj[marker] = "duplicate"

    raw = _with_placeholder(data, place, json.dumps(key))
    return raw, f"key {key!r} twice in {path}"


def huge_number(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    path = rng.choice(list(_paths(data)))
    raw = rng.choice(["1" * 5000, "1e999", "-1e999", "NaN", "Infinity", "1" * 400 + ".5", "-" + "9" * 4301])

    def place(marker: str) -> None:
        _set(data, path, marker)

    return _with_placeholder(data, place, raw), f"{path} = {raw[:12]}... ({len(raw)} chars)"


def unknown_fields(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    data = ex.data
    objects = [()] + [p for p in _paths(data) if isinstance(_at(data, p), dict)]
    notes = []
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(objects)
        key = rng.choice(["extra", "transition_classification", "$comment", "", "id ", "nämé", "a/b~c"])
        _at(data, path)[key] = rng.choice([1, "x", None, {"nested": [1]}])
        notes.append(f"{path}+{key!r}")
    return _dump(data), ", ".join(notes)


def bad_regex(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    """A regex check whose pattern does not compile (``re.error``)."""
    data = ex.data
    state = rng.choice(list(_states(data).values()))
    pattern = rng.choice(["(", "[a-", "*x", "(?P<1>x)", "\\", "a{2,1}", "(?<=a+)b"])
    state.setdefault("checks", []).append({"kind": "regex", "pattern": pattern})
    return _dump(data), f"pattern {pattern!r}"


# -- kinds that broke the contract before their fixes (pinned by the regression tests below)


def regex_crash(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    """A regex check whose pattern makes ``re.compile`` raise something other than ``re.error``."""
    data = ex.data
    state = rng.choice(list(_states(data).values()))
    depth = rng.choice([1_000, 5_000])
    pattern = rng.choice(["a{4294967296}", "x{1,99999999999999999999}", "(" * depth + ")" * depth])
    state.setdefault("checks", []).append({"kind": "regex", "pattern": pattern})
    return _dump(data), f"pattern {pattern[:20]!r} ({len(pattern)} chars)"


def deep_schema(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    """A JSON Schema nested hundreds of levels deep (the JSON itself parses)."""
    data = ex.data
    depth = rng.choice([400, 600, 900])
    schema = '{"not": ' * depth + '{"type": "string"}' + "}" * depth

    def place(marker: str) -> None:
        data.setdefault("context_schema", {})["deep"] = marker

    return _with_placeholder(data, place, schema), f"context_schema nested {depth} deep"


def lone_surrogate(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    r"""A ``\udXXX`` escape (valid JSON, not encodable as UTF-8) in a name that diagnostics repeat."""
    data = ex.data
    bad = rng.choice(["\ud800", "\udfff", "x\udc80y"])
    where = rng.choice(["state id", "unknown field", "target"])
    if where == "state id":
        sid = rng.choice(list(_states(data)))
        data["states"] = {(sid + bad if k == sid else k): v for k, v in _states(data).items()}
    elif where == "unknown field":
        data["note" + bad] = 1
    else:
        _any_transition(rng, data)["target_state"] = "to" + bad
    raw = json.dumps(data, indent=2, ensure_ascii=True).encode("ascii")
    return raw, f"lone surrogate in the {where}"


def int_at_digit_limit(rng: random.Random, ex: Example) -> tuple[bytes, str]:
    """Two same-priority transitions comparing a key with a 4,300-digit integer (the most ``json`` reads)."""
    data = ex.data
    states = _states(data)
    sid = rng.choice(list(states))
    targets = rng.sample(list(states), 2)
    big = "9" * 4300

    def place(marker: str) -> None:
        states[sid].setdefault("transitions", []).extend(
            {"target_state": target, "priority": 7, "conditions": [{"logic": {op: [{"var": "n"}, marker]}}]}
            for target, op in zip(targets, rng.sample(["==", "<", ">", "!="], 2), strict=True)
        )

    note = f"state {sid!r}: two transitions at priority 7 comparing 'n' with a 4,300-digit integer"
    return _with_placeholder(data, place, big), note


MUTATORS: dict[str, Callable[[random.Random, Example], tuple[bytes, str]]] = {
    f.__name__: f
    for f in (
        delete_field, wrong_type, dangle_target, cycle_no_terminal, duplicate_state_ids, list_form, rename_initial,
        unknown_operator, deep_logic, huge, truncate, garbage_bytes, utf16, latin1, bom, binary_junk, empty,
        top_level_array, top_level_scalar, duplicate_key, huge_number, unknown_fields, bad_regex,
        regex_crash, deep_schema, lone_surrogate, int_at_digit_limit,
    )
}  # fmt: skip
KNOWN_BUG_KINDS: frozenset[str] = frozenset()  # the four kinds that broke the contract were fixed
SAFE_KINDS = tuple(kind for kind in MUTATORS if kind not in KNOWN_BUG_KINDS)
# Relative weights in random runs: a huge file costs seconds, the rest milliseconds.
WEIGHTS = {"huge": 0.05}


@dataclass(frozen=True)
class Mutation:
    kind: str
    example: str
    note: str
    data: bytes = field(repr=False)

    def __str__(self) -> str:
        return f"{self.kind} of {self.example}: {self.note}"


def mutate(rng: random.Random, kind: str, example: Example) -> Mutation:
    data, note = MUTATORS[kind](rng, example)
    return Mutation(kind, example.name, note, data)


def mutation_at(seed: int, index: int, kinds: tuple[str, ...] = SAFE_KINDS) -> Mutation:
    """Mutation number ``index`` of the run ``seed``: kind and example drawn with an RNG seeded by both."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choices(kinds, [WEIGHTS.get(kind, 1.0) for kind in kinds])[0]
    return mutate(rng, kind, rng.choice(examples()))


def generate(seed: int, count: int, kinds: tuple[str, ...] = SAFE_KINDS, start: int = 0) -> Iterator[Mutation]:
    """Mutations ``start`` to ``start + count`` of the run ``seed`` (each reproducible alone)."""
    for index in range(start, start + count):
        yield mutation_at(seed, index, kinds)


# ---------------------------------------------------------------- the contract


@dataclass
class Outcome:
    """What one mutated file did: loaded or rejected (with the problem codes), and any broken promise."""

    mutation: Mutation
    loaded: bool = False
    codes: tuple[str, ...] = ()
    failures: list[str] = field(default_factory=list)
    load_seconds: float = 0.0
    validate_seconds: float = 0.0

    @property
    def label(self) -> str:
        if self.failures:
            return "FAILED: " + self.failures[0].split(":")[0]
        return "loaded" if self.loaded else "rejected"


def check(mutation: Mutation, directory: Path, runner: Any = None, *, cli: bool = True) -> Outcome:
    """Write ``mutation`` to a file, load it and validate it; collect every broken promise in ``failures``."""
    path = directory / f"{mutation.kind}.json"
    path.write_bytes(mutation.data)
    shared = ROOT / "fsm_definitions" / "subflows"  # the sub-definitions the examples name, relative to them
    if shared.is_dir() and not (directory / shared.name).exists():
        shutil.copytree(shared, directory / shared.name)
    outcome = Outcome(mutation)
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            llm_fsm.load(path)
        outcome.loaded = True
    except DefinitionError as error:
        outcome.codes = tuple(p.code for p in error.problems)
        if not error.problems:
            outcome.failures.append("load: DefinitionError without problems")
        for problem in error.problems:
            if not (isinstance(problem.message, str) and problem.message.strip()):
                outcome.failures.append(f"load: empty message in {problem!r}")
            if not problem.path and problem.code not in FILE_LEVEL_CODES:
                outcome.failures.append(f"load: no path for a {problem.code!r} problem: {problem.message}")
        if "Traceback" in str(error):
            outcome.failures.append("load: traceback text in the error")
    except Exception as error:  # the contract: nothing but DefinitionError (RecursionError included here)
        outcome.failures.append(f"load: raised {type(error).__name__}: {str(error)[:200]}")
    outcome.load_seconds = time.perf_counter() - started
    if cli:
        started = time.perf_counter()
        outcome.failures += _validate_failures(path, runner, loaded=outcome.loaded)
        outcome.validate_seconds = time.perf_counter() - started
    return outcome


def _validate_failures(path: Path, runner: Any, *, loaded: bool) -> list[str]:
    from typer.testing import CliRunner

    from llm_fsm.cli import app

    result = (runner or CliRunner()).invoke(app, ["validate", str(path)])
    failures = []
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        failures.append(f"validate: raised {type(result.exception).__name__}: {str(result.exception)[:200]}")
    elif result.exit_code not in (0, 1):
        failures.append(f"validate: exit code {result.exit_code}")
    elif (result.exit_code == 1) == loaded:
        failures.append(f"validate: exit code {result.exit_code} but load {'succeeded' if loaded else 'failed'}")
    output = result.output
    if not output.strip():
        failures.append("validate: printed nothing")
    if "Traceback" in output:
        failures.append("validate: printed a traceback")
    if "error[internal]" in output:
        failures.append("validate: internal error: " + output.split("error[internal]", 1)[1].strip()[:200])
    return failures


# ---------------------------------------------------------------- the default run (a few hundred mutations)

PER_KIND = 14
FEWER = {"huge": 1}
DEFAULT_HUGE_STATES = 1_000  # in the default run; the 5,000-state file is loaded once below and by the stress run


@pytest.fixture(scope="module")
def runner() -> Any:
    from typer.testing import CliRunner

    return CliRunner()


@pytest.mark.parametrize("kind", SAFE_KINDS)
def test_mutations_load_or_fail_cleanly(kind, tmp_path, runner, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "HUGE_STATES", DEFAULT_HUGE_STATES)
    rng = random.Random(f"fuzz-{kind}")
    failures = []
    for i in range(FEWER.get(kind, PER_KIND)):
        mutation = mutate(rng, kind, examples()[i % len(examples())])
        outcome = check(mutation, tmp_path, runner)
        failures += [f"{mutation}: {failure}" for failure in outcome.failures]
    assert not failures, "\n".join(failures)


def test_the_examples_themselves_load_and_validate(tmp_path, runner):
    for example in examples():
        outcome = check(Mutation("none", example.name, "unchanged", example.text.encode()), tmp_path, runner)
        assert outcome.loaded and not outcome.failures, outcome


def test_specific_mutations_are_reported_as_expected(tmp_path):
    """Spot checks that the fuzz oracle sees what it should: right codes, file-level problems without paths."""
    rng = random.Random(7)
    example = _example()
    expectations = {
        "cycle_no_terminal": "no_terminal",
        "truncate": "json",
        "utf16": "encoding",
        "top_level_array": "type",
        "duplicate_key": "duplicate_key",
        "dangle_target": "unknown_state",
        "unknown_operator": "logic",
    }
    for kind, code in expectations.items():
        outcome = check(mutate(rng, kind, example), tmp_path, cli=False)
        assert not outcome.loaded and code in outcome.codes, (kind, outcome)
    assert check(mutate(rng, "list_form", example), tmp_path, cli=False).loaded
    deep = Mutation("deep_logic", "form_filling", "10,000 deep", _deep_file(example, DEEP))
    assert check(deep, tmp_path, cli=False).codes == ("json",)  # too deep to parse: a file-level problem
    deep = Mutation("deep_logic", "form_filling", "40 deep", _deep_file(example, 40))
    assert "logic" in check(deep, tmp_path, cli=False).codes


def _deep_file(example: Example, depth: int) -> bytes:
    data = example.data
    condition = _any_condition(random.Random(0), data)
    return _with_placeholder(data, lambda marker: condition.__setitem__("logic", marker), _nested(depth, "not"))


def test_a_huge_definition_loads_in_seconds(tmp_path):
    mutation = mutate(random.Random(1), "huge", _example())
    assert mutation.note == f"{HUGE_STATES} states"
    outcome = check(mutation, tmp_path, cli=False)
    assert outcome.loaded and not outcome.failures, outcome
    assert outcome.load_seconds < 30, f"{mutation}: load took {outcome.load_seconds:.1f} s"


# ---------------------------------------------------------------- regressions: bugs this fuzzing found, fixed


def _example() -> Example:
    return next(e for e in examples() if e.name == "form_filling")


def _with_regex(pattern: str) -> bytes:
    data = _example().data
    next(iter(_states(data).values())).setdefault("checks", []).append({"kind": "regex", "pattern": pattern})
    return _dump(data)


def test_validate_analysis_is_linear_in_the_number_of_states(monkeypatch):
    from llm_fsm.authoring import analysis

    scans = 0
    scan = analysis._Words.__init__

    def counting(self: Any, texts: Any) -> None:
        nonlocal scans
        scans += 1
        scan(self, texts)

    monkeypatch.setattr(analysis._Words, "__init__", counting)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        definition = llm_fsm.load(reachable_chain(_example(), 800))
    analysis.find_warnings(definition)
    assert scans <= 20 * 800, f"{scans} instruction scans for 800 states"


def test_regex_with_a_huge_repeat_count_is_a_definition_error(tmp_path):
    outcome = check(Mutation("regex_crash", "form_filling", "a{4294967296}", _with_regex("a{4294967296}")), tmp_path)
    assert not outcome.failures, outcome.failures


def test_regex_with_deeply_nested_groups_is_a_definition_error(tmp_path):
    pattern = "(" * 1000 + ")" * 1000
    outcome = check(Mutation("regex_crash", "form_filling", "1,000 groups", _with_regex(pattern)), tmp_path)
    assert not outcome.failures, outcome.failures


def test_a_deeply_nested_json_schema_is_a_definition_error(tmp_path):
    mutation = mutate(random.Random(0), "deep_schema", _example())
    outcome = check(mutation, tmp_path)
    assert not outcome.failures, outcome.failures


def test_validate_prints_a_lone_surrogate_without_crashing(tmp_path):
    data = _example().data
    data["states"] = {("bad\ud800" if sid == "collect_name" else sid): s for sid, s in _states(data).items()}
    raw = json.dumps(data, ensure_ascii=True).encode("ascii")
    outcome = check(Mutation("lone_surrogate", "form_filling", "state id 'bad\\ud800'", raw), tmp_path)
    assert not outcome.failures, outcome.failures


def test_validate_handles_an_integer_at_the_digit_limit(tmp_path):
    mutation = mutate(random.Random(0), "int_at_digit_limit", _example())
    outcome = check(mutation, tmp_path)
    assert outcome.loaded, outcome
    assert not outcome.failures, outcome.failures
