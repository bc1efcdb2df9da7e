"""The format of conversation test files (``*.test.json``, see :mod:`llm_fsm.testing.conversation_tests`):
its pydantic models and JSON Schema, finding the files, and reading one with every mistake at its line:column."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llm_fsm.definition.json_problems import json_pointer as _json_pointer
from llm_fsm.definition.json_problems import positions as _positions
from llm_fsm.definition.loader import dotted
from llm_fsm.definition.wording import Vocabulary, field_problems
from llm_fsm.errors import DefinitionError, Problem
from llm_fsm.jsonfiles import JSONFileError, not_a, read_json
from llm_fsm.named_files import read_bytes
from llm_fsm.snapshot import RejectionKind
from llm_fsm.testing.tool_scripts import STUBS_DESCRIPTION, ApprovalExpectation, StubSpec, ToolCallExpectation, ToolStub

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
    positions = _positions(read_bytes(path, "test file").decode("utf-8-sig"))
    problems = []
    for loc, message, code, hint in field_problems(exc, _WORDS):
        pointer = _json_pointer(loc)
        while pointer and pointer not in positions:  # a missing field: point at its parent
            pointer = pointer.rsplit("/", 1)[0]
        line, column = positions.get(pointer, (None, None))
        problems.append(Problem(dotted(loc), message, line, column, hint, code, str(path)))
    return problems
