"""The design checks of context keys (see :mod:`llm_fsm.authoring.analysis` for each code): keys a transition needs
that nothing sets on the way, keys a state asks for but may not be written, ``writable_keys`` the runtime refuses
anyway, and keys collected that nothing uses."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator

from llm_fsm.authoring.review import Finding, Review, tool_keys, transition_loc
from llm_fsm.definition.condition_values import condition_keys
from llm_fsm.definition.models import FSMDefinition, State, Subflow, Transition
from llm_fsm.definition.reply_schema import EXTRA_KEY, model_writable_keys


def _root(key: str) -> str:
    return key.split(".", 1)[0]


_WORD = re.compile(r"(?<![\w.])\w+")  # a whole word, not after a dot (not the tail of a dotted path)


class Words:
    """What some texts mention: ``key in words`` when a text has the key as a whole word, not after a dot.

    Words are collected once; a key that is not a single word is looked for in the texts themselves.
    """

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = [text for text in texts if text]
        self.words = {match.group() for text in self.texts for match in _WORD.finditer(text)}

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if _word(key):
            return key in self.words
        pattern = re.compile(rf"(?<![\w.]){re.escape(key)}(?!\w)")
        return any(pattern.search(text) for text in self.texts)

    def among(self, words: set[str], others: Collection[str]) -> set[str]:
        """Which keys the texts mention, of ``words`` (single words) and ``others``."""
        return (self.words & words) | {key for key in others if key in self}


def _word(key: str) -> bool:
    return re.fullmatch(r"\w+", key) is not None


def _collected(state: State, words: set[str], others: Collection[str]) -> set[str]:
    """Which keys ``state`` asks the model for: those it requires or lists in ``writable_keys``, and of
    ``words`` (single words) and ``others``, those its instructions name."""
    texts = Words([state.instructions, state.extraction_instructions])
    listed = {_root(k) for k in (*state.required_context_keys, *(state.writable_keys or ()))}
    return listed | texts.among(words, others)


def keys_never_set(review: Review) -> Iterator[Finding]:
    """``key_never_set``: a key a live transition needs that no state on a path to it collects."""
    definition = review.definition
    by_code = {_root(k) for k in definition.code_only_keys}
    uses = {
        (sid, i): [
            (key, loc) for key, loc in _needed_keys(transition) if key not in by_code and not key.startswith("_")
        ]
        for sid, state in definition.states.items()
        if sid in review.reachable
        for i, transition in enumerate(state.transitions)
        if (sid, i) not in review.dead
    }
    needs: dict[str, set[str]] = {}
    for (sid, _), keys in uses.items():
        needs.setdefault(sid, set()).update(key for key, _ in keys)
    wanted = {key for keys in needs.values() for key in keys}
    words = {key for key in wanted if _word(key)}
    others = wanted - words
    collected = {
        sid: _collected(definition.states[sid], words, others)
        | tool_keys(definition, definition.states[sid])
        | set(_subflow(definition.states[sid]).output)  # a sub-conversation's results (llm_fsm.subflows)
        for sid in review.reachable
    }
    # A key is collected on a path to a state when a reachable state upstream (or the state) collects it.
    missing = review.missing_on_the_way(needs, collected)
    for (sid, i), keys in uses.items():
        target = definition.states[sid].transitions[i].target_state
        for key, loc in keys:
            if key in missing.get(sid, ()):
                yield Finding(
                    transition_loc(sid, i, loc),
                    "key_never_set",
                    f"the transition to '{target}' needs '{key}', but no state on a path to "
                    f"'{sid}' collects it and it is not a handler-only key",
                    f"add '{key}' to required_context_keys (or extraction_instructions) of '{sid}' or an earlier "
                    "state, or to handler_only_keys if code sets it",
                )


def keys_not_writable(definition: FSMDefinition) -> Iterator[Finding]:
    """Keys a state asks the model to collect that the model may not write there: never collected."""
    by_code = set(definition.handler_only_keys)
    for sid, state in definition.states.items():
        writable = model_writable_keys(definition, sid)
        for k, key in enumerate(state.required_context_keys):
            why, hint = _why_not_writable(key, by_code, writable if state.writable_keys is not None else None)
            if why:
                yield Finding(
                    ("states", sid, "required_context_keys", k),
                    "key_not_writable",
                    f"state '{sid}' asks the model to collect '{key}', but {why}: it is never collected here",
                    hint.format(key=key, sid=sid),
                )


def _why_not_writable(key: str, by_code: Collection[str], writable: Collection[str] | None) -> tuple[str, str]:
    """Why the model may not write ``key`` (and what to do), or ``("", "")`` when it may."""
    if key.startswith("_") and _root(key) != EXTRA_KEY:
        return (
            "keys starting with '_' are the runtime's",
            "rename it without the leading '_' (only '_extra' is the model's)",
        )
    if key in by_code or _root(key) in by_code:
        return (
            "it is a handler-only key (handler_only_keys)",
            "remove '{key}' from required_context_keys if code sets it, or from handler_only_keys if the model may",
        )
    if writable is not None and _root(key) not in writable:
        return (
            "the state's writable_keys leave it out",
            "add '{key}' to writable_keys of '{sid}', or remove it from required_context_keys",
        )
    return "", ""


def writable_keys_refused(definition: FSMDefinition) -> Iterator[Finding]:
    """Keys listed in a state's ``writable_keys`` that the runtime refuses anyway: a contradiction."""
    by_code = set(definition.handler_only_keys)
    for sid, state in definition.states.items():
        for k, key in enumerate(state.writable_keys or ()):
            if key.startswith("_") and key != EXTRA_KEY:
                why = "keys starting with '_' are the runtime's"
                hint = (
                    "rename it without the leading '_' (only '_extra' is the model's), or remove it from writable_keys"
                )
            elif key in by_code:
                why = "it is also in handler_only_keys, which wins"
                hint = (
                    "remove it from handler_only_keys if the model may write it, or from writable_keys if only code may"
                )
            else:
                continue
            yield Finding(
                ("states", sid, "writable_keys", k),
                "writable_key_refused",
                f"writable_keys of '{sid}' lists '{key}', but {why}: the model's writes to it are refused",
                hint,
            )


def _needed_keys(transition: Transition) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """Each root key the transition's conditions need, once, with the location of its first use."""
    seen: set[str] = set()
    for j, condition in enumerate(transition.conditions):
        for k, key in enumerate(condition.requires_context_keys):
            if _root(key) not in seen:
                seen.add(_root(key))
                yield _root(key), ("conditions", j, "requires_context_keys", k)
        for key in condition_keys(condition):
            if _root(key) not in seen:
                seen.add(_root(key))
                yield _root(key), ("conditions", j, "logic")


def _subflow(state: State) -> Subflow:
    """The state's subflow, or an empty one (no keys in or out)."""
    return state.subflow or Subflow(definition="")


def keys_unused(definition: FSMDefinition) -> Iterator[Finding]:
    """Collected keys that no condition reads and no instruction refers to (collecting one is not using it)."""
    read = {
        _root(key)
        for transitions in (*(state.transitions for state in definition.states.values()), definition.global_transitions)
        for transition in transitions
        for condition in transition.conditions
        for key in condition_keys(condition)
    } | {_root(key) for state in definition.states.values() for key in _subflow(state).input.values()}
    mentioned = Words(
        text
        for state in definition.states.values()
        for text in (state.purpose, state.instructions, state.response_instructions)
    )
    for sid, state in definition.states.items():
        for k, key in enumerate(state.required_context_keys):
            if _root(key) not in read and _root(key) not in mentioned:
                yield Finding(
                    ("states", sid, "required_context_keys", k),
                    "key_unused",
                    f"state '{sid}' collects '{key}', but no condition reads it and no instruction refers to it",
                    "fine if your code uses it; otherwise check it in a condition, refer to it, or stop collecting it",
                )
