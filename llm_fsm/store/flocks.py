"""``flock`` locks on files that may be removed: the file store's turn and save locks.

The kernel releases a ``flock`` when its holder's process dies, however it dies, so such a lock needs no
lease. Its file can be removed (a deleted conversation's, a stale one's), but only safely by one rule:
whoever removes the file holds its lock (or forces it away, as ``unlock`` does), and whoever takes the
lock checks afterwards that the path still names the file it locked. Without that check, a process that
opened the file before it was removed would lock a file no one opens any more, while the next process
creates and locks a new one at the same path: two holders. With it, the first one sees the path changed
and locks again, the file that is there now.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class Flock:
    """An exclusive ``flock`` on ``path`` (created, 0600, when missing), re-checked after each wait."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, blocking: bool) -> bool:
        """Take the lock, waiting for it if ``blocking``; False when another holder has it and not ``blocking``."""
        mode = fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
        while True:
            # read-only is enough for flock: a file made read-only by a umask still locks
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, mode)
                if self._still_named(fd):
                    self._fd = fd
                    return True
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the file was removed while we waited for it: lock the one at the path now

    def _still_named(self, fd: int) -> bool:
        try:
            return os.path.samestat(os.fstat(fd), os.lstat(self.path))
        except FileNotFoundError:
            return False

    def remove(self) -> None:
        """Remove the file while holding its lock: a process waiting for it then locks a new file."""
        assert self._fd is not None, "only the holder removes the file"
        self.path.unlink(missing_ok=True)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)  # also for a copy of the descriptor a fork took
            finally:
                os.close(fd)
