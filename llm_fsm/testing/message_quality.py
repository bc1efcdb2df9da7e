"""Whether a model's messages are ones a person can use: the scorecard counts the messages that are not.

A small model that reaches the right state can still write messages nobody wants to read: the same
message again, word for word; a phrase said over and over ("I'm a simple AI. I'm a simple AI. ..."); or
a passage copied from its prompt (the runtime's rules, the persona, the transitions). Each count is per
conversation: a message is **repeated** when it says what an earlier message of the same conversation said
(compared without case, punctuation or spacing), **looping** when one run of words comes three times in a
row or more, and **copied** when it holds a run of ``COPIED_WORDS`` words of its prompt that are not words
the definition gives the model to say: a state's description, purpose and instructions (a quiz's
questions are there), its opening and its example dialogue do not count. A message is **echoed** when it
mostly says the user's own message back: at least ``ECHOED_SHARE`` of its words (and ``ECHO_RUN`` of them or
more) lie in runs of ``ECHO_RUN`` words copied from what the user said that turn ("nen zettel im briefkasten,
die nummer is pf 4471 9902 de"); a read-back that quotes a name or a date among its own words is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from llm_fsm.definition import FSMDefinition
from llm_fsm.guided import LOOP_WORDS

COPIED_WORDS = 8  # a run this long, word for word, is a copy and not a coincidence
ECHO_RUN = 4  # words in a row, taken from the user's message
ECHOED_SHARE = 0.75  # of the message's words in such runs: the user's message said back
_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def prose_runs(definition: FSMDefinition, size: int = COPIED_WORDS) -> frozenset[tuple[str, ...]]:
    """Every run of ``size`` words in the prompts of the definition's states that the definition does not
    give the model to say (see the module's description)."""
    from llm_fsm.engine import initial_snapshot
    from llm_fsm.prompt import PromptBuilder

    builder, prompts, sayable = PromptBuilder(), [], []
    for state in definition.states.values():
        prompts.append(builder.system_prompt(definition, initial_snapshot(definition, state.id, {})))
        sayable += [state.description, state.purpose, state.instructions, state.opening or ""]
        sayable += [line.content for line in state.example_dialogue]
    said = {run for text in sayable for run in _runs(words(text), size)}
    return frozenset(run for text in prompts for run in _runs(words(text), size) if run not in said)


def _runs(sequence: Sequence[str], size: int) -> Iterable[tuple[str, ...]]:
    return (tuple(sequence[i : i + size]) for i in range(len(sequence) - size + 1))


def loops(text: str, times: int = 3) -> bool:
    """Whether a run of one to ``LOOP_WORDS`` words comes ``times`` times in a row (a model that lost its way)."""
    said = words(text)
    for size in range(1, LOOP_WORDS + 1):
        for start in range(len(said) - size * times + 1):
            run = said[start : start + size]
            if all(said[start + k * size : start + (k + 1) * size] == run for k in range(1, times)):
                return True
    return False


def echoes(message: str, user: str) -> bool:
    """Whether ``message`` mostly says ``user`` (the user's message of its turn) back (see the module's description)."""
    said, heard = words(message), words(user)
    runs = set(_runs(heard, ECHO_RUN))
    inside = [False] * len(said)
    for start, run in enumerate(_runs(said, ECHO_RUN)):
        if run in runs:
            inside[start : start + ECHO_RUN] = [True] * ECHO_RUN
    return sum(inside) >= max(ECHO_RUN, ECHOED_SHARE * len(said))


def counts(
    messages: Sequence[str], prose: frozenset[tuple[str, ...]], users: Sequence[str | None] = ()
) -> dict[str, int]:
    """The conversation's messages that repeat an earlier one, loop, copy the prompt's prose, or echo the
    user's message of their turn (``users``: beside ``messages``, None where the user said nothing)."""
    seen: set[tuple[str, ...]] = set()
    repeated = looping = copied = echoed = 0
    for index, message in enumerate(messages):
        said = tuple(words(message))
        if not said:
            continue
        repeated += said in seen
        seen.add(said)
        looping += loops(message)
        copied += any(run in prose for run in _runs(said, COPIED_WORDS))
        user = users[index] if index < len(users) else None
        echoed += bool(user) and echoes(message, user or "")
    return {
        "repeated_messages": repeated, "looping_messages": looping, "copied_messages": copied,
        "echoed_messages": echoed,
    }  # fmt: skip
