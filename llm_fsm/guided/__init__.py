"""Guided mode: what helps a small model held to a grammar, behind one seam.

The turn meets guided mode in one place, its reply mode (:class:`llm_fsm.turn.reply_modes.Guided`), which imports
it only from here, never one of its modules (``tests/test_layout.py`` holds them to it):

- building a request: the reply schema made for the turn (:func:`guided_schema`), the working memory's slots as
  the user's words fill them (:func:`guided_memory`), a tool call's arguments (:func:`guided_arguments`), the
  reply that waits on a tool the turn still offers (:func:`awaiting_tools`), the call that writes the message of
  the state a reply was moved to (:func:`entered_schema`), patterns as grammar-driven servers read them
  (:func:`portable_patterns`);
- judging a reply: the move a staying reply's update fulfils (:func:`fulfilled_move`), a message that loops
  cut to its first sentences (:func:`tidy`, :data:`LOOP_WORDS`).

What the definition says a key holds (the type its conditions compare it as, closed sets, shapes of text) is read
in :mod:`llm_fsm.definition.key_values`, which the plain strict schema reads too.

Inside: ``schema`` builds the turn's schema from ``conditions``, ``values`` and ``clearing`` (what the
definition says about keys and moves), ``branches`` and ``words`` (what the user's words offer; ``dates``,
``numbers``), ``entered`` and ``tools`` (moved replies, tool forms), ``patterns`` (regular expressions).
"""

from llm_fsm.guided.branches import guided_memory
from llm_fsm.guided.entered import entered_schema, fulfilled_move
from llm_fsm.guided.schema import LOOP_WORDS, guided_schema, portable_patterns, tidy
from llm_fsm.guided.tools import awaiting_tools, guided_arguments

__all__ = [
    "LOOP_WORDS",
    "awaiting_tools",
    "entered_schema",
    "fulfilled_move",
    "guided_arguments",
    "guided_memory",
    "guided_schema",
    "portable_patterns",
    "tidy",
]
