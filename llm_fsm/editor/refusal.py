"""A request the editor's API refuses: its HTTP status, a stable code and a message saying what to do."""

from __future__ import annotations

from typing import Any


class Refused(Exception):
    """Answered as ``{"error": {"code", "message"}, **extra}`` with ``status``, never as a traceback."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
