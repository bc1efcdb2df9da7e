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
    return _mask(value, tuple(extra))


def _mask(value: Any, patterns: tuple[str, ...]) -> Any:
    # every prompt masks the whole context: numbers, booleans, None and text that cannot be a card number
    # (a card starts with a digit) are kept without a call
    if isinstance(value, dict):
        return {k: MASK if _is_secret_key(str(k), patterns) else _masked_item(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_item(v, patterns) for v in value]
    if isinstance(value, str) and looks_like_card(value):
        return MASK
    return value


def _masked_item(value: Any, patterns: tuple[str, ...]) -> Any:
    kind = type(value)
    if kind in _KEPT or (kind is str and not value[:1].isdigit()):  # isdigit holds for every digit \d matches
        return value
    return _mask(value, patterns)


_KEPT = frozenset({int, float, bool, type(None)})


# key=value, key: value, "key": "value" in free text (an exception's message): the key as a word
_KEY_THEN = re.compile(r"""(?P<key>[A-Za-z_][\w.-]*)["']?\s*[:=]\s*""")
_VALUE = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&)}\]]+""")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}")
_DIGITS = re.compile(r"(?<![\d-])\d[\d \-]{11,22}\d(?![\d-])")


def mask_text(text: str, extra: Iterable[str] = (), values: Iterable[str] = ()) -> str:
    """``text`` (free text, such as an exception's message) with what looks secret replaced by ``[masked]``.

    Masked: the value of each ``key=value`` / ``key: value`` / ``"key": "value"`` whose key looks secret
    (as context keys are judged, ``extra`` included), card numbers (Luhn), API keys as providers write
    them (``sk-...``), bearer and basic credentials, URL passwords, and each of ``values`` (the secrets
    known to the caller, e.g. a tool's secret-looking arguments) wherever it appears.
    """
    for value in sorted({v for v in values if len(v) >= 4}, key=len, reverse=True):  # shorter: too many hits
        text = text.replace(value, MASK)
    text = _masked_pairs(without_url_passwords(text), tuple(extra))
    text = _BEARER.sub(lambda m: f"{m[1]} {MASK}", KEY_SHAPED.sub(MASK, text))
    return _DIGITS.sub(lambda m: MASK if looks_like_card(m[0]) else m[0], text)


def _masked_pairs(text: str, patterns: tuple[str, ...]) -> str:
    """``text`` with the value after each secret-looking ``key:`` or ``key=`` masked (quotes kept)."""
    parts, done = [], 0
    for match in _KEY_THEN.finditer(text):
        value = _VALUE.match(text, match.end())
        if match.start() < done or value is None or not _is_secret_key(match["key"], patterns):
            continue  # a key inside a value already masked, or not a secret's
        quote = value[0][0] if value[0][0] in "\"'" else ""
        parts += [text[done : match.end()], f"{quote}{MASK}{quote}"]
        done = value.end()
    return "".join(parts) + text[done:]


def secret_values(value: Any, extra: Iterable[str] = ()) -> list[str]:
    """The text of every value under a secret-looking key in ``value`` (an object, at any depth)."""
    patterns, found, todo = tuple(extra), [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if _is_secret_key(str(key), patterns) and isinstance(child, str | int) and not isinstance(child, bool):
                    found.append(str(child))
                else:
                    todo.append(child)
        elif isinstance(item, list):
            todo.extend(item)
    return found


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
