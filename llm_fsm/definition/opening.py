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
from llm_fsm.values import blank

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["compile_opening", "is_template", "keys_read", "missing_keys", "opening_failure", "render_opening"]


def is_template(text: str) -> bool:
    """Whether ``text`` needs Jinja: only text with a ``{`` can hold ``{{``, ``{%`` or ``{#``."""
    return "{" in text


MAX_CHARS = 4000  # an opening is one chat message: a template that writes more is refused, not sent
MAX_LOOP = 1000  # items a template's loops may take over ``range`` in one rendering, all loops together
MAX_POWER = 64  # the largest exponent ``**`` takes (9 ** 9 ** 9 would take the process with it)


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    # imported with the first opening template, not with the package (plain openings never import it)
    import jinja2
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        """The sandbox, with the operators that can build huge values checked: an intercepted operator is
        also never folded at compile time, so loading a definition cannot be made to hang or to fill memory."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_POWER:
                raise SecurityError(f"an exponent over {MAX_POWER} ({right})")
            if operator == "*":
                for items, times in ((left, right), (right, left)):
                    repeated = isinstance(items, str | list | tuple) and isinstance(times, int)
                    if repeated and len(items) * times > MAX_CHARS:
                        raise SecurityError(f"a repetition over {MAX_CHARS} items")
            return super().call_binop(context, operator, left, right)

    return Bounded(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def _budgeted_range() -> Any:
    """``range`` for one rendering: every loop over it draws from one budget of :data:`MAX_LOOP` items."""
    from jinja2.exceptions import SecurityError

    left = [MAX_LOOP]

    def bounded_range(*args: int) -> range:
        items = range(*args)
        left[0] -= len(items)
        if left[0] < 0:
            raise SecurityError(f"loops over more than {MAX_LOOP} items")
        return items

    return bounded_range


def _write(template: Template, context: Mapping[str, Any]) -> str:
    """The template rendered chunk by chunk, stopped as soon as it writes more than :data:`MAX_CHARS`."""
    from jinja2.exceptions import SecurityError

    chunks, size = [], 0
    for chunk in template.generate({**context, "range": _budgeted_range()}):
        size += len(chunk)
        if size > MAX_CHARS:
            raise SecurityError(f"it writes more than {MAX_CHARS} characters")
        chunks.append(chunk)
    return "".join(chunks)


@cache
def compile_opening(text: str) -> Template:
    """``text`` compiled (once per text); ``ValueError`` saying why when it is not a template."""
    import jinja2

    try:
        return _environment().from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"the opening is not a valid template: {exc.message} (line {exc.lineno})") from None
    except Exception as exc:  # noqa: BLE001 (whatever compiling a definition's text raises is that text's problem)
        raise ValueError(f"the opening is not a valid template: {type(exc).__name__}: {exc}") from None


def render_opening(text: str, context: Mapping[str, Any], *, state: str) -> str:
    """The opening ``text`` of ``state`` written over ``context``; :class:`~llm_fsm.errors.OpeningError`
    naming what is missing (a key the context does not have) or what the sandbox refused."""
    if not is_template(text):
        return text
    import jinja2

    try:
        written = _write(compile_opening(text), context)
    except jinja2.UndefinedError as exc:
        raise OpeningError(
            f"state '{state}': its opening needs a value the context does not have: {exc.message} "
            "(pass it in the initial context, or give it a default: {{ key | default('...') }})"
        ) from None
    except jinja2.TemplateError as exc:  # a sandbox refusal, or a filter given the wrong kind of value
        raise OpeningError(f"state '{state}': its opening could not be written: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (an include without a loader, a recursion, a value of the wrong kind...)
        raise OpeningError(f"state '{state}': its opening could not be written: {type(exc).__name__}: {exc}") from None
    if blank(written):
        raise OpeningError(f"state '{state}': its opening wrote nothing a user could read ({written!r:.40})")
    return written


def missing_keys(text: str, context: Mapping[str, Any]) -> str | None:
    """Why ``text`` cannot be written over ``context`` alone (the undefined value, in Jinja's words),
    or None when it can (or fails for another reason, which only a real context can tell)."""
    if not is_template(text):
        return None
    import jinja2

    try:
        _write(compile_opening(text), context)
    except jinja2.UndefinedError as exc:
        return exc.message or "a value is undefined"
    except Exception:  # noqa: BLE001 (any other failure depends on the values a real context holds)
        return None
    return None


def opening_failure(text: str) -> str | None:
    """Why ``text`` cannot be written over an empty context for another reason than a missing key (see
    :func:`missing_keys`): what the sandbox refused, an include, nothing visible; None when it can."""
    if missing_keys(text, {}) is not None:
        return None
    try:
        render_opening(text, {}, state="")
    except OpeningError as exc:
        said = str(exc)  # without the state's name and the preamble, which the finding gives
        for preamble in ("state '': its opening could not be written: ", "state '': its opening "):
            said = said.removeprefix(preamble)
        return said
    return None


def keys_read(text: str) -> set[str]:
    """The top-level context keys ``text`` reads (none when it is no template)."""
    if not is_template(text):
        return set()
    from jinja2 import meta

    return set(meta.find_undeclared_variables(_environment().parse(text)))
