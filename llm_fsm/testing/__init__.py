"""Test doubles and conversation testing for people who build on llm_fsm.

>>> from llm_fsm.testing import ScriptedLLM, reply
>>> llm = ScriptedLLM([reply("greet", "Hi!")])

``ScriptedLLM`` answers from a script and records every request; ``SimulatedLLM`` answers with valid
replies that walk a definition's graph; ``RecordingLLM`` and ``ReplayLLM`` record a conversation's
model calls to a cassette and replay them. The modules hold the rest: ``conversation_tests`` (the
``*.test.json`` files and their runner), ``skeleton`` (test files written from a definition's paths)
and ``pytest_plugin`` (fixtures).

Importing this package stays light (no pydantic models, Jinja or engine): ``SimulatedLLM``, which
builds on the engine, loads the first time it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llm_fsm.errors import CassetteMismatch, ScriptExhausted
from llm_fsm.testing.cassette import RecordingLLM, ReplayLLM
from llm_fsm.testing.scripted import ScriptedLLM, reply, tool_calls

if TYPE_CHECKING:
    from llm_fsm.testing.simulation import SimulatedLLM

__all__ = [
    "CassetteMismatch",
    "RecordingLLM",
    "ReplayLLM",
    "ScriptExhausted",
    "ScriptedLLM",
    "SimulatedLLM",
    "reply",
    "tool_calls",
]


def __getattr__(name: str) -> Any:
    if name == "SimulatedLLM":
        from llm_fsm.testing.simulation import SimulatedLLM

        return SimulatedLLM
    raise AttributeError(f"module 'llm_fsm.testing' has no attribute {name!r}")
