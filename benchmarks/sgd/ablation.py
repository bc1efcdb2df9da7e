"""Ablations of guided mode: each family of its hand-written rules, switched off for a run by patching the names
where the guided code looks them up (``llm_fsm`` itself has no switch for any of them).

    python -m benchmarks.sgd.run --without list                       # the families, one line each
    python -m benchmarks.sgd.run -m openai/smollm2 --api-base URL --api-key none --guided --without dates

:data:`FAMILIES` names each family, what it does and where; :func:`without` switches families off::

    with without("dates", "times"):
        ...  # guided schemas are built as they would be without those rules

A family that is off leaves the schema as it would be without its rule: a value it would have read from the
words is offered as the schema says it (free text, any number, the whole closed set), a value it would have
added is not added, a guard it kept is not kept; nothing else changes. A name imported with ``from x import f``
is a copy, so each is patched in every module that looks it up. The families nest (``without`` inside
``without``) and combine; ``words`` is all of them that read the user's words at once, for a reference run.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any
from unittest import mock

from llm_fsm.guided import branches as guided_branches
from llm_fsm.guided import entered as guided_entered
from llm_fsm.guided import schema as guided
from llm_fsm.guided import tools as guided_tools
from llm_fsm.guided import words as guided_words
from llm_fsm.guided.words import Said, Topic
from llm_fsm.llm import litellm_client
from llm_fsm.turn import reply_modes

FAMILIES: dict[str, str] = {
    "spans": "free text is offered as the spans of the user's words, up to 8 words, and long sentences whole "
    "(guided_words.spans via pool, from_words); off: free text as the schema says it",
    "function_words": "spans made only of function words and fillers are not offered ('okay, fair enough' "
    "states nothing) (guided_words.pool, _only over FUNCTION_WORDS)",
    "questions": "the sentences that ask state nothing, and a message that only asks goes to a detour or may stay "
    "(guided_words.stated via pool, Said.asked in guided_branches.as_said and guided.guided_schema)",
    "dates": "dates said with a month's name or in digits are offered as YYYY-MM-DD, 'the 15th' as the day of "
    "the month collected (guided_dates.dates, days_said; Said.days; guided_words.pool, from_words)",
    "times": "times of day said with a clock's marks are offered as HH:MM ('9 pm': 21:00, noon, midnight) "
    "(guided_dates.times via guided_words.pool)",
    "numbers": "numbers written in digits (12,000, 2,5, 42k, ranges) are a number's values, each said beside a "
    "key's name that key's (guided_numbers.said_numbers via pool; placed_numbers in guided_branches.owned_numbers)",
    "no_number": "words that answer another question and say no number give a number key no value ('a nurse' "
    "is no income) (guided_branches._from_words, _counts)",
    "codes": "a code typed loosely is offered compacted ('pf 4471 9902' -> PF44719902), and digits written in "
    "groups whole (a phone number) (guided_words.from_words: _compacted, _GROUPS)",
    "flags": "yes/no flags are answered by the words: a confirmation by a yes or a no, a flag about something "
    "only when the words name it (guided_words.flag from guided_branches._from_words); yes_no is part of it",
    "yes_no": "the yes and no words (guided_words.answering: yes, no, change, but, phrases) that answer a "
    "confirmation and a state's sole yes/no question (guided_words._answer -> Said.yes, read by flag)",
    "named_values": "a closed set is narrowed to the values the words name, and tied values to the combinations "
    "named (guided_words.from_words' enum part, named_in; guided._named_offers)",
    "key_names": "a key named in the words: the number said beside its name is its own, a correction that names "
    "a key leaves the others as collected, a tool argument named alone (guided_words.names in guided_branches, "
    "guided_tools)",
    "addresses": "an email or web address that fits a key's form is not offered to free text "
    "(guided_branches._addresses, Claims.addresses)",
    "corrections": "collected values the state does not ask for (a read-back, corrections) stay on offer beside "
    "the words, and collected text is held unless the words name its key (guided_branches.as_said's kept)",
    "tool_results": "the text and numbers the turn's tools answered are offered where nothing said fits "
    "(guided_words.pool's results -> Said.told)",
    "tool_form": "the JSON tool form's call arguments are taken from what was said or collected "
    "(guided.guided_arguments in turn.reply_modes.Guided.tool_request)",
    "tool_waits": "moves that wait on a tool the turn still offers are left out, so the tool is called first "
    "(guided.awaiting_tools in turn.reply_modes.Guided.tool_request)",
    "openings": "the message may not open like an earlier one (guided_patterns.not_opening_like in "
    "guided_entered.message_schema)",
    "loops": "a message that loops is cut after its first time, and a reply cut in such a loop stands "
    "(guided.tidy in turn.reply_modes.Guided)",
    "fulfilled": "a reply that stays though its update fulfils a move takes the move, and a call writes its "
    "message (guided.fulfilled_move in turn.reply_modes.Guided.settle)",
    "dry": "llama.cpp's DRY sampler on a local server (llm.litellm_client.GUIDED_SAMPLING)",
    "words": "everything read from the user's words at once: no values, flags, questions or tool arguments "
    "from them (guided_words.pool -> None in guided, guided_branches, guided_tools)",
}

_POOLS = (guided_words, guided, guided_branches, guided_tools)  # where pool is looked up
_READERS = (guided_branches, guided_tools)  # where from_words is looked up


def without(*families: str) -> contextlib.ExitStack:
    """A context manager in which the guided code runs with ``families`` (names of :data:`FAMILIES`) off; with none,
    nothing changes. An unknown name is a ``ValueError`` that names it."""
    unknown = [family for family in families if family not in FAMILIES]
    if unknown:
        raise ValueError(f"without: no family {', '.join(map(repr, unknown))}; the families: {', '.join(FAMILIES)}")
    stack = contextlib.ExitStack()
    try:
        for family in dict.fromkeys(families):
            _OFF[family](stack)
    except BaseException:
        stack.close()
        raise
    return stack


def listing() -> str:
    """:data:`FAMILIES`, a line each."""
    width = max(map(len, FAMILIES))
    return "\n".join(f"{name:<{width}}  {line}" for name, line in FAMILIES.items())


def _set(stack: contextlib.ExitStack, name: str, value: Any, *modules: Any) -> None:
    for module in modules:
        stack.enter_context(mock.patch.object(module, name, value))


def _wrap(stack: contextlib.ExitStack, name: str, make: Callable[[Any], Any], *modules: Any) -> None:
    """``name`` in each of ``modules`` replaced by ``make`` of what it is there now (so that patches nest)."""
    for module in modules:
        stack.enter_context(mock.patch.object(module, name, make(getattr(module, name))))


def _said(edit: Callable[[Said], Said]) -> Callable[[contextlib.ExitStack], None]:
    """A family that is a change to what ``pool`` returns."""

    def make(original: Callable[..., Said | None]) -> Callable[..., Said | None]:
        def pool(text: str | None, results: Iterable[Any] = (), language: str | None = None) -> Said | None:
            said = original(text, results, language)
            return None if said is None else edit(said)

        return pool

    return lambda stack: _wrap(stack, "pool", make, *_POOLS)


def _passing(left: Callable[[dict[str, Any]], bool]) -> Callable[[contextlib.ExitStack], None]:
    """A family that is ``from_words``' reading of some value schemas: those ``left`` picks stay as they are."""

    def make(original: Callable[..., dict[str, Any] | None]) -> Callable[..., dict[str, Any] | None]:
        def from_words(
            schema: dict[str, Any], said: Said, current: Any = None, keep: bool = False, asked: bool = True
        ) -> dict[str, Any] | None:
            if "anyOf" in schema and set(schema) == {"anyOf"}:  # as from_words takes its parts
                found = (from_words(part, said, current, keep, asked) for part in schema["anyOf"])
                parts = [part for part in found if part is not None]
                return None if not parts else parts[0] if len(parts) == 1 else {"anyOf": parts}
            return schema if left(schema) else original(schema, said, current, keep, asked)

        return from_words

    return lambda stack: _wrap(stack, "from_words", make, *_READERS)


def _free_text(schema: dict[str, Any]) -> bool:
    """Text of no form: a string (or a value nothing types) with no closed set, pattern or format."""
    kind = schema.get("type")
    text = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return text and not {"enum", "const", "pattern", "format"} & set(schema)


def _closed(schema: dict[str, Any]) -> bool:
    return "enum" in schema and "const" not in schema  # the part from_words narrows to the values named


def _no_dates(stack: contextlib.ExitStack) -> None:
    _set(stack, "dates", lambda text, today=None: [], guided_words)
    _set(stack, "days_said", lambda text, today=None: [], guided_words)
    _said(lambda said: said._replace(days=()))(stack)


def _no_numbers(stack: contextlib.ExitStack) -> None:
    # Said.counted and .digits stay as read: they say whether a number was said, which other rules ask
    _said(lambda said: said._replace(numbers=[]))(stack)
    _set(stack, "placed_numbers", lambda text, language=None: [], guided_branches)


def _no_codes(stack: contextlib.ExitStack) -> None:
    _set(stack, "_compacted", lambda texts: iter(()), guided_words)
    _set(stack, "_GROUPS", re.compile(r"(?!)"), guided_words)  # matches nothing: no digits in groups


def _no_yes_no(stack: contextlib.ExitStack) -> None:
    # no yes or no is read: a confirmation is the model's, and a sole question is answered as any flag (null is not
    # forced on words that say neither, which only the yes/no words can tell)
    def make(original: Callable[..., dict[str, Any] | None]) -> Callable[..., dict[str, Any] | None]:
        def flag(schema: dict[str, Any], said: Said, topic: Topic | None, sole: bool = False) -> dict[str, Any] | None:
            return original(schema, said._replace(yes=None), topic)

        return flag

    _wrap(stack, "flag", make, guided_branches)


def _no_corrections(stack: contextlib.ExitStack) -> None:
    def make(original: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
        def as_said(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:  # as guided_schema calls it, kept empty
            bound = inspect.signature(original).bind(*args, **kwargs)
            bound.arguments["kept"] = ()
            return original(*bound.args, **bound.kwargs)

        return as_said

    _wrap(stack, "as_said", make, guided)


def _no_named_values(stack: contextlib.ExitStack) -> None:
    _passing(_closed)(stack)
    _set(stack, "named_in", lambda value, texts: False, guided)


def _unchanged(schema: dict[str, Any], *_: Any) -> dict[str, Any]:
    return schema


_OFF: dict[str, Callable[[contextlib.ExitStack], None]] = {
    "spans": _passing(_free_text),
    "function_words": lambda stack: _set(stack, "_only", lambda span, words: False, guided_words),
    "questions": lambda stack: _set(stack, "stated", lambda text, language=None: text, guided_words),
    "dates": _no_dates,
    "times": lambda stack: _set(stack, "times", lambda text: [], guided_words),
    "numbers": _no_numbers,
    "no_number": lambda stack: _set(stack, "_counts", lambda schema: False, guided_branches),
    "codes": _no_codes,
    "flags": lambda stack: _set(stack, "flag", _unchanged, guided_branches),
    "yes_no": _no_yes_no,
    "named_values": _no_named_values,
    "key_names": lambda stack: _set(stack, "names", lambda key, words: False, guided_branches, guided_tools),
    "addresses": lambda stack: _set(stack, "_addresses", lambda text, branches: frozenset(), guided_branches),
    "corrections": _no_corrections,
    "tool_results": _said(lambda said: said._replace(told=())),
    "tool_form": lambda stack: _set(stack, "guided_arguments", _unchanged, reply_modes),
    "tool_waits": lambda stack: _set(stack, "awaiting_tools", lambda d, s, schema, c, p: schema, reply_modes),
    "openings": lambda stack: _set(stack, "not_opening_like", lambda earlier, limit: None, guided_entered),
    "loops": lambda stack: _set(stack, "tidy", lambda message: message, reply_modes),
    "fulfilled": lambda stack: _set(stack, "fulfilled_move", lambda *args: None, reply_modes),
    "dry": lambda stack: stack.enter_context(mock.patch.dict(litellm_client.GUIDED_SAMPLING, clear=True)),
    "words": lambda stack: _set(stack, "pool", lambda text, results=(), language=None: None, *_POOLS),
}

__all__ = ["FAMILIES", "listing", "without"]
