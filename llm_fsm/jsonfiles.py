"""The JSON files people name: read one with a one-line reason when it cannot be used, tell what
kind of file a document is, and write files that hold conversations so only their owner can read them.

:func:`read_json` raises :class:`JSONFileError`, which each caller turns into its own error
(``LLMError`` for a cassette, ``DefinitionError`` for a test file...), so every public entry point
raises the library's errors. :func:`not_a` words a document of the wrong kind, naming what it is
when that can be told: ``s.json is a definition, not a cassette``. :func:`write_private` writes
atomically, the file 0600 and the folders it creates 0700: saved conversations and cassettes hold
what users said (the stores make their folders and files so too: :func:`private_folders`, :func:`private_file`).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_fsm.named_files import read_bytes

_SQLITE = b"SQLite format 3\x00"  # the first bytes of every SQLite database

# What a document looks like, by the top-level keys only its kind has: (the kind, how a message
# names it, the test). The first match wins: a definition with stray fields is still a definition.
_KINDS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("definition", "a definition", lambda d: _has(d, "states") or _has(d, "initial_state")),
    ("cassette", "a cassette (recorded model calls)", lambda d: _has(d, "interactions")),
    ("test file", "a test file (cases to run with llm-fsm test)", lambda d: _has(d, "cases")),
    ("saved conversation", "a saved conversation (a snapshot)", lambda d: _has(d, "definition_hash", "state")),
    ("stored conversation", "a conversation kept by a file store", lambda d: _has(d, "snapshot", "version")),
    ("reply script", "a reply script", lambda d: _has(d, "replies")),
)


class JSONFileError(ValueError):
    """A file cannot be used for what it was given for; ``str()`` names the file and the reason, in one line."""


def read_json(path: str | os.PathLike[str], expected: str) -> Any:
    """The JSON document in ``path``, a file that should be a(n) ``expected`` (a kind of :data:`_KINDS`).

    Says why when the file is missing, a folder, a device or a FIFO, over the size limit
    (:mod:`~llm_fsm.named_files`), unreadable, binary, empty or not JSON; its content is the caller's
    to check (with :func:`not_a`).
    """
    path = Path(path)
    try:
        data = read_bytes(path, expected)
    except OSError as exc:
        raise JSONFileError(f"cannot read the {expected} {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        what = "a SQLite database" if data.startswith(_SQLITE) else f"binary, not UTF-8 text (byte {exc.start})"
        raise JSONFileError(f"{path} is not a {expected}: it is {what}") from None
    if not text.strip():
        raise JSONFileError(f"{path} is not a {expected}: the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise JSONFileError(f"{path} is not a {expected}: invalid JSON at {where}: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, or a number too long to convert
        reason = "nesting is too deep" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise JSONFileError(f"{path} is not a {expected}: {reason}") from None


def other_kind(document: Any, expected: str) -> str | None:
    """How a message names what ``document`` is (``"a cassette (recorded model calls)"``) when it is
    recognisably another kind of file than ``expected``; None when it is not, or may be that kind."""
    found = next(((kind, name) for kind, name, test in _KINDS if test(document)), None)
    return found[1] if found and found[0] != expected else None


def not_a(path: str | os.PathLike[str], document: Any, expected: str, why: str) -> str:
    """One line saying that ``document``, read from ``path``, is not a(n) ``expected``: what it is
    when another kind is recognised, else ``why``."""
    other = other_kind(document, expected)
    return f"{path} is {other}, not a {expected}" if other else f"{path} is not a {expected}: {why}"


def validation_summary(exc: Any, most: int = 2) -> str:
    """A pydantic ``ValidationError`` in one line: its first problems as ``where: what``, and how many more."""
    found = exc.errors(include_url=False)
    shown = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the document'}: {e['msg']}" for e in found[:most])
    return shown + (f" (and {len(found) - most} more)" if len(found) > most else "")


def _has(document: Any, *keys: str) -> bool:
    return isinstance(document, dict) and all(key in document for key in keys)


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` at once (a temporary file renamed over it), readable by its owner
    only: the file is created 0600 (never another mode first), the folders it needs 0700. OSError if it cannot be."""
    path = Path(path)
    private_folders(path.parent)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def private_folders(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each 0700 (``mkdir -p`` would make the parents 0755); the
    folders that exist are left as they are. OSError if it cannot be."""
    if folder.is_dir():
        return
    private_folders(folder.parent)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if not folder.is_dir():  # a file stands where the folder should be
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)) from None


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists, before a library creates it with its own mode."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
