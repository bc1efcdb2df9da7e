"""``field(obj, name)`` gives what ``getattr(obj, name, None)`` gives, on every kind of pydantic attribute and
on objects that are not pydantic models (litellm's responses are pydantic models; llm_fsm.llm.fields)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from llm_fsm.llm import LiteLLMClient
from llm_fsm.llm.fields import field


class Plain(BaseModel):
    model_config = ConfigDict(extra="allow")
    number: int = 1
    nothing: int | None = None
    _hidden: dict[str, Any] = PrivateAttr(default_factory=lambda: {"cost": 0.5})
    _unset: int = PrivateAttr()
    klass_value: Any = None

    @property
    def shown(self) -> str:
        return "from a property"


class Klass(BaseModel):
    number: int = 1
    on_the_class: ClassVar[str] = "a class value"  # a plain class attribute, not a field


class Own(BaseModel):
    number: int = 1

    def __getattr__(self, name: str) -> Any:  # a model that answers every name itself
        return f"own {name}"


NAMES = ("number", "nothing", "extra_one", "_hidden", "_unset", "shown", "missing", "on_the_class", "__name__", "mro")


@pytest.mark.parametrize("obj", [Plain(extra_one=[1]), Plain(), Klass(), Own(), object(), None, {"number": 1}])
@pytest.mark.parametrize("name", NAMES)
def test_field_reads_what_getattr_reads(obj: Any, name: str) -> None:
    assert field(obj, name) == getattr(obj, name, None)
    assert field(obj, name) == getattr(obj, name, None)  # again, once the class's answer is cached


def test_field_reads_a_litellm_response_as_getattr_does() -> None:
    litellm = LiteLLMClient("gpt-4o-mini").litellm  # imported as the client imports it (no price-list fetch)
    response = litellm.completion(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], mock_response='{"a": 1}'
    )
    names = ("choices", "usage", "model", "_hidden_params", "nothing_of_that_name", "id")
    for obj in (response, response.usage, response.choices[0], response.choices[0].message):
        for name in (*names, "cache_read_input_tokens", "prompt_tokens_details", "content", "tool_calls"):
            assert field(obj, name) == getattr(obj, name, None), (type(obj).__name__, name)
    assert field(response, "_hidden_params")["response_cost"] is not None  # a private attribute, read
    assert field(response, "usage").total_tokens > 0  # an extra field, read
