"""A state's own opening (``"opening"`` in the definition): the first message of a conversation that
opens in that state, written by the definition instead of the model, so the opening turn makes no
model call (and litellm is not even imported).

The text is a Jinja template over the context, rendered in the immutable sandbox with
``StrictUndefined`` (a key the context lacks is an error naming it, never an empty string); text with
no ``{`` is taken as it is, without Jinja. A template that does not compile is a load error of its
state's ``opening`` field (:func:`compile_opening`, called by the definition's validator). The
message is for the user, not the prompt: nothing is escaped (the history escapes it in prompts).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from llm_fsm.errors import OpeningError

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["compile_opening", "is_template", "keys_read", "missing_keys", "render_opening"]


def is_template(text: str) -> bool:
    """Whether ``text`` needs Jinja: only text with a ``{`` can hold ``{{``, ``{%`` or ``{#``."""
    return "{" in text


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    # imported with the first opening template, not with the package (plain openings never import it)
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


@cache
def compile_opening(text: str) -> Template:
    """``text`` compiled (once per text); ``ValueError`` saying why when it is not a template."""
    import jinja2

    try:
        return _environment().from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"the opening is not a valid template: {exc.message} (line {exc.lineno})") from None


def render_opening(text: str, context: Mapping[str, Any], *, state: str) -> str:
    """The opening ``text`` of ``state`` written over ``context``; :class:`~llm_fsm.errors.OpeningError`
    naming what is missing (a key the context does not have) or what the sandbox refused."""
    if not is_template(text):
        return text
    import jinja2

    try:
        return compile_opening(text).render(dict(context))
    except jinja2.UndefinedError as exc:
        raise OpeningError(
            f"state '{state}': its opening needs a value the context does not have: {exc.message} "
            "(pass it in the initial context, or give it a default: {{ key | default('...') }})"
        ) from None
    except jinja2.TemplateError as exc:  # a sandbox refusal, or a filter given the wrong kind of value
        raise OpeningError(f"state '{state}': its opening could not be written: {exc}") from None


def missing_keys(text: str, context: Mapping[str, Any]) -> str | None:
    """Why ``text`` cannot be written over ``context`` alone (the undefined value, in Jinja's words),
    or None when it can (or fails for another reason, which only a real context can tell)."""
    if not is_template(text):
        return None
    import jinja2

    try:
        compile_opening(text).render(dict(context))
    except jinja2.UndefinedError as exc:
        return exc.message or "a value is undefined"
    except Exception:  # noqa: BLE001 (any other failure depends on the values a real context holds)
        return None
    return None


def keys_read(text: str) -> set[str]:
    """The top-level context keys ``text`` reads (none when it is no template)."""
    if not is_template(text):
        return set()
    from jinja2 import meta

    return set(meta.find_undeclared_variables(_environment().parse(text)))
