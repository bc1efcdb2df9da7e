"""Automatic moves: a transition with ``"automatic": true`` is taken by the runtime itself, with no model call, as
soon as its conditions hold on the context (one with no conditions always holds).

They are looked for where the context or the state may have just changed: after a step of a run (a person's turn,
an acting state's turn, another automatic move: so on entering a state, and after a handler wrote a key), and
inside a turn after a round of tools wrote their results, once the state has its ``required_context_keys`` (else
the model reads the results and writes them first). The first that holds, by priority (the state's own and
the global ones, as :meth:`~llm_fsm.definition.models.FSMDefinition.moves` orders them), is taken.

A move taken this way says nothing, and records no exchange unless the turn it ends had a person's words; where it
enters a state that waits for
a person and has an ``opening``, that opening, written over the context, is what the person reads. The handlers
around a move run as for any move (:func:`llm_fsm.turn.outcomes.accept`).
"""

from __future__ import annotations

from llm_fsm.definition.clearing import cleared
from llm_fsm.definition.conditions import unmet_condition
from llm_fsm.definition.models import FSMDefinition, Transition
from llm_fsm.definition.opening import render_opening
from llm_fsm.logic.rules import has_key
from llm_fsm.snapshot import Snapshot
from llm_fsm.turn.engine import Decision, apply_delta
from llm_fsm.turn.outcomes import Outcome, accept
from llm_fsm.turn.working import Working


def automatic_move(definition: FSMDefinition, snapshot: Snapshot) -> Transition | None:
    """The automatic move to take from the snapshot's state on its context (``"$return"`` resolved), or None."""
    state = definition.states[snapshot.state]
    if state.terminal or not definition.automatic_in(snapshot.state):
        return None
    back_to = definition.return_target(snapshot.state, snapshot.came_from)
    for move in definition.moves(snapshot.state, back_to):
        if move.automatic and move.target_state != snapshot.state and unmet_condition(move, snapshot.context) is None:
            return move
    return None


def after_tools(work: Working) -> Transition | None:
    """The automatic move a round of tools fulfilled, if the state has its keys (``required_context_keys``): a
    state whose model still has keys to write reads the results first (its turn ends as it proposes, and the
    move is looked for again after it)."""
    definition, snapshot = work.definition, work.snapshot()
    if not all(has_key(snapshot.context, key) for key in definition.states[snapshot.state].required_context_keys):
        return None
    return automatic_move(definition, snapshot)


def take(work: Working, move: Transition) -> Outcome:
    """Commit ``move`` on the turn's working context (its ``clear_keys`` removed), with the handlers around it."""
    removals = cleared(move, work.context, {})
    context = apply_delta(work.context, removals) if removals else work.context
    target = work.definition.states[move.target_state]
    message = ""
    if target.opening is not None and not target.acts and not target.terminal:
        message = render_opening(target.opening, context, state=target.id)
    # a step of its own that says nothing records nothing; a turn that made calls (its tools fulfilled the move)
    # is an exchange, so that the next turn's tool calls get idempotency keys of their own (they count turns)
    work.exchange = bool(message) or work.step != "automatic"
    decision = Decision(True, target.id, context, dict(removals), (), tuple(removals))
    return (yield from accept(work, decision, message))
