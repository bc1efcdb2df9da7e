"""Masking of secret-looking context values in prompts, logs and displays.

A key is secret when its name looks like one (password, api_key, token, secret, credential, card
number, cvv, pin, iban, ssn...) or matches one of the definition's ``secret_keys`` (globs allowed).
A string value that looks like a payment card number (13-19 digits passing the Luhn check) is
masked whatever its key. A definition turns masking off with ``"mask_secrets": false``.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "[masked]"

_WORDS = {
    "password", "passwd", "passphrase", "passcode", "pwd", "token", "secret", "credential", "credentials",
    "cvv", "cvc", "pin", "iban", "ssn", "apikey", "otp", "cookie", "cardnumber", "creditcard", "privatekey",
}  # fmt: skip
_PAIRS = {
    ("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("card", "number"), ("card", "no"),
    ("card", "num"), ("cc", "number"), ("cc", "num"), ("credit", "card"), ("security", "code"), ("session", "id"),
    ("social", "security"), ("tax", "id"), ("auth", "token"),
}  # fmt: skip
_CARD = re.compile(r"^\d[\d \-]{11,22}\d$")
KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk|key|api)[-_][A-Za-z0-9_-]{6,}")  # API keys as providers write them
URL_PASSWORD = re.compile(r"(?<=://)([^/\s:@]*):[^/\s@]+@")  # the password of https://user:PASSWORD@host/...


def without_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it (``scheme://user:PASSWORD@host``) replaced by ``***``."""
    return URL_PASSWORD.sub(r"\1:***@", text)


_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def _words(name: str) -> list[str]:
    """``userAPIKey`` / ``user_api_key`` / ``user-api-key`` -> ["user", "api", "key"] (linear time)."""
    return [w.lower() for w in _WORD.findall(name)]


def is_secret_key(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a context key's name looks secret, or matches one of ``extra`` (exact names or globs)."""
    return _is_secret_key(name, tuple(extra))


@functools.lru_cache(maxsize=4096)  # the same few keys are asked about on every prompt and display
def _is_secret_key(name: str, extra: tuple[str, ...]) -> bool:
    words = _words(name)
    if any(w in _WORDS for w in words) or any(pair in _PAIRS for pair in zip(words, words[1:], strict=False)):
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in extra)


def looks_like_card(value: str) -> bool:
    """13-19 digits (spaces or dashes allowed) that pass the Luhn check."""
    if not _CARD.match(value):
        return False
    digits = [int(c) for c in value if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2) for i, d in enumerate(reversed(digits)))
    return total % 10 == 0


def mask(value: Any, extra: Iterable[str] = ()) -> Any:
    """A copy of ``value`` (a context or part of one) with secret values replaced by ``[masked]``."""
    patterns = tuple(extra)
    if isinstance(value, dict):
        return {k: MASK if _is_secret_key(str(k), patterns) else mask(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, patterns) for v in value]
    if isinstance(value, str) and looks_like_card(value):
        return MASK
    return value


Mask = Callable[[dict[str, Any]], dict[str, Any]]


def mask_run(run: Mapping[str, Any], mask: Mask) -> dict[str, Any]:
    """A tool call's data (a ``ToolRun`` dumped) with secret-looking arguments and result masked."""
    arguments, result = run.get("arguments"), run.get("result")
    return {
        **run,
        "arguments": mask(arguments) if isinstance(arguments, dict) else arguments,
        "result": mask({"result": result})["result"] if result is not None else None,
    }


def mask_pending(pending: Mapping[str, Any] | None, mask: Mask) -> dict[str, Any] | None:
    """A pending event's data with its payload and any tool calls it carries masked."""
    if pending is None:
        return None
    call = pending.get("tool_call")
    return {
        **pending,
        "payload": mask(dict(pending.get("payload") or {})),
        "tool_call": mask_run(call, mask) if call else call,
        "tool_runs": [mask_run(run, mask) for run in pending.get("tool_runs") or ()],
    }
