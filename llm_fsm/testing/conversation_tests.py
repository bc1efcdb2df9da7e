"""Conversation tests written as JSON files: cases of steps with expectations, run with no model.

A test file holds ``cases``. A case names a definition (relative to the file), an optional
starting ``state`` and ``context``, and ``steps``. A step is a user message (``null`` on a first
step: the opening) plus either scripted model replies (``reply``, or ``replies`` when corrective
calls or tool calls are expected) or nothing (then the model given to the runner answers: a real
one, a cassette, or the simulated model), and what to ``expect`` afterwards.

Tools: a scripted reply ``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` asks for tool calls
(as native function calls); ``tools`` (on the file, a case or a step) stubs their results, so no
code is needed (see :mod:`llm_fsm.testing.tool_scripts`); ``expect.tool_calls`` lists the calls the
turn must have made, and ``expect.awaiting_approval`` the call a paused turn waits on. A step that
resumes a tool approval gives the decision: ``{"approved": true}``, ``{"approved": false,
"reason": "..."}`` or ``{"result": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llm_fsm.conversation import Conversation
from llm_fsm.definition import RETURN, FSMDefinition
from llm_fsm.engine import RejectionKind
from llm_fsm.errors import DefinitionError, FSMError, HooksLoadError, Problem
from llm_fsm.hooks import Hooks
from llm_fsm.jsonfiles import JSONFileError, not_a, read_json
from llm_fsm.llm import LLMClient, LLMRequest, LLMResponse
from llm_fsm.loader import _dotted, _json_pointer, _positions, load
from llm_fsm.testing.scripted import ScriptedLLM, folded_summary
from llm_fsm.testing.tool_scripts import (
    STUBS_DESCRIPTION,
    ApprovalExpectation,
    StubbedTools,
    StubSpec,
    ToolCallExpectation,
    ToolStub,
    approval_failures,
    stubbed_names,
    tool_call_failures,
)
from llm_fsm.tools.calling import ToolMode
from llm_fsm.turn import TurnResult
from llm_fsm.wording import Vocabulary, did_you_mean, field_problems

Reply = dict[str, Any] | str


class _Strict(BaseModel):
    # strict: a number written as text ("2") or a fraction (2.5) is a mistake, not something to convert
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class RejectedItem(_Strict):
    """A refused item a step expects: each field given must equal the rejection's (``reason``: a substring)."""

    kind: RejectionKind | None = Field(None, description="What was refused.")
    key: str | None = Field(None, description="The context key refused.")
    target_state: str | None = Field(None, description="The target refused.")
    reason: str | None = Field(None, description="A substring of the reason.")
    attempt: int | None = Field(None, ge=1, description="The model call of the turn it happened on (1: the first).")


class Expect(_Strict):
    """What must hold after a step. Every field is optional."""

    state: str | None = Field(None, description="The state the conversation is in.")
    context: dict[str, Any] | None = Field(None, description="A subset the context must contain (nested objects too).")
    message: str | None = Field(None, description="A regular expression the message must match (searched).")
    rejected: Annotated[int, Field(ge=0)] | list[RejectedItem] | None = Field(
        None, description="How many items were refused, or items (kind, key, target_state, reason substring) that were."
    )
    max_llm_calls: int | None = Field(None, ge=0, description="At most this many model calls.")
    max_tokens: int | None = Field(None, ge=0, description="At most this many tokens in all.")
    status: Literal["active", "paused", "ended"] | None = Field(None, description="The conversation's status.")
    error: str | None = Field(None, description="The step must fail with an error matching this expression.")
    tool_calls: list[ToolCallExpectation] | None = Field(
        None, description="The tool calls the turn made, in order ([]: none); arguments and results as subsets."
    )
    awaiting_approval: ApprovalExpectation | None = Field(
        None, description="The turn paused for a person to approve this tool call."
    )

    def invalid_patterns(self) -> list[str]:
        """Why each regular expression given (``message``, ``error``, tool errors) cannot be used, in words."""
        reasons = []
        patterns = [("message", self.message), ("error", self.error)]
        patterns += [(f"tool_calls[{n}].error", c.error) for n, c in enumerate(self.tool_calls or [])]
        for name, pattern in patterns:
            try:
                re.compile(pattern or "")
            except re.error as exc:
                reasons.append(f"{name}: /{pattern}/ is not a valid regular expression: {exc}")
        return reasons


class Step(_Strict):
    user: str | None = Field(None, description="What the user says; null on a first step means the opening.")
    reply: Reply | None = Field(None, description="The scripted model reply (a reply object, or raw text).")
    replies: list[Reply] | None = Field(None, description="Several scripted replies, when corrective calls happen.")
    resume: dict[str, Any] | None = Field(
        None,
        description="Resume a paused conversation with this result instead (a step without 'user'; a tool "
        'approval: {"approved": true}, {"approved": false, "reason": "..."} or {"result": ...}).',
    )
    tools: dict[str, StubSpec] | None = Field(None, description=STUBS_DESCRIPTION)
    expect: Expect = Field(default_factory=lambda: Expect.model_validate({}))

    @model_validator(mode="after")
    def _one_meaning(self) -> Step:
        """Fields that would each make the step something else: refuse the step rather than pick one."""
        if self.user is not None and self.resume is not None:
            raise ValueError(
                "a step has either 'user' (the user says something) or 'resume' (a paused conversation "
                "resumes with a result), not both: split it into two steps"
            )
        if self.reply is not None and self.replies is not None:
            raise ValueError("a step has either 'reply' or 'replies', not both: put every reply in 'replies'")
        return self

    def scripted(self) -> list[Reply] | None:
        if self.replies is not None:
            return self.replies
        return None if self.reply is None else [self.reply]


class Case(_Strict):
    name: str
    definition: str = Field(description="Path of the definition, relative to this file.")
    state: str | None = Field(None, description="Start in this state (default: the initial state).")
    context: dict[str, Any] = Field(default_factory=dict, description="Initial context.")
    tools: dict[str, StubSpec] | None = Field(None, description=STUBS_DESCRIPTION)
    steps: list[Step] = Field(min_length=1)


class TestFile(_Strict):
    """A file of conversation tests (``*.test.json``)."""

    __test__ = False  # not a pytest class
    schema_: str | None = Field(None, alias="$schema")
    hooks: str | None = Field(
        None,
        description="The handlers and checks the definitions need: MODULE:NAME or FILE.py:NAME (a file is "
        "relative to this test file). Without it, the runner's hooks (llm-fsm test --hooks) are used.",
    )
    tools: dict[str, StubSpec] | None = Field(None, description=STUBS_DESCRIPTION)
    cases: list[Case] = Field(min_length=1)


# How problems in a test file name what should be there: "expected a list of cases, got an object".
_WORDS = Vocabulary(
    TestFile,
    nouns=(
        (Case, "case"),
        (Step, "step"),
        (RejectedItem, "rejection"),
        (ToolCallExpectation, "expected tool call"),
        (ApprovalExpectation, "expected approval"),
        (ToolStub, "tool stub"),
    ),
    phrases=(
        (Expect, ("an object of expectations", "objects of expectations")),
        (Reply, ("a reply (an object) or raw text (a string)", "replies (objects or raw text)")),
    ),
)


class TestFileError(DefinitionError):
    """A test file cannot be used: ``problems`` says where and why, one problem per mistake."""

    __test__ = False  # not a pytest class

    def __init__(self, problems: list[Problem], source: str) -> None:
        super().__init__(problems, source)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        self.args = (f"invalid test file {source}: {len(self.problems)} problem(s)\n{lines}",)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of test files (for editors, through ``"$schema"``)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **TestFile.model_json_schema(by_alias=True)}


# -- results ------------------------------------------------------------------------------------


@dataclass
class StepOutcome:
    index: int
    user: str | None
    failures: list[str]
    result: TurnResult | None = None
    resume: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    def said(self, limit: int | None = None) -> str:
        """What the step did, for a report line: ``(resume)``, ``(opening)``, or the user's message (quoted)."""
        if self.resume:
            return "(resume)"
        return "(opening)" if self.user is None else repr(self.user[:limit])


@dataclass
class CaseOutcome:
    file: Path
    name: str
    definition: Path
    steps: list[StepOutcome] = field(default_factory=list)
    error: str | None = None
    states: set[str] = field(default_factory=set)
    transitions: set[tuple[str, str]] = field(default_factory=set)
    runs: int = 1
    passes: int = 0

    @property
    def passed(self) -> bool:
        return self.error is None and all(s.passed for s in self.steps)


# -- running ------------------------------------------------------------------------------------


class _StepModel:
    """Scripted replies for the current step; the runner's model when the step has none."""

    def __init__(self, fallback: LLMClient | None) -> None:
        self.fallback = fallback
        self.script: ScriptedLLM | None = None

    def tool_mode(self) -> ToolMode:
        """Scripted replies call tools natively; the runner's model, as it says."""
        from llm_fsm.conversation import tool_mode

        if self.script is not None:
            return self.script.tool_mode()
        return tool_mode(self.fallback) if self.fallback is not None else "native"

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.script is not None:
            return self.script.complete(request)
        if self.fallback is None:
            raise FSMError("this step has no scripted reply and no model was given (--model, --replay or simulated)")
        return self.fallback.complete(request)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Test files: the files named, and every ``*.test.json`` below the folders named."""
    found: list[Path] = []
    for path in map(Path, paths):
        found += sorted(path.rglob("*.test.json")) if path.is_dir() else [path]
    return found


def read(path: Path) -> TestFile:
    """Parse a test file; :class:`TestFileError` (with line:column locations) when it is invalid.

    A file that cannot be read, or is not a test file at all (a definition, a cassette...), is one
    problem saying so; a test file with mistakes has a problem for each.
    """
    try:
        document = read_json(path, "test file")
        if not isinstance(document, dict) or "cases" not in document:
            raise JSONFileError(not_a(path, document, "test file", "it has no 'cases'"))
        return TestFile.model_validate(document)
    except JSONFileError as exc:
        raise TestFileError([Problem("", str(exc), code="unreadable")], str(path)) from None
    except ValidationError as exc:
        raise TestFileError(_problems(exc, path), str(path)) from None


def _problems(exc: ValidationError, path: Path) -> list[Problem]:
    """A problem per mistake, in plain words, at the line:column of the value (or key) it is about."""
    positions = _positions(path.read_text(encoding="utf-8-sig"))
    problems = []
    for loc, message, code, hint in field_problems(exc, _WORDS):
        pointer = _json_pointer(loc)
        while pointer and pointer not in positions:  # a missing field: point at its parent
            pointer = pointer.rsplit("/", 1)[0]
        line, column = positions.get(pointer, (None, None))
        problems.append(Problem(_dotted(loc), message, line, column, hint, code, str(path)))
    return problems


_UNBOUND = ("unbound_handler", "unbound_check")
Stubs = Mapping[str, ToolStub | list[ToolStub]]


def run_case(
    case: Case,
    file: Path,
    model: Callable[[FSMDefinition], LLMClient | None] | None = None,
    definitions: dict[Path, FSMDefinition] | None = None,
    hooks: Hooks | None = None,
    *,
    tools: Stubs | None = None,
) -> CaseOutcome:
    """Run one case with ``hooks``; ``model(definition)`` answers the steps without scripted replies.

    ``tools``: the file's tool stubs (the case's and each step's replace them, tool by tool).
    When the hooks hold async handlers or checks, the case runs on the async API (one event loop
    for all its steps)."""
    path = (file.parent / case.definition).resolve()
    outcome = CaseOutcome(file, case.name, path)
    stubs = StubbedTools()
    layers = [tools, case.tools, *(step.tools for step in case.steps)]
    names = stubbed_names(layers)
    try:
        definition = (definitions or {}).get(path) or load(path)
        if definitions is not None:
            definitions[path] = definition
        _check_stubbed(definition, stubbed_names(layers[1:]))
        llm = _StepModel(model(definition) if model else None)
        case_hooks = stubs.hooks(hooks, names) if names else hooks
        conversation = Conversation(definition, llm, state=case.state, context=case.context, hooks=case_hooks)
    except FSMError as exc:
        outcome.error = "; ".join(line.strip(" -") for line in str(exc).splitlines())
        outcome.error += _binding_hint(exc, hooks)
        return outcome
    outcome.states.add(conversation.state)
    with asyncio.Runner() as runner:
        turn = _turn_caller(conversation, runner)
        for index, step in enumerate(case.steps):
            stubs.begin(tools, case.tools, step.tools)
            outcome.steps.append(_run_step(conversation, turn, llm, step, index, outcome))
            outcome.steps[-1].failures += stubs.failures
            outcome.steps[-1].resume = step.resume is not None
            if not outcome.steps[-1].passed:
                break
    return outcome


def _check_stubbed(definition: FSMDefinition, names: list[str]) -> None:
    """A case or step that stubs a tool no state lists has a typo, or a stub left over: say which."""
    listed = list(dict.fromkeys(name for state in definition.states.values() for name in state.tools))
    for name in names:
        if name not in listed:
            hint = did_you_mean(name, listed)
            raise FSMError(f"the test stubs tool '{name}', which no state lists{f' ({hint})' if hint else ''}")


def _binding_hint(exc: FSMError, hooks: Hooks | None) -> str:
    """What to do about handlers, checks or tools the definition names and nothing provides."""
    codes = {p.code for p in getattr(exc, "problems", ())}
    if "unbound_tool" in codes:
        return ' (stub the tools in the test file\'s "tools" field, or register their code in its "hooks")'
    if hooks is None and codes & set(_UNBOUND):
        return ' (name the hooks in the test file\'s "hooks" field, or pass llm-fsm test --hooks)'
    return ""


def _turn_caller(conversation: Conversation, runner: asyncio.Runner) -> Callable[..., TurnResult]:
    """``turn("send", text)``: the sync method, or its async twin when the hooks need the async API."""
    if not conversation.hooks.async_names():
        return lambda method, *args: getattr(conversation, method)(*args)
    return lambda method, *args: runner.run(getattr(conversation, f"a{method}")(*args))


def _run_step(
    conversation: Conversation,
    turn: Callable[..., TurnResult],
    llm: _StepModel,
    step: Step,
    index: int,
    outcome: CaseOutcome,
) -> StepOutcome:
    unusable = step.expect.invalid_patterns()
    if unusable:  # the step cannot be judged: fail it before it runs
        return StepOutcome(index, step.user, unusable)
    scripted = step.scripted()
    # summary calls get a stand-in: a test file scripts the replies, not the summaries
    llm.script = ScriptedLLM(scripted, summaries=folded_summary) if scripted is not None else None
    before = conversation.state
    try:
        if step.resume is not None:
            pending = conversation.pending
            if pending is None:
                raise FSMError("the step resumes, but the conversation is not paused")
            result = turn("resume", pending.token, step.resume)
        elif step.user is None and index == 0 and not conversation.history:
            result = turn("start")
        else:
            result = turn("send", step.user or "")
    except FSMError as exc:
        return StepOutcome(index, step.user, _error_failures(step.expect, exc))
    if step.expect.error is not None:
        return StepOutcome(index, step.user, [f"expected an error matching /{step.expect.error}/, got none"], result)
    outcome.states.add(result.state)
    if result.state != before:
        outcome.transitions.add((before, result.state))
    failures = check(step.expect, result, conversation)
    if llm.script is not None and llm.script.remaining:
        failures.append(f"{llm.script.remaining} scripted repl{'ies' if llm.script.remaining > 1 else 'y'} not used")
    return StepOutcome(index, step.user, failures, result)


def _error_failures(expect: Expect, exc: Exception) -> list[str]:
    text = str(exc).splitlines()[0]
    if expect.error is None:
        return [f"error: {text}"]
    return [] if re.search(expect.error, str(exc)) else [f"error /{expect.error}/ expected, got: {text}"]


def check(expect: Expect, result: TurnResult, conversation: Conversation) -> list[str]:
    """Every expectation the result does not meet, in words."""
    failures = []
    if expect.state is not None and result.state != expect.state:
        failures.append(f"state: expected '{expect.state}', got '{result.state}'")
    if expect.context is not None:
        failures += [f"context: {m}" for m in _missing(expect.context, result.context, "")]
    if expect.message is not None and not re.search(expect.message, result.message):
        failures.append(f"message: /{expect.message}/ does not match {result.message[:120]!r}")
    failures += _rejected(expect.rejected, result)
    if expect.max_llm_calls is not None and result.llm_calls > expect.max_llm_calls:
        failures.append(f"llm calls: {result.llm_calls} > {expect.max_llm_calls}")
    if expect.max_tokens is not None and result.usage.total_tokens > expect.max_tokens:
        failures.append(f"tokens: {result.usage.total_tokens} > {expect.max_tokens}")
    if expect.status is not None and conversation.status != expect.status:
        failures.append(f"status: expected '{expect.status}', got '{conversation.status}'")
    if expect.tool_calls is not None:
        failures += tool_call_failures(expect.tool_calls, result.tool_calls)
    if expect.awaiting_approval is not None:
        failures += approval_failures(expect.awaiting_approval, result.pending)
    return failures


def _missing(expected: Mapping[str, Any], actual: Any, prefix: str) -> list[str]:
    problems = []
    for key, value in expected.items():
        where = f"{prefix}{key}"
        if not isinstance(actual, Mapping) or key not in actual:
            problems.append(f"'{where}' missing")
        elif isinstance(value, Mapping) and isinstance(actual[key], Mapping):
            problems += _missing(value, actual[key], f"{where}.")
        elif actual[key] != value:
            problems.append(f"'{where}' is {json.dumps(actual[key], default=str)}, expected {json.dumps(value)}")
    return problems


def _rejected(expected: int | list[RejectedItem] | None, result: TurnResult) -> list[str]:
    if expected is None:
        return []
    if isinstance(expected, int):
        found = len(result.rejected)
        return [] if found == expected else [f"rejected: {found} item(s), expected {expected}"]
    failures = []
    for item in expected:
        wanted = item.model_dump(exclude_none=True)
        if not any(_matches(wanted, r.model_dump()) for r in result.rejected):
            failures.append(f"rejected: nothing matches {json.dumps(wanted)}")
    return failures


def _matches(wanted: Mapping[str, Any], rejection: Mapping[str, Any]) -> bool:
    for key, value in wanted.items():
        if key == "reason" and isinstance(value, str):
            if value not in str(rejection.get("reason", "")):
                return False
        elif rejection.get(key) != value:
            return False
    return True


def run_files(
    paths: Iterable[Path],
    model: Callable[[FSMDefinition], LLMClient | None] | None = None,
    *,
    repeat: int = 1,
    min_pass: int | None = None,
    hooks: Hooks | str | None = None,
) -> list[CaseOutcome]:
    """Run every case of every file; with ``repeat``, a case passes when ``min_pass`` runs pass.

    A file that names its ``hooks`` runs with those; the others run with ``hooks``: a ``Hooks``
    object, or a spec (``MODULE:NAME``, ``FILE.py:NAME`` relative to the current folder) loaded only
    when a file names none, so that hooks which do not load fail those files' cases, with the reason,
    and no other."""
    definitions: dict[Path, FSMDefinition] = {}
    outcomes = []
    needed = repeat if min_pass is None else min_pass
    for path in paths:
        try:
            test_file = read(path)
            file_hooks = _file_hooks(test_file, path, hooks)
        except FSMError as exc:  # not a test file, or its hooks cannot be loaded: each case fails saying so
            names = [case.name for case in test_file.cases] if isinstance(exc, HooksLoadError) else ["(file)"]
            outcomes += [CaseOutcome(path, name, path, error=str(exc)) for name in names]
            continue
        for case in test_file.cases:
            runs = [
                run_case(case, path, model, definitions, file_hooks, tools=test_file.tools)
                for _ in range(max(1, repeat))
            ]
            best = next((r for r in runs if r.passed), runs[-1])
            best.runs, best.passes = len(runs), sum(r.passed for r in runs)
            for run in runs:
                best.states |= run.states
                best.transitions |= run.transitions
            if best.passes < needed and best.passed:
                best.error = f"passed {best.passes} of {best.runs} runs, {needed} needed"
            outcomes.append(best)
    return outcomes


def _file_hooks(test_file: TestFile, path: Path, runner_hooks: Hooks | str | None) -> Hooks | None:
    """The hooks a file's cases run with: those it names (relative to it), else the runner's."""
    if test_file.hooks is not None:
        return Hooks.load(test_file.hooks, relative_to=path.parent)
    if not isinstance(runner_hooks, str):
        return runner_hooks
    try:
        return Hooks.load(runner_hooks)
    except HooksLoadError as exc:
        raise HooksLoadError(f"{exc} (the runner's hooks, llm-fsm test --hooks: this file names none)") from exc


@dataclass(frozen=True)
class Coverage:
    definition: Path
    states: frozenset[str]
    covered_states: frozenset[str]
    transitions: frozenset[tuple[str, str]]
    covered_transitions: frozenset[tuple[str, str]]


ANYWHERE = "*"  # the source of a global transition, in coverage: it is covered once taken from any state


def _edge(definition: FSMDefinition, move: tuple[str, str]) -> tuple[str, str]:
    """The transition a move between two states took: the state's own to that state, else a global one
    to it, else one going back (``"$return"``)."""
    source, target = move
    if source not in definition.states:
        return move
    own = {t.target_state for t in definition.states[source].transitions}
    anywhere = {g.target_state for g in definition.global_moves(source)}
    if target in own:
        return move
    if target in anywhere:
        return (ANYWHERE, target)
    if RETURN in own:
        return (source, RETURN)
    return (ANYWHERE, RETURN) if RETURN in anywhere else move


def coverage(outcomes: Iterable[CaseOutcome]) -> list[Coverage]:
    """State and transition coverage of each definition by the cases that ran it."""
    by_definition: dict[Path, list[CaseOutcome]] = {}
    for outcome in outcomes:
        if outcome.definition.suffix == ".json" and outcome.name != "(file)":
            by_definition.setdefault(outcome.definition, []).append(outcome)
    report = []
    for path, cases in sorted(by_definition.items()):
        try:
            definition = load(path)
        except FSMError:
            continue
        edges = {(sid, t.target_state) for sid, s in definition.states.items() for t in s.transitions}
        edges |= {(ANYWHERE, g.target_state) for g in definition.global_transitions}  # each counted once
        states = frozenset().union(*(c.states for c in cases)) & set(definition.states)
        taken = frozenset(_edge(definition, move) for move in frozenset().union(*(c.transitions for c in cases)))
        taken &= edges
        report.append(
            Coverage(path, frozenset(definition.states), frozenset(states), frozenset(edges), frozenset(taken))
        )
    return report


def junit_xml(outcomes: list[CaseOutcome]) -> str:
    """The outcomes as JUnit XML, one test case per case, one suite per file."""
    from xml.sax.saxutils import escape, quoteattr

    lines = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>"]
    files: dict[Path, list[CaseOutcome]] = {}
    for outcome in outcomes:
        files.setdefault(outcome.file, []).append(outcome)
    for path, cases in files.items():
        failed = sum(not c.passed for c in cases)
        lines.append(f'  <testsuite name={quoteattr(str(path))} tests="{len(cases)}" failures="{failed}">')
        for case in cases:
            lines.append(f"    <testcase classname={quoteattr(path.stem)} name={quoteattr(case.name)}>")
            if not case.passed:
                message = failure_text(case)
                lines.append(f"      <failure message={quoteattr(message.splitlines()[0])}>{escape(message)}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def failure_text(case: CaseOutcome) -> str:
    if case.error:
        return case.error
    step = next(s for s in case.steps if not s.passed)
    return f"step {step.index + 1} {step.said()}: " + "; ".join(step.failures)
