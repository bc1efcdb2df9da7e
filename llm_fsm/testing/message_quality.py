"""Whether a model's messages are ones a person can use: the scorecard counts the messages that are not.

A small model that reaches the right state can still write messages nobody wants to read: the same
message again, word for word; a phrase said over and over ("I'm a simple AI. I'm a simple AI. ..."); or
a passage copied from its prompt (the runtime's rules, the persona, the transitions). Each count is per
conversation: a message is **repeated** when it says what an earlier message of the same conversation said
(compared without case, punctuation or spacing), **looping** when one run of words comes three times in a
row or more, and **copied** when it holds a run of ``COPIED_WORDS`` words of its prompt that are not words
the definition gives the model to say: a state's description, purpose and instructions (a quiz's
questions are there), its opening and its example dialogue do not count. A message is **echoed** when it
says the user's message of its turn back: two words or more, fewer than one in ten of them its own (words the
user did not say): "nen zettel im briefkasten, die nummer is pf 4471 9902 de" again, or "Yes, book it!" for
"yes, book it". A read-back with a word of its own ("PF 4471 9902 DE, correct?") is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.guided import LOOP_WORDS

COPIED_WORDS = 8  # a run this long, word for word, is a copy and not a coincidence
KINDS = ("repeated", "looping", "copied", "echoed")  # what makes a message one a person could not use
ECHO_WORDS = 2  # a shorter message ("Sydney?" for "Sydney?") says too little to tell
_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def prose_runs(definition: FSMDefinition, size: int = COPIED_WORDS) -> frozenset[tuple[str, ...]]:
    """Every run of ``size`` words in the prompts of the definition's states that the definition does not
    give the model to say (see the module's description)."""
    from llm_fsm.turn.engine import initial_snapshot
    from llm_fsm.turn.prompt import PromptBuilder

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
    """Whether ``message`` says ``user`` (the user's message of its turn) back (see the module's description)."""
    said, heard = words(message), set(words(user))
    own = sum(word not in heard for word in said)
    return len(said) >= ECHO_WORDS and own * 10 < len(said)


def judged(
    messages: Sequence[str], prose: frozenset[tuple[str, ...]], users: Sequence[str | None] = ()
) -> list[list[str]]:
    """Of each message, what makes it one a person could not use: "repeated", "looping", "copied", "echoed"
    (``users``: the user's message of each one's turn, None where the user said nothing)."""
    seen: set[tuple[str, ...]] = set()
    found: list[list[str]] = []
    for index, message in enumerate(messages):
        said, kinds = tuple(words(message)), []
        if said:
            user = users[index] if index < len(users) else None
            checks = {
                "repeated": said in seen, "looping": loops(message),
                "copied": any(run in prose for run in _runs(said, COPIED_WORDS)),
                "echoed": bool(user) and echoes(message, user or ""),
            }  # fmt: skip
            kinds = [kind for kind, bad in checks.items() if bad]
            seen.add(said)
        found.append(kinds)
    return found


def counts(
    messages: Sequence[str], prose: frozenset[tuple[str, ...]], users: Sequence[str | None] = ()
) -> dict[str, int]:
    """How many of the conversation's messages repeat an earlier one, loop, copy the prompt's prose, or echo the
    user's message of their turn (see :func:`judged`)."""
    return tally(judged(messages, prose, users))


def tally(found: Sequence[Sequence[str]]) -> dict[str, int]:
    """The messages of each kind, of :func:`judged`'s answer: ``{"repeated_messages": 1, ...}``."""
    return {f"{kind}_messages": sum(kind in kinds for kinds in found) for kind in KINDS}
