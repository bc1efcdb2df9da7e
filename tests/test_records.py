"""quick_init (llm_fsm.records): a frozen dataclass built with one __dict__ update behaves as the dataclass it was
(the same signature, defaults, fresh default factories, frozen, equal, replaceable, picklable); any class it
does not handle keeps the dataclass's own __init__."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from llm_fsm.llm.protocol import LLMRequest, Usage
from llm_fsm.records import quick_init
from llm_fsm.turn.steps import TurnResult


@dataclass(frozen=True)
class Plain:
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)
    note: str | None = None


@quick_init
@dataclass(frozen=True)
class Quick:
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)
    note: str | None = None


def test_the_signature_is_the_dataclasses():
    assert str(inspect.signature(Quick)) == str(inspect.signature(Plain))
    assert Quick.__init__.__annotations__ == Plain.__init__.__annotations__
    assert Quick.__init__.__qualname__ == "Quick.__init__" and Quick.__init__.__code__.co_names[:2] == (
        "__dict__",
        "update",
    )


@pytest.mark.parametrize(
    ("args", "kwargs"), [(("a",), {}), (("a", 2), {"note": "n"}), ((), {"name": "b", "tags": ["x"], "count": 3})]
)
def test_an_instance_holds_what_the_dataclass_would(args: tuple[Any, ...], kwargs: dict[str, Any]):
    quick, plain = Quick(*args, **kwargs), Plain(*args, **kwargs)
    assert dataclasses.asdict(quick) == dataclasses.asdict(plain)
    assert repr(quick).replace("Quick", "Plain") == repr(plain)


def test_default_factories_run_per_instance_and_a_given_value_is_kept():
    one, other = Quick("a"), Quick("b")
    assert one.tags == [] and one.tags is not other.tags
    given = ["t"]
    assert Quick("c", tags=given).tags is given


def test_it_stays_frozen_equal_hashable_replaceable_and_picklable():
    quick = Quick("a", 1, ["x"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.name = "b"  # type: ignore[misc]
    assert quick == Quick("a", 1, ["x"]) and quick != Quick("a", 2, ["x"])
    assert dataclasses.replace(quick, count=5) == Quick("a", 5, ["x"])
    assert pickle.loads(pickle.dumps(quick)) == quick == copy.deepcopy(quick)
    assert hash(Usage(1, 2, 3)) == hash(Usage(1, 2, 3))


def test_wrong_or_missing_arguments_fail_as_they_did():
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", unknown=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", 1, [], None, "one too many")  # type: ignore[call-arg]


def test_classes_it_does_not_handle_keep_their_init():
    @dataclass(frozen=True)
    class After:
        value: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "value", self.value * 2)

    @dataclass(frozen=True)
    class KeywordOnly:
        value: int = field(kw_only=True)

    @dataclass(frozen=True)
    class WithInitVar:
        value: int
        scale: InitVar[int] = 1

    @dataclass
    class NotFrozen:
        value: int

    for cls in (After, KeywordOnly, WithInitVar, NotFrozen):
        init = cls.__init__
        assert quick_init(cls) is cls and cls.__init__ is init
    assert After(2).value == 4


def test_the_turns_records_use_it():
    for cls in (TurnResult, LLMRequest, Usage):
        assert cls.__init__.__code__.co_names[:2] == ("__dict__", "update")
    assert Usage().cost is None and LLMRequest([]).kind == "reply"
