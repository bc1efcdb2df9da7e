"""llm_fsm: conversational state machines, defined in JSON, driven by an LLM in one call per turn.

>>> import llm_fsm
>>> definition = llm_fsm.load("fsm_definitions/small_talk.json")          # doctest: +SKIP
>>> conversation = llm_fsm.Conversation(definition, llm_fsm.LiteLLMClient("openai/gpt-4o-mini"))  # doctest: +SKIP
>>> print(conversation.start().message)                                      # doctest: +SKIP

Importing this package is cheap: litellm is imported on the first model call.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and editors; at run time the names load on first use
    from llm_fsm.conversation import Conversation
    from llm_fsm.definition.loader import DefinitionWarning, load
    from llm_fsm.definition.models import Condition, FSMDefinition, State, Transition
    from llm_fsm.errors import (
        CassetteMismatch,
        ConflictError,
        ContextValueError,
        ConversationEnded,
        ConversationError,
        ConversationPaused,
        DefinitionError,
        EmptyMessageError,
        FSMError,
        HandlerError,
        HooksLoadError,
        IdempotencyKeyReused,
        LLMAuthError,
        LLMContextWindowError,
        LLMError,
        LLMRequestError,
        LLMUnavailableError,
        LogicError,
        MemoryValueError,
        OpeningError,
        Problem,
        PromptError,
        RefinementError,
        ReplyFormatError,
        ReplyTruncated,
        ResumeError,
        RunLimitError,
        ScriptExhausted,
        StoreError,
    )
    from llm_fsm.hooks import Break, Hooks
    from llm_fsm.llm import LiteLLMClient, LLMClient, LLMRequest, LLMResponse, Usage
    from llm_fsm.snapshot import Exchange, Origin, PendingEvent, Rejection, Snapshot
    from llm_fsm.turn.prompt import PromptBuilder, PromptSettings
    from llm_fsm.turn.runner import TurnResult

# Where each public name lives. Importing the package loads none of them (pydantic models, Jinja):
# the command line's --help stays fast, and each name is imported the first time it is used.
_HOMES = {
    "Conversation": "conversation",
    **dict.fromkeys(["Condition", "FSMDefinition", "State", "Transition"], "definition.models"),
    **dict.fromkeys(["Exchange", "Origin", "PendingEvent", "Rejection", "Snapshot"], "turn.engine"),
    **dict.fromkeys(
        [
            "CassetteMismatch",
            "ConflictError",
            "ContextValueError",
            "ConversationEnded",
            "ConversationError",
            "ConversationPaused",
            "DefinitionError",
            "EmptyMessageError",
            "FSMError",
            "HandlerError",
            "HooksLoadError",
            "IdempotencyKeyReused",
            "LLMAuthError",
            "LLMContextWindowError",
            "LLMError",
            "LLMRequestError",
            "LLMUnavailableError",
            "LogicError",
            "MemoryValueError",
            "OpeningError",
            "Problem",
            "PromptError",
            "RefinementError",
            "ReplyFormatError",
            "ReplyTruncated",
            "ResumeError",
            "RunLimitError",
            "ScriptExhausted",
            "StoreError",
        ],
        "errors",
    ),  # fmt: skip
    **dict.fromkeys(["Break", "Hooks"], "hooks"),
    **dict.fromkeys(["LiteLLMClient", "LLMClient", "LLMRequest", "LLMResponse", "Usage"], "llm"),
    **dict.fromkeys(["DefinitionWarning", "load"], "definition.loader"),
    **dict.fromkeys(["PromptBuilder", "PromptSettings"], "turn.prompt"),
    **dict.fromkeys(["TurnResult"], "turn.runner"),
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(f"llm_fsm.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llm_fsm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__version__ = "0.1.0"

# Library logging goes to the "llm_fsm" logger and is silent unless the application configures it.
logging.getLogger("llm_fsm").addHandler(logging.NullHandler())

__all__ = [
    "Break",
    "CassetteMismatch",
    "Condition",
    "ConflictError",
    "ContextValueError",
    "Conversation",
    "ConversationEnded",
    "ConversationError",
    "ConversationPaused",
    "DefinitionError",
    "DefinitionWarning",
    "EmptyMessageError",
    "Exchange",
    "FSMDefinition",
    "FSMError",
    "HandlerError",
    "Hooks",
    "HooksLoadError",
    "IdempotencyKeyReused",
    "LLMAuthError",
    "LLMClient",
    "LLMContextWindowError",
    "LLMError",
    "LLMRequest",
    "LLMRequestError",
    "LLMResponse",
    "LLMUnavailableError",
    "LiteLLMClient",
    "LogicError",
    "MemoryValueError",
    "OpeningError",
    "Origin",
    "PendingEvent",
    "Problem",
    "PromptBuilder",
    "PromptError",
    "PromptSettings",
    "RefinementError",
    "Rejection",
    "ReplyFormatError",
    "ReplyTruncated",
    "ResumeError",
    "RunLimitError",
    "ScriptExhausted",
    "Snapshot",
    "State",
    "StoreError",
    "Transition",
    "TurnResult",
    "Usage",
    "__version__",
    "load",
]
