"""Numbers as people write them in a message: ``12,000`` and ``1,299.99`` with thousands, ``50.000`` and
``1.200,50`` the European way, ``2,5`` with a decimal comma, ``42k`` and "42 thousand", "1.2 million"
(:mod:`llm_fsm.guided_words` offers them as a guided schema's numbers)."""

from __future__ import annotations

import re

_NUMBER = re.compile(  # with thousands (12,000; 50.000), a decimal point or comma, and "k" for thousands (42k)
    r"(?<![\w.,-])-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\.\d{3})+(?:,\d+)?|\d+(?:[.,]\d+)?)[kK]?(?![\w]|[.,]\d)"
)
_SCALE = re.compile(r"\s*(?:(thousand|grand)|(million|mio|mn))\b", re.IGNORECASE)  # "42 thousand", "1.2 million"


def said_numbers(text: str) -> list[int | float]:
    """The numbers written in digits in ``text``, in order (a code or a phone number is none)."""
    return [number for match in _NUMBER.finditer(text) if (number := _scaled(text, match)) is not None]


def _scaled(text: str, match: re.Match[str]) -> int | float | None:
    """The number ``match`` found in ``text``, times the scale word after it ("42 thousand", "1.2 million")."""
    number = _number(match.group())
    scale = _SCALE.match(text, match.end())
    if number is None or scale is None or match.group()[-1] in "kK":
        return number
    return _times(number, 1000 if scale.group(1) else 1_000_000)


def _number(text: str) -> int | float | None:
    """A number as written (``12,000`` and ``1,299.99`` with thousands, ``2,5`` with a decimal comma, ``1.200,50``,
    ``42k``); None for a code: past 15 digits, or four digits or more after a leading zero."""
    thousands = text[-1] in "kK"
    text = text.rstrip("kK")
    digits = sum(c.isdigit() for c in text)
    if digits > 15 or (digits >= 4 and text.lstrip("-").startswith("0")):
        return None  # a pasted reference, a phone number (0612345678): no amount
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    elif re.fullmatch(r"-?\d{1,3}(\.\d{3})+(,\d+)?", text):  # 50.000 and 1.200,50, as written in Europe
        text = text.replace(".", "")
    text = text.replace(",", ".")
    number = float(text) if "." in text else int(text)
    return _times(number, 1000) if thousands else number  # 42k, 1.5k


def _times(number: int | float, scale: int) -> int | float:
    """``number`` times ``scale``, whole where it is (1.5k is 1500, not 1500.0)."""
    product = number * scale
    return int(product) if float(product).is_integer() else product
