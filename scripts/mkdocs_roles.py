"""A MkDocs hook (mkdocs.yml: ``hooks``): the docstrings' Sphinx roles read as plain code in the API reference.

The docstrings cross-reference with Sphinx roles (``:class:`Hooks```, ``:meth:`~llm_fsm.Conversation.send```),
which mkdocstrings renders as the role's name followed by the code: ":class:Hooks". This drops the role and,
as Sphinx does for a ``~`` target, shows only the last part of the dotted name.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
