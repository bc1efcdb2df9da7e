"""The files people name (a definition, a script, a cassette, a test file, an input file...): read only
when each is a regular file within the size limit.

Read to its end, a device (``/dev/zero``) or a huge file takes all the memory there is, and a FIFO
blocks the first ``open`` until something writes to it. So :func:`open_file` looks first (``stat``,
which never blocks), refuses what is not a regular file and a file over the limit, opens without
blocking and looks again at what it opened (a FIFO put at the path meanwhile is refused as well);
:func:`read_bytes` then reads at most the limit. The limit is ``LLM_FSM_MAX_FILE_BYTES`` bytes
(:data:`DEFAULT_LIMIT`, 64 MiB, when unset).

:class:`FileRefused` is an ``OSError``: every reader's ``except OSError`` words it as it words a file
that is missing, and its ``strerror`` says what the file is, or how big, and names the limit.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

LIMIT_VARIABLE = "LLM_FSM_MAX_FILE_BYTES"
DEFAULT_LIMIT = 64 * 1024 * 1024

# what the other kinds of file are called in a message
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (a named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(OSError):
    """A file refused before it is read: not a regular file, or over the limit. ``strerror`` says why."""


class NotARegularFile(FileRefused):
    """A FIFO, a device or a socket where a file was named."""


def limit() -> int:
    """The most bytes a named file may hold: ``$LLM_FSM_MAX_FILE_BYTES``, else :data:`DEFAULT_LIMIT`.

    :class:`FileRefused` when the variable is set to anything but a whole number of bytes."""
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_LIMIT
    if not text.isdigit() or int(text) < 1:
        raise FileRefused(errno.EINVAL, f"{LIMIT_VARIABLE} must be a whole number of bytes, not {text!r}")
    return int(text)


def size_text(size: int) -> str:
    """``size`` bytes as a person reads it: ``"300 bytes"``, ``"64 MiB"``, ``"1.5 GiB"``."""
    if size < 1024:
        return f"{size} byte{'s' if size != 1 else ''}"
    value, units = size / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f}".removesuffix(".0") + f" {units[0]}"


def open_file(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file of at most :func:`limit` bytes
    (``what`` names it in the message: ``"definition"``). ``OSError`` otherwise, :class:`FileRefused` for a
    file of the wrong kind or size; a folder is ``IsADirectoryError``, as ``open`` says it."""
    most = limit()
    _check(os.stat(path), path, what, most)  # stat never blocks, where opening a FIFO would
    # O_NONBLOCK: what was put at the path since is opened without waiting, and refused below
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        _check(os.fstat(fd), path, what, most)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path``, checked as :func:`open_file` checks it; never more than :func:`limit` are read
    (a file that grew past the limit since is refused)."""
    most = limit()
    with open_file(path, what) as file:
        data = file.read(most + 1)
    if len(data) > most:
        raise FileRefused(errno.EFBIG, _over(len(data), what, most, "at least "), str(path))
    return data


def _check(found: os.stat_result, path: str | os.PathLike[str], what: str, most: int) -> None:
    mode = found.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(mode):
        kind = next((f"{name}, not" for test, name in _KINDS if test(mode)), "not")
        raise NotARegularFile(errno.EINVAL, f"it is {kind} a regular file", str(path))
    if found.st_size > most:
        raise FileRefused(errno.EFBIG, _over(found.st_size, what, most), str(path))


def _over(size: int, what: str, most: int, at_least: str = "") -> str:
    return f"it is {at_least}{size_text(size)}, over the limit of {size_text(most)} for a {what} ({LIMIT_VARIABLE})"
