"""Tools in conversation tests: stubbed results instead of code, and expectations about the calls.

A test file (or a case, or a step) may stub a tool by name: ``{"result": ...}`` is what every call
returns, ``{"error": "..."}`` makes every call fail with that message, and a list of those gives
the outcomes of successive calls within a step. A stubbed tool needs no code: it satisfies the
check that every tool a state lists is registered, and it overrides the code when there is some
(keeping that code's parameters schema). :class:`StubbedTools` holds the stubs of the step that is
running; :func:`tool_call_failures` says, in words, how the calls a turn made differ from those
expected.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from llm_fsm.hooks import Hooks, ToolFunction
from llm_fsm.tools.calling import ToolRun, signature_schema

# tags of the two forms of a stub: they show up in validation errors' locations, which drop them
ONE_STUB, STUB_LIST = "one stub", "stubs in order"
STUB_FORMS = (ONE_STUB, STUB_LIST)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ToolStub(_Strict):
    """What a stubbed call returns: a ``result``, or an ``error`` (the call fails with that message)."""

    result: Any = Field(None, description="The call's result (any JSON value).")
    error: str | None = Field(None, description="The call fails with this message instead.")

    @model_validator(mode="after")
    def _one_outcome(self) -> ToolStub:
        given = self.model_fields_set & {"result", "error"}
        if len(given) != 1:
            raise ValueError(
                'a tool stub gives either a "result" or an "error"'
                + (", not both" if given else ', e.g. {"result": {"status": "shipped"}}')
            )
        return self


def _stub_form(value: Any) -> str | None:
    return STUB_LIST if isinstance(value, list) else ONE_STUB if isinstance(value, dict) else None


StubSpec = Annotated[
    Annotated[ToolStub, Tag(ONE_STUB)] | Annotated[list[ToolStub], Tag(STUB_LIST)],
    Discriminator(
        _stub_form,
        custom_error_type="tool_stub",
        custom_error_message='a tool stub is {"result": ...} or {"error": "..."}, or a list of those for '
        "successive calls",
    ),
]
STUBS_DESCRIPTION = (
    'Stubbed tools, by name: {"result": ...} or {"error": "..."} for every call, or a list of those for '
    "successive calls in a step. A stubbed tool needs no code, and replaces the code when there is some."
)


class ToolCallExpectation(_Strict):
    """One tool call a turn must have made (in order); every field but ``name`` is optional."""

    name: str = Field(description="The tool called.")
    arguments: dict[str, Any] | None = Field(None, description="A subset the arguments must contain.")
    result: Any = Field(None, description="The result (a subset, for an object); the call must not have failed.")
    error: str | None = Field(None, description="The call must have failed with an error matching this expression.")
    approval: Literal["approved", "rejected", "supplied"] | None = Field(
        None, description="How a person decided about the call."
    )


class ApprovalExpectation(_Strict):
    """The tool call a paused turn waits to have approved."""

    name: str = Field(description="The tool waiting for approval.")
    arguments: dict[str, Any] | None = Field(None, description="A subset the call's arguments must contain.")


# -- stubs at run time ------------------------------------------------------------------------


class ToolError(Exception):
    """What a stubbed call raises for its ``error``: the model reads ``ToolError: <message>``."""


class StubbedTools:
    """The stubs every stubbed tool of a case answers from; :meth:`begin` sets those of a step.

    Calls run in worker threads (several at once), hence the lock around the counts.
    """

    def __init__(self) -> None:
        self.stubs: dict[str, list[ToolStub]] = {}
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def begin(self, *layers: Mapping[str, ToolStub | list[ToolStub]] | None) -> None:
        """The stubs of a step: the later layers (case, then step) replace the earlier ones by tool."""
        merged: dict[str, list[ToolStub]] = {}
        for layer in layers:
            for name, spec in (layer or {}).items():
                merged[name] = list(spec) if isinstance(spec, list) else [spec]
        with self._lock:
            self.stubs, self.counts, self.failures = merged, {}, []

    def outcome(self, name: str) -> ToolStub | None:
        """The stub of this call of ``name`` (None: not stubbed in this step); a failure noted when a
        list of outcomes has run out."""
        with self._lock:
            stubs = self.stubs.get(name)
            if stubs is None:
                return None
            number = self.counts[name] = self.counts.get(name, 0) + 1
            if len(stubs) == 1:
                return stubs[0]
            if number <= len(stubs):
                return stubs[number - 1]
            why = f"tool '{name}' was called {number} times, but its stub lists {len(stubs)} outcomes"
            self.failures.append(why)
            return ToolStub(error=f"the test stubs only {len(stubs)} calls of this tool")

    def note(self, failure: str) -> None:
        with self._lock:
            self.failures.append(failure)

    def hooks(self, hooks: Hooks | None, names: Iterable[str]) -> Hooks:
        """A copy of ``hooks`` where each of ``names`` answers from the stubs (else from its code)."""
        stubbed = hooks.copy() if hooks is not None else Hooks()
        for name in names:
            real = stubbed.tools.get(name)
            parameters = (real.parameters or signature_schema(real.function)) if real else None
            stubbed.tools[name] = ToolFunction(
                name,
                self._dispatcher(name, real),
                real.is_async if real else False,
                real.description if real else "",
                parameters or {"type": "object"},
            )
        return stubbed

    def _dispatcher(self, name: str, real: ToolFunction | None) -> Callable[..., Any]:
        def answer() -> tuple[bool, Any]:
            stub = self.outcome(name)
            if stub is not None:
                if stub.error is not None:
                    raise ToolError(stub.error)
                return True, stub.result
            if real is None:
                self.note(f"tool '{name}' was called in a step that does not stub it, and it has no code")
                raise ToolError("this step of the test stubs no result for this tool")
            return False, None

        if real is not None and real.is_async:

            async def stubbed_async(**arguments: Any) -> Any:
                done, value = answer()
                return value if done else await real.function(**arguments)

            return stubbed_async

        def stubbed(**arguments: Any) -> Any:
            done, value = answer()
            return value if done or real is None else real.function(**arguments)

        return stubbed


def stubbed_names(layers: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """Every tool some layer (the file, the case, a step) stubs, in the order first seen."""
    return list(dict.fromkeys(name for layer in layers for name in (layer or {})))


# -- expectations -------------------------------------------------------------------------------


def tool_call_failures(expected: Sequence[ToolCallExpectation], runs: Sequence[ToolRun]) -> list[str]:
    """How the calls a turn made differ from ``expected`` (the same calls, in the same order), in words."""
    if not expected and runs:
        return [f"tool calls: expected none, got {len(runs)}: {', '.join(map(_call_text, runs))}"]
    failures = []
    for number, (wanted, run) in enumerate(zip(expected, runs, strict=False), 1):
        failures += _call_failures(number, wanted, run)
    for number, wanted in enumerate(expected[len(runs) :], len(runs) + 1):
        made = (
            f"only {len(runs)} {'call was' if len(runs) == 1 else 'calls were'} made" if runs else "no tool was called"
        )
        failures.append(f"tool call {number}: expected a call to '{wanted.name}', but {made}")
    for number, run in enumerate(runs[len(expected) :], len(expected) + 1):
        failures.append(f"tool call {number}: unexpected call {_call_text(run)}")
    return failures


def _call_failures(number: int, wanted: ToolCallExpectation, run: ToolRun) -> list[str]:
    where = f"tool call {number}"
    if run.name != wanted.name:
        return [f"{where}: expected '{wanted.name}', got {_call_text(run)}"]
    where = f"{where} ('{run.name}')"
    failures = [f"{where}: argument {m}" for m in arguments_differ(wanted.arguments, run.arguments)]
    if "result" in wanted.model_fields_set:
        if run.error is not None:
            failures.append(f"{where}: failed with {run.error!r}, expected a result")
        else:
            failures += [f"{where}: result {m}" for m in _differ(wanted.result, run.result)]
    if wanted.error is not None:
        if run.error is None:
            failures.append(f"{where}: succeeded, expected an error matching /{wanted.error}/")
        elif not re.search(wanted.error, run.error):
            failures.append(f"{where}: error /{wanted.error}/ does not match {run.error[:120]!r}")
    if wanted.approval is not None and run.approval != wanted.approval:
        got = f"'{run.approval}'" if run.approval else "none (no person decided)"
        failures.append(f"{where}: approval is {got}, expected '{wanted.approval}'")
    return failures


def approval_failures(expected: ApprovalExpectation, pending: Any) -> list[str]:
    """How the pause of a turn (``TurnResult.pending``) differs from waiting for ``expected``'s approval."""
    if pending is None:
        return [f"awaiting approval: expected a pause for tool '{expected.name}', but the turn did not pause"]
    call = pending.tool_call if pending.kind == "tool_approval" else None
    if call is None:
        return [f"awaiting approval: expected a pause for tool '{expected.name}', but it paused for: {pending.reason}"]
    if call["name"] != expected.name:
        return [f"awaiting approval: expected tool '{expected.name}', but '{call['name']}' waits"]
    return [f"awaiting approval: argument {m}" for m in arguments_differ(expected.arguments, call["arguments"])]


def arguments_differ(expected: Mapping[str, Any] | None, actual: Any) -> list[str]:
    if expected is None:
        return []
    if not isinstance(actual, Mapping):
        return [f"expected {json.dumps(expected)}, but the arguments were not a JSON object: {str(actual)[:80]!r}"]
    return _differ(expected, actual)


def _differ(expected: Any, actual: Any, prefix: str = "") -> list[str]:
    """What of ``expected`` ``actual`` lacks: objects are compared as subsets, other values as equals."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        problems = []
        for key, value in expected.items():
            where = f"{prefix}{key}"
            if key not in actual:
                problems.append(f"'{where}' missing")
            else:
                problems += _differ(value, actual[key], f"{where}.")
        return problems
    if expected == actual:
        return []
    label = f"'{prefix[:-1]}' is" if prefix else "is"
    return [f"{label} {json.dumps(actual, default=str)}, expected {json.dumps(expected)}"]


def _call_text(run: ToolRun) -> str:
    arguments = run.arguments if isinstance(run.arguments, str) else json.dumps(run.arguments, ensure_ascii=False)
    return f"'{run.name}' with {arguments[:100]}"
