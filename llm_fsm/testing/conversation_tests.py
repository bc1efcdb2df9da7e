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

The file format lives in :mod:`~llm_fsm.testing.case_files`, outcomes and reports (coverage, JUnit) in
:mod:`~llm_fsm.testing.case_results`; this module runs the cases, and its names are the ones to import.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from llm_fsm.conversation import Conversation
from llm_fsm.definition.loader import load
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.definition.wording import did_you_mean
from llm_fsm.errors import FSMError, HooksLoadError
from llm_fsm.hooks import Hooks
from llm_fsm.llm import LLMClient, LLMRequest, LLMResponse, Usage
from llm_fsm.testing.case_files import (
    Case,
    Expect,
    RejectedItem,
    Reply,
    Step,
    TestFile,
    TestFileError,
    discover,
    json_schema,
    read,
)
from llm_fsm.testing.case_results import ANYWHERE, CaseOutcome, Coverage, StepOutcome, coverage, failure_text, junit_xml
from llm_fsm.testing.scripted import ScriptedLLM, folded_summary
from llm_fsm.testing.tool_scripts import (
    StubbedTools,
    ToolStub,
    approval_failures,
    stubbed_names,
    tool_call_failures,
)
from llm_fsm.tools.calling import ToolMode
from llm_fsm.turn.runner import TurnResult

__all__ = [
    "ANYWHERE",
    "Case",
    "CaseOutcome",
    "Coverage",
    "Expect",
    "RejectedItem",
    "Reply",
    "Step",
    "StepOutcome",
    "TestFile",
    "TestFileError",
    "check",
    "coverage",
    "discover",
    "failure_text",
    "json_schema",
    "junit_xml",
    "read",
    "run_case",
    "run_files",
]


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
        turn = turn_caller(conversation, runner)
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


def turn_caller(conversation: Conversation, runner: asyncio.Runner) -> Callable[..., TurnResult]:
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
    covered(outcome, before, result)
    failures = check(step.expect, whole_run(result), conversation)
    if llm.script is not None and llm.script.remaining:
        unused = f"{llm.script.remaining} scripted repl{'ies' if llm.script.remaining > 1 else 'y'} not used"
        if result.user is None and result.previous_state is None and not result.llm_calls:
            unused += f" (state '{result.state}' writes its own opening: no model call, so no reply for it)"
        failures.append(unused)
    return StepOutcome(index, step.user, failures, result)


def covered(outcome: CaseOutcome, before: str, result: TurnResult) -> None:
    """The states and moves a step went through, into ``outcome`` (a workflow's run: every one of its steps)."""
    for taken in (*result.steps, result):
        outcome.states.add(taken.state)
        if taken.state != before:
            outcome.transitions.add((before, taken.state))
        before = taken.state


def whole_run(result: TurnResult) -> TurnResult:
    """A run's last result with what the run did in all (a workflow: ``result.steps`` before it): the calls, tokens,
    tool calls and rejections of every step, which a step's ``expect`` checks (its state, context and message are
    the last step's)."""
    if not result.steps:
        return result
    every = (*result.steps, result)
    usage = sum((taken.usage for taken in every), Usage())
    return replace(
        result, llm_calls=sum(taken.llm_calls for taken in every), usage=usage,
        tool_calls=tuple(run for taken in every for run in taken.tool_calls),
        rejected=tuple(rejection for taken in every for rejection in taken.rejected),
    )  # fmt: skip


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
