"""One field of a provider's response object, read as ``getattr(obj, name, None)`` reads it: :func:`field`.

litellm's responses are pydantic models, and on those a ``getattr`` with a default is dear exactly where
reading a response needs it most: a name the object does not have (``cache_read_input_tokens`` on most
providers' usage), an extra field (``ModelResponse.usage``) or a private one (``_hidden_params``) goes
through pydantic's ``__getattr__``, and a missing one raises and catches two ``AttributeError``\\ s on the
way (3-6 µs each; reading one whole response took about 25 µs of a turn's 280, ``benchmarks/RESULTS.md``
§18). :func:`field` looks in the same places pydantic's ``__getattr__`` does, in the same order, without
the exceptions, for the objects where that gives the same answer (decided once per class and name);
everything else gets the plain ``getattr``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_PYDANTIC_GETATTR = BaseModel.__dict__["__getattr__"]  # pydantic hides it from type checkers


def field(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, the same answer, cheaper on a pydantic model."""
    kind: Any = type(obj)  # Any: mypy takes type[Any] for unhashable
    plain = _PLAIN.get((kind, name))
    if plain is None:
        plain = _PLAIN[kind, name] = _plain_pydantic(kind, name)
    if not plain:
        return getattr(obj, name, None)
    values = obj.__dict__
    if name in values:
        return values[name]
    private = obj.__pydantic_private__
    if name in kind.__private_attributes__:  # pydantic reads a private name there and nowhere else
        return private.get(name) if private else None
    extra = obj.__pydantic_extra__
    return extra.get(name) if extra else None


_PLAIN: dict[tuple[Any, str], bool] = {}  # (class, name) -> _plain_pydantic: as many as the code reads


def _plain_pydantic(cls: Any, name: str) -> bool:
    """Whether ``getattr(obj, name, None)`` on an instance of ``cls`` is the lookup :func:`field` writes out:
    ``cls`` is a pydantic model whose attribute access is pydantic's (no ``__getattr__`` or
    ``__getattribute__`` of its own); no class in its MRO defines ``name`` (no property, descriptor or class
    value comes before the instance's own fields); a private ``name`` is a plain value (not a descriptor
    pydantic would call), and any other ``name`` is not found on the class either (where pydantic's
    ``__getattr__`` looks last, the metaclass included)."""
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        return False
    if getattr(cls, "__getattr__", None) is not _PYDANTIC_GETATTR:
        return False
    if cls.__getattribute__ is not object.__getattribute__:
        return False
    if any(name in klass.__dict__ for klass in cls.__mro__):
        return False
    if name in cls.__private_attributes__:
        return not hasattr(cls.__private_attributes__[name], "__get__")
    return not hasattr(cls, name)
