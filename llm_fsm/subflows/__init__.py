"""Sub-conversations: a state that runs another definition, then returns with its results.

This package: :mod:`~llm_fsm.definition.subflows` loads and checks them (with the definition that
declares them); :mod:`~llm_fsm.subflows.stack` says where a conversation is in its stack and runs the
turns that push, run in the innermost and pop them.

A state declares ``"subflow": {"definition": "identity_check.json", "input": {...}, "output": {...}}``:

- ``definition``: a path relative to the declaring file, or a bare name (``identity_check`` means
  ``identity_check.json`` in the same folder). The loader loads it with the declaring definition and
  attaches it (:attr:`FSMDefinition.subflow_definitions`); a definition built in code attaches its own
  with :func:`attach`.
- ``input``: *its key → our key* (ours may be a dotted path): the sub-conversation's initial context,
  read from ours when it starts (keys we do not have are left out; provenance ``parent:<our name>``).
- ``output``: *our key → its key* (its may be dotted): written into our context when it ends
  (provenance ``subflow:<its name>``); a key it does not have is left alone.

How it runs (the runtime decides; no extra model call):

- **Push.** When a turn ends in a subflow state (a move into it, or the initial state at construction),
  the sub-conversation is pushed onto ``Snapshot.stack``. The message the user sees is the one of the
  turn that moved there; the sub-definition's turns start with the user's next message (its own
  prompts, history and bounds; no opening written by the model, which would be a second model call in
  the turn). When its initial state has its own ``opening`` (no model call), that opening turn runs at
  once (``start`` handlers, the opening): the user sees the move's message, a blank line, the opening
  (``StackTurn.open_pushed``). A conversation whose initial state runs a subflow opens with the
  sub-definition's opening (its initial state's own ``opening`` when it has one: no model call;
  ``input`` may pass the keys that opening reads). An opening that fails names the sub-definition's state
  and the key of ours its ``input`` reads the missing key from.
- **Turns.** While the stack is not empty, every turn (send, stream, resume) runs in the innermost
  sub-conversation. Its exchange is also added to the history of each level below it, so a parent's
  prompt, once it talks again, knows what was said.
- **Pop.** When a sub-conversation's turn ends in one of its terminal states, its ``output`` is
  written into our context, it is popped, and our state moves along its first transition, by priority,
  whose conditions hold on the merged context (``validate`` requires a transition without conditions,
  so one always does): the handlers of that move run as for any move (a ``Break`` pauses as usual). The
  user sees the sub-definition's terminal message. A move back to the state itself runs the
  sub-definition again; a move into another subflow state pushes that one; a move into our own terminal
  state ends us, which may pop the level below in turn.
- **Moves from anywhere.** A sub-conversation's turn also offers the global transitions of the levels
  below it that apply where they are (judged there); its own states shadow theirs by name. Taking one
  drops the sub-conversations above that level (no ``output``) and moves it, handlers and all.
- **Pauses.** A ``Break`` or a tool approval inside a sub-conversation pauses the whole conversation:
  the root snapshot is ``paused`` with the same pending event, and ``resume`` with its token continues
  the sub-conversation, exactly once (the token is also spent in the root).
- **Bounds.** At most :data:`MAX_DEPTH` sub-conversations deep; a definition that runs itself, directly
  or through others, does not load.

``Conversation.state`` and ``TurnResult.state`` stay the root definition's; ``TurnResult.frames`` and
``Conversation.frames`` say where in the stack the conversation is, and ``TurnResult.ran_in`` which
definition and state the turn ran in.

Left out on purpose: a ``Break`` on entering a subflow state (``state_enter``) pauses before the push;
its resume is an ordinary turn of that state, whose model may move on without the sub-conversation.
"""

from __future__ import annotations

from typing import Any

from llm_fsm.definition.subflows import (
    MAX_DEPTH,
    attach,
    has_subflows,
    known_keys,
    resolve,
    tree,
    unattached,
)

# The running side imports the turn (and with it the prompt's Jinja): loaded on first use, so that
# loading a definition (llm_fsm.definition.loader imports the definition side) stays cheap.
_STACK = (
    "StackTurn", "breadcrumb", "changed_subflows", "check_restore", "entered", "frames", "innermost", "levels",
    "offering", "outer_moves",
)  # fmt: skip

__all__ = ["MAX_DEPTH", "attach", "has_subflows", "known_keys", "resolve", "tree", "unattached", *_STACK]


def __getattr__(name: str) -> Any:
    if name in _STACK:
        from llm_fsm.subflows import stack

        return getattr(stack, name)
    raise AttributeError(f"module 'llm_fsm.subflows' has no attribute '{name}'")
