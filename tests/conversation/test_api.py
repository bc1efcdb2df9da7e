"""The public surface is a contract: changing it must be a deliberate edit of this test."""

from __future__ import annotations

import subprocess
import sys

import llm_fsm

PUBLIC = [
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


def test_all_is_frozen():
    assert sorted(llm_fsm.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert hasattr(llm_fsm, name)


def test_all_is_sorted_and_pinned_in_order():
    assert sorted(PUBLIC) == PUBLIC
    assert llm_fsm.__all__ == PUBLIC


def test_every_public_name_loads_through_the_lazy_getattr():
    for name in PUBLIC:
        if name != "__version__":
            assert llm_fsm.__getattr__(name) is getattr(llm_fsm, name)


def test_every_error_class_is_public():
    from llm_fsm import errors

    classes = [value for value in vars(errors).values() if isinstance(value, type) and issubclass(value, Exception)]
    assert len(classes) > 1 and {c.__name__ for c in classes} <= set(PUBLIC)


def test_every_library_error_derives_from_fsm_error():
    from llm_fsm import errors
    from llm_fsm.testing import ScriptExhausted

    classes = [getattr(errors, n) for n in dir(errors) if isinstance(getattr(errors, n), type)]
    exceptions = [c for c in classes if issubclass(c, Exception)] + [ScriptExhausted]
    assert len(exceptions) >= 10 and all(issubclass(c, llm_fsm.FSMError) for c in exceptions)
    assert issubclass(llm_fsm.ConversationEnded, llm_fsm.ConversationError)
    assert issubclass(llm_fsm.LLMAuthError, llm_fsm.LLMError)


def test_scripted_llm_implements_the_protocol():
    from llm_fsm.testing import ScriptedLLM

    assert isinstance(ScriptedLLM(), llm_fsm.LLMClient)
    assert isinstance(llm_fsm.LiteLLMClient("openai/x"), llm_fsm.LLMClient)


def test_import_is_light():
    heavy = "('litellm', 'openai', 'typer', 'rich', 'json_repair', 'pydantic', 'jinja2', 'opentelemetry')"
    code = f"import sys, llm_fsm; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_api_key_is_not_in_repr():
    assert "sk-secret" not in repr(llm_fsm.LiteLLMClient("openai/x", api_key="sk-secret"))
