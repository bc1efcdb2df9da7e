"""The model layer: a small protocol, and its litellm implementation.

This is the only module that imports litellm, and it does so on the first call: importing litellm
takes seconds and, by default, fetches a cost map over the network. Before that import we set
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (unless the host application chose otherwise) so that no
import touches the network. Retries are ours: litellm gets ``max_retries=0`` so that no hidden
retry runs under ours, and we retry only what can succeed on a second try.

By concern: :mod:`~llm_fsm.llm.protocol` (what a conversation asks of a model and gets back),
:mod:`~llm_fsm.llm.litellm_client` (:class:`LiteLLMClient`: parameters, retries, the lazy import),
:mod:`~llm_fsm.llm.responses` (a provider's response or stream read into an :class:`LLMResponse`) and
:mod:`~llm_fsm.llm.provider_errors` (a provider's failure as one of our errors, without secrets).
"""

from __future__ import annotations

from llm_fsm.llm.litellm_client import LiteLLMClient
from llm_fsm.llm.protocol import (
    LLMClient,
    LLMRequest,
    LLMResponse,
    Message,
    PromptText,
    ResponseFormat,
    StreamingLLMClient,
    ToolCalling,
    ToolCallRequest,
    Usage,
)
from llm_fsm.llm.responses import StreamReader, ToolCallParts  # not public: their tests import them from here

__all__ = [
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LiteLLMClient",
    "Message",
    "PromptText",
    "ResponseFormat",
    "StreamingLLMClient",
    "ToolCallRequest",
    "ToolCalling",
    "Usage",
    "StreamReader",
    "ToolCallParts",
]
