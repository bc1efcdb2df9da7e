"""A message written elsewhere (a person who took over, another system, a dataset's own turn), recorded as the
assistant's turn of the history: :meth:`Conversation.record <llm_fsm.Conversation.record>` calls
:func:`recorded`, which gives the snapshot after it. No model is called and no handler runs.

- **Append** (``replace=False``): an exchange with no user words, ``Exchange(user=None, assistant=message,
  state=<the state>)``, as if the assistant wrote to the user unprompted. On a conversation not started yet it
  is the opening: the status becomes ``active`` (``ended`` in a terminal state), ``start()`` is then refused as
  after any opening, and the state's ``start`` handlers never run (nor is its own ``opening`` said).
- **Replace** (``replace=True``): ``message`` is written over the reply of the last exchange (the reply a
  person sent instead of the model's); its user words and state stay. A conversation with no exchange yet has
  nothing to write over: :class:`~llm_fsm.errors.ConversationError`.
- **Status.** Allowed whatever the status: new (above), active, ended (the state and status stay), paused (the
  pause and its token stay; a replace writes over the pause's message), except an append while a tool call
  waits for a person's approval (:class:`~llm_fsm.errors.ConversationPaused`): the resume goes on from the
  exchange of the turn that asked for the call, which must stay the last.
- **Counts.** Not a turn: ``Snapshot.turns`` stays (it counts the turns a model or a resume ran), so the next
  turn's ``TurnResult.turn`` is one more than the last turn's; the context, its provenance and the working
  memory are left as they are.
- **Sub-conversations.** An append goes into the history of the level that talks and of every level below it,
  as a turn's exchange does (:mod:`llm_fsm.subflows`); a replace writes over the last exchange of each level
  that heard it (a sub-conversation pushed by that turn keeps its own opening).
- **Summaries.** A recorded exchange is one of the history's: after an append, what the running summary's
  triggers make due is marked (:func:`~llm_fsm.memory.summaries.mark_due`, at the level that talks), and
  the summary call is made where it would be after a turn's (the next turn, or ``summarize_pending()``).
- **The text** is checked as a user's message is: a ``str`` (``TypeError``) that shows something
  (:class:`~llm_fsm.errors.EmptyMessageError` for an empty or blank one); a lone surrogate becomes U+FFFD.
"""

from __future__ import annotations

from llm_fsm.definition.models import FSMDefinition
from llm_fsm.errors import ConversationError, ConversationPaused, EmptyMessageError
from llm_fsm.memory import summaries
from llm_fsm.snapshot import Exchange, Snapshot
from llm_fsm.subflows.stack import levels
from llm_fsm.turn.refusals import blankness
from llm_fsm.turn.steps import TurnSettings
from llm_fsm.values import clean_text

__all__ = ["checked_message", "recorded"]


def checked_message(message: object, replace: object = False) -> str:
    """``message`` as it is recorded; ``TypeError`` or :class:`EmptyMessageError` naming the argument at fault."""
    if not isinstance(message, str):
        raise TypeError(f"record(): message must be a str, not {type(message).__name__} ({message!r:.40})")
    if not isinstance(replace, bool):
        raise TypeError(f"record(): replace must be True or False, not {replace!r:.40}")
    what = blankness(message)
    if what is not None:
        raise EmptyMessageError(f"record(): message is {what}: there is nothing to record")
    return clean_text(message)  # a lone surrogate could never be saved


def recorded(
    definition: FSMDefinition, snapshot: Snapshot, message: str, *, replace: bool, settings: TurnSettings
) -> Snapshot:
    """``snapshot`` with ``message`` recorded as the assistant's (see the module's rules); ``settings``: the
    conversation's (its prompt's history window is what the summaries' triggers count from)."""
    text = checked_message(message, replace)
    if replace:
        return _written_over(snapshot, text)
    pending = snapshot.pending
    if pending is not None and pending.kind == "tool_approval":
        tool = pending.payload.get("tool") or (pending.tool_call or {}).get("name") or "?"
        raise ConversationPaused(
            f"record(): a call of the tool '{tool}' waits for a person's approval: resume the conversation first "
            "(a replace may write over the message that asks for it)",
            state=snapshot.state,
        )
    defs = levels(definition, snapshot)
    heard = [_appended(sub, level, text) for sub, level in zip(defs, _levels(snapshot), strict=True)]
    window = settings.prompt.settings.history_window
    heard[-1] = summaries.mark_due(defs[-1], heard[-1], window)  # at the level that talks, as after its turn
    return _restacked(heard)


def _levels(snapshot: Snapshot) -> list[Snapshot]:
    """The root's snapshot and each sub-conversation's, the one that talks last."""
    return [snapshot, *(frame.snapshot for frame in snapshot.stack)]


def _appended(definition: FSMDefinition, level: Snapshot, text: str) -> Snapshot:
    exchange = Exchange(user=None, assistant=text, state=level.state)
    update: dict[str, object] = {"history": (*level.history, exchange)}
    if level.status == "new":  # the opening: started, as a turn that opens it would leave it (engine.commit)
        update["status"] = "ended" if definition.states[level.state].terminal else "active"
    return level.model_copy(update=update)


def _written_over(snapshot: Snapshot, text: str) -> Snapshot:
    if not snapshot.history:
        raise ConversationError(
            "record(replace=True) writes over the reply of the last exchange, and the conversation has none yet: "
            "record the message without replace (it is then the opening)",
            state=snapshot.state,
        )
    last = snapshot.history[-1]
    said = (last.user, last.assistant)

    def over(level: Snapshot) -> Snapshot:
        # a level heard the last exchange when its own last one says the same; one pushed since did not
        if not level.history or (level.history[-1].user, level.history[-1].assistant) != said:
            return level
        exchange = level.history[-1].model_copy(update={"assistant": text})
        return level.model_copy(update={"history": (*level.history[:-1], exchange)})

    return _restacked([over(level) for level in _levels(snapshot)])


def _restacked(snaps: list[Snapshot]) -> Snapshot:
    """The root (``snaps[0]``) holding the other levels as its stack's snapshots."""
    root = snaps[0]
    if not root.stack:
        return root
    frames = tuple(f.model_copy(update={"snapshot": s}) for f, s in zip(root.stack, snaps[1:], strict=True))
    return root.model_copy(update={"stack": frames})
