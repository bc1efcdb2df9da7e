"""Bearer tokens: who may call the API, and whose conversations a caller sees.

Tokens come from a file (``--tokens-file``) or an environment variable (``LLM_FSM_SERVER_TOKENS``).
An entry is ``NAME:TOKEN`` (a named client) or a bare ``TOKEN`` (named after a hash of it); in a file,
one entry per line, blank lines and ``#`` comments skipped; in the variable, entries separated by
commas or white space. A token is at least 16 characters.

Each conversation belongs to the client that created it: it is stored under ``CLIENT@ID``, so another
client asking for it finds nothing (404, not 403: its existence is not revealed). The terminal commands
find ``CLIENT@ID`` from the bare ``ID`` (:func:`llm_fsm.store.clients.resolve`). With one token,
every caller holding it shares the conversations; with none, the server answers anyone who can reach
it, which is why ``llm-fsm serve`` then listens on the loopback interface only.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from llm_fsm.named_files import read_bytes

TOKENS_VARIABLE = "LLM_FSM_SERVER_TOKENS"
ANONYMOUS = "local"  # the client of a server without tokens
MIN_LENGTH = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # no "@": it ends the client's part of CLIENT@ID


class TokenError(ValueError):
    """A token entry cannot be used; the message names where it is and why."""


def parse_tokens(entries: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{token: client name}`` from ``(where, entry)`` pairs; :class:`TokenError` naming a bad entry."""
    tokens: dict[str, str] = {}
    for where, entry in entries:
        name, colon, token = entry.partition(":")
        if not colon:
            name, token = "token-" + hashlib.sha256(entry.encode()).hexdigest()[:12], entry
        elif not _NAME.match(name) or ".." in name:
            raise TokenError(f"{where}: client name {name!r} must be 1-64 letters, digits, _ . - (no spaces, no '..')")
        if len(token) < MIN_LENGTH:
            raise TokenError(f"{where}: the token of {name!r} is shorter than {MIN_LENGTH} characters")
        if token in tokens:
            raise TokenError(f"{where}: this token is given twice")
        if name in tokens.values():
            raise TokenError(f"{where}: client name {name!r} is given twice")
        tokens[token] = name
    return tokens


def tokens_from_file(path: str | Path) -> dict[str, str]:
    """The tokens of a file, one entry per line; :class:`TokenError` if it cannot be read or holds a bad entry."""
    try:
        text = read_bytes(path, "tokens file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read the tokens file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    lines = ((f"{path}:{n}", line.strip()) for n, line in enumerate(text.splitlines(), 1))
    tokens = parse_tokens((where, line) for where, line in lines if line and not line.startswith("#"))
    if not tokens:
        raise TokenError(f"the tokens file {path} holds no token")
    return tokens


def tokens_from_text(text: str, where: str = TOKENS_VARIABLE) -> dict[str, str]:
    """The tokens of an environment variable's value (entries separated by commas or white space)."""
    entries = [entry for entry in re.split(r"[,\s]+", text) if entry]
    return parse_tokens((f"{where} entry {n}", entry) for n, entry in enumerate(entries, 1))


def client_of(header: str | None, tokens: Mapping[str, str] | None) -> str | None:
    """The client an ``Authorization`` header names; None when it names none. No tokens: everyone is anonymous."""
    if not tokens:
        return ANONYMOUS
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    given = given.strip()
    found = None
    for token, name in tokens.items():  # every token is compared, in constant time each
        if hmac.compare_digest(token.encode(), given.encode()):
            found = name
    return found
