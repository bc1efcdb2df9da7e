"""How ``llm-fsm chat`` marks a workflow's steps: a line before each turn of a state that acts on its own
(``[research acts]``, then the spinner while the model works), and a line for each automatic move
(``→ write (automatic)``, which takes no model call). Read-only, as :mod:`llm_fsm.cli.chat_views`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_fsm.cli.chat_views import console
from llm_fsm.cli.shown import as_text

if TYPE_CHECKING:  # loaded when a chat starts (see llm_fsm.cli)
    from llm_fsm.conversation import Conversation
    from llm_fsm.turn.runner import TurnResult


def acts_first(conversation: Conversation) -> bool:
    """Whether a new conversation's first turn is a state's that acts on its own: it takes a task, not a reply."""
    return conversation.status == "new" and conversation.definition.states[conversation.state].acts


def goes_on(conversation: Conversation) -> bool:
    """Whether the conversation has steps to take on its own now: a run that stopped before its end (its
    process killed, a step that failed, ``max_run_steps``); False where its state waits for a person."""
    from llm_fsm.running import next_step

    return next_step(conversation) is not None


def announce_first(conversation: Conversation, opens: bool) -> None:
    """The marker of a run's first step, where it is an acting state's turn: the one the caller's message, resume
    or a new conversation's opening starts (``opens``), else the next of the steps left."""
    if opens or conversation.status == "new":
        if conversation.definition.states[conversation.state].acts:
            _acts(conversation.state)
        return
    announce_next(conversation)


def announce_next(conversation: Conversation) -> bool:
    """The marker of the step the run takes next, where it is an acting state's turn; whether a step follows."""
    from llm_fsm.running import next_step

    step = next_step(conversation)
    if step == "act":
        _acts(conversation.state)
    return step is not None


def show_step_kind(result: TurnResult, announced: bool) -> None:
    """The line that marks a step as what it was: an automatic move; an acting state's turn, unless ``announced``
    (its marker came before it, as it started). A person's turn has none."""
    if result.step == "automatic":
        console.print(as_text(f"→ {result.state} (automatic)", style="dim"))
    elif result.step == "act" and not announced:
        _acts(result.previous_state or result.state)


def _acts(state: str) -> None:
    console.print(as_text(f"[{state} acts]", style="bold magenta"))
