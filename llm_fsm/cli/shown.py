"""Text from a model, a user or a store, as the terminal shows it: as text, never as a control.

A model's reply, a remote user's message (sent through ``serve`` and read back with ``chat -c ID`` and
``/history``), a context value or an error quoting one could hold a terminal's control sequences: ``ESC[2J``
clears the screen, ``ESC]0;...BEL`` sets the window's title, a carriage return writes over the line, an 8-bit
C1 code (0x9b is CSI) does what its ESC form does, a bidi override (U+202E) shows the text after it backwards.
Every command that prints such text puts it through :func:`shown` (or the helpers built on it), the way the
web page inserts every text as text:

- each control character but a newline and a tab (C0, DEL, C1), each bidi embedding, override or isolate
  (U+202A-U+202E, U+2066-U+2069) and a lone surrogate (which UTF-8 cannot write) shows as its Python escape:
  ``\\x1b`` for ESC, ``\\r`` for a carriage return, ``\\x9b``, ``\\u202e``. A sequence's introducer shown so,
  the rest of the sequence (``[2J``, ``]0;title``) is plain characters, shown as they are: nothing is dropped,
  and what was sent can be read on the screen. A ``\\r\\n`` line end is a newline.
- rich markup in the text (``[bold]``, ``[link=...]``) prints as written: :func:`as_text` makes a rich
  ``Text`` (never read as markup), :func:`in_markup` escapes the text for a markup string around it.
- JSON output (``run``'s lines, ``conversations show``) stays JSON with the same values: :func:`json_text`
  writes those characters as ``\\u`` escapes, which a JSON reader decodes back (the others, C0 among them,
  ``json.dumps`` escapes itself).

Letters of any script, emoji (with their zero-width joiners and variation selectors) and other printable
characters are kept as they are.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.markup import escape
from rich.text import Text

# what json.dumps(ensure_ascii=False) leaves as it is that a terminal could act on: DEL and C1, the bidi
# embeddings, overrides and isolates (the Trojan Source characters), lone surrogates
_UNSAFE = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_IN_TERMINAL = re.compile(f"\r\n|[\x00-\x08\x0b-\x1f{_UNSAFE}]")  # C0 but the newline (\x0a) and the tab (\x09)
_IN_JSON = re.compile(f"[{_UNSAFE}]")


def _escape(match: re.Match[str]) -> str:
    character = match.group()
    if character == "\r\n":
        return "\n"
    if character == "\r":
        return "\\r"
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """``text`` (``str()`` of it) with each control character, bidi override and lone surrogate as a
    visible escape (``\\x1b``, ``\\r``, ``\\x9b``, ``\\u202e``); newlines and tabs kept."""
    return _IN_TERMINAL.sub(_escape, str(text))


def as_text(text: object, style: str = "") -> Text:
    """``text`` :func:`shown`, as a rich ``Text``: printed as written, never read as markup."""
    return Text(shown(text), style=style)


def in_markup(text: object) -> str:
    """``text`` :func:`shown` and escaped for a rich markup string (``[bold]`` in it prints as written)."""
    return escape(shown(text))


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON (non-ASCII letters kept), with the characters a terminal could act on written as
    ``\\u`` escapes: the same JSON value, safe to print."""
    written = json.dumps(value, ensure_ascii=False, default=str, indent=indent)
    return _IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", written)


def json_view(value: Any) -> Text:
    """``value`` as indented, highlighted JSON for the console (what rich's ``JSON`` shows, through
    :func:`json_text`: rich's own would write C1 codes and bidi overrides as they are)."""
    from rich.highlighter import JSONHighlighter

    text = JSONHighlighter()(Text(json_text(value, indent=2)))
    text.no_wrap = True
    text.overflow = None
    return text
