"""pytest fixtures for people testing their own definitions (registered through the ``pytest11`` entry point).

``fsm_conversation(definition, replies, **options)`` makes a conversation driven by a
:class:`~llm_fsm.testing.ScriptedLLM` and returns ``(conversation, llm)``; ``fsm_test_files(*paths)``
runs test files (``*.test.json``) and fails the test with a readable report when a case fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from llm_fsm.conversation import Conversation
from llm_fsm.definition.loader import load
from llm_fsm.definition.models import FSMDefinition
from llm_fsm.llm import LLMClient
from llm_fsm.testing.conversation_tests import CaseOutcome, discover, failure_text, run_files
from llm_fsm.testing.scripted import ScriptedLLM

Replies = Iterable[dict[str, Any] | str | BaseException]


@pytest.fixture
def fsm_conversation() -> Callable[..., tuple[Conversation, ScriptedLLM]]:
    """Factory: ``conversation, llm = fsm_conversation("my_fsm.json", [reply, ...], state=..., context=...)``."""

    def make(
        definition: FSMDefinition | str | os.PathLike[str] | dict[str, Any], replies: Replies = (), **options: Any
    ) -> tuple[Conversation, ScriptedLLM]:
        fsm = definition if isinstance(definition, FSMDefinition) else load(definition)
        llm = ScriptedLLM(replies)
        return Conversation(fsm, llm, **options), llm

    return make


@pytest.fixture
def fsm_test_files() -> Callable[..., list[CaseOutcome]]:
    """Runner: ``fsm_test_files("tests/conversations/")``; fails with every failing case listed."""

    def run(
        *paths: str | os.PathLike[str], model: Callable[[FSMDefinition], LLMClient] | None = None
    ) -> list[CaseOutcome]:
        files = discover(Path(p) for p in paths)
        if not files:
            pytest.fail(f"no test files (*.test.json) in {', '.join(map(str, paths))}")
        outcomes = run_files(files, model)
        failed = [o for o in outcomes if not o.passed]
        if failed:
            report = "\n".join(f"{o.file}: {o.name}: {failure_text(o)}" for o in failed)
            pytest.fail(f"{len(failed)} of {len(outcomes)} conversation test(s) failed:\n{report}", pytrace=False)
        return outcomes

    return run
