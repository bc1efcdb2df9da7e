"""Numbers as people write them in a message: ``12,000`` and ``1,299.99`` with thousands, ``50.000`` and
``1.200,50`` the European way, ``5'000`` the Swiss way, ``1 500`` with a space, ``2,5`` with a decimal comma,
``42k``, ``3.5M``, "42 thousand", "1.2 million", "3 Millionen", with a unit on it (``70kg``), and a range's ends
("3-4k" is 3000 and 4000) (:mod:`llm_fsm.guided.words` offers them as a guided schema's numbers)."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from llm_fsm.guided.dates import date_and_time_spans
from llm_fsm.guided.languages import either, spoken

_GROUP = "['\u2019\u00a0\u202f]"  # thousands apart with an apostrophe (5'000) or a no-break space (1 500)
# a unit written on the number ("70kg", "25yo", "2hrs", "4pax"): the number is read ("pm", "am" make a time of day)
_UNITS = r"(?:kg|g|lbs?|cm|mm|km|mi|ml|yo|yrs?|hrs?|mins?|secs?|pcm|pax|pp|ppl)\b"
# thousands (12,000; 50.000; 5'000) and a decimal point or comma, then "k" (42k) or "M" (3.5M), a unit (70kg), or
# nothing that goes on with the number (not a code's part, KD17XRF, nor a date's, 13/06)
_DIGITS = "|".join(
    [r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", r"\d{1,3}(?:\.\d{3})+(?:,\d+)?", rf"\d{{1,3}}(?:{_GROUP}\d{{3}})+(?:[.,]\d+)?"]
    + [r"\d+(?:[.,]\d+)?"]
)
_END = rf"[kKM](?![\w]|[.,]\d)|(?={_UNITS})|(?![\w]|[.,:]\d|{_GROUP}\d)"
_NUMBER = re.compile(rf"(?<![\w.,:-])-?(?:{_DIGITS})(?:{_END})")
_SPACED = re.compile(r"(?<![\w.,'-])\d{1,3}(?: \d{3})+(?:,\d+)?(?![\w]|[.,]\d| \d)")  # 1 500 (not 555 123 4567)
_FRACTION = re.compile(r"(?<![\w./])(\d)/(\d{1,2})(?![\w/]|\.\d)")  # 1/2, 3/4 (not 50/50 or 24/7)


class _Scaled(NamedTuple):
    """The patterns that read the words of a set of languages: ``scale`` a scale word after a number ("42
    thousand", "3 Millionen": group 1 thousands, group 2 millions), ``between`` a range said with "and" ("between
    40 and 50k": group 1 its "and"), ``to`` what stands between a range's ends ("3-4k", "3 to 4 thousand", "3 bis
    4"), ``dashed`` a range written with a dash, its ends apart ("10-12", "3-4k", "1500-2000"; not 2027-06-13,
    555-0142)."""

    scale: re.Pattern[str]
    between: re.Pattern[str]
    to: re.Pattern[str]
    dashed: re.Pattern[str]


@functools.cache
def _scaled_words(language: str | None) -> _Scaled:
    """The patterns of English's words and ``language``'s (every built-in language's where it is None): "mio" is
    German "million" and Italian "my", "grand" English "thousand" and French "big"."""
    thousands, millions = either(spoken("thousand", language)), either(spoken("million", language))
    second = "|".join(  # a scale on it (3-4k), or its digits alone (10-12, 1500-2000)
        [rf"\d+(?:[.,]\d+)?(?:[kKM]|\s*(?:{thousands}|{millions}))\b"]
        + [r"(?:[1-9]\d{0,2}(?:[.,']\d{3})*|[1-9]\d{3,})(?![\w-]|[.,]\d)"]
    )
    between, joined = either(spoken("between", language)), either(spoken("between_and", language))
    return _Scaled(
        re.compile(rf"\s*(?:({thousands})|({millions}))\b", re.IGNORECASE),
        re.compile(rf"(?<!\w)(?:{between})\s+\d[\d.,']*[kKM]?(?:\s*[^\W\d]+)?\s+({joined})\s+(?=\d)", re.IGNORECASE),
        re.compile(rf"\s*(?:-|\u2013|{either(spoken('range_to', language))}|\x00)\s*"),
        re.compile(rf"(?<![\w.,-])(\d+(?:[.,]\d+)?[kKM]?)[-\u2013]({second})", re.IGNORECASE),
    )


def ranges_joined(text: str, language: str | None = None) -> str:
    """``text`` with the "and" of "between 40 and 50k" written as a range's dash, in the same place (the same
    length): its numbers are one range, and the clause is one. The words of English and ``language`` (a built-in
    language's code; every built-in language's where None)."""
    return _scaled_words(language).between.sub(
        lambda m: (
            m.group()[: m.start(1) - m.start()] + "\x00".ljust(len(m.group(1))) + m.group()[m.end(1) - m.start() :]
        ),
        text,
    )


# the languages text2num reads numbers said in words in (its alpha2digit)
WORDED_LANGUAGES = frozenset({"en", "fr", "es", "pt", "de", "it", "nl"})


def in_digits(text: str, language: str | None = None) -> str:
    """``text`` with the numbers said in words written in digits ("for two people": "for 2 people", "fifty two
    thousand": "52000", "zweihundert": "200"), by text2num for ``language`` (English by default); "one" alone
    stays a word ("no one", "a one way flight"), as it does in a language text2num does not read. A message that
    holds digits is read as written: its scale words are its digits' ("42 thousand", "1.5 to 2 million")."""
    code = (language or "en").split("-")[0].casefold()
    if code not in WORDED_LANGUAGES or any(c.isdigit() for c in text):
        return text
    from text_to_num import alpha2digit  # imported on first use: a guided turn's, never at import

    try:
        return str(alpha2digit(text, code, threshold=2))
    except Exception:  # a phrase the library cannot read is left as it was said
        return text


def said_numbers(text: str, language: str | None = None) -> list[int | float]:
    """The numbers written in digits in ``text``, in order (a code or a phone number is none). A number written
    with spaces between its thousands ("1 500") is read whole, before its parts; the first end of a range whose
    second has a scale has it too ("3-4k": 3000 and 4000, "1.5 to 2 million"). Scale and range words are
    English's and ``language``'s (every built-in language's where None)."""
    return [place.number for place in placed_numbers(text, language)]


class Placed(NamedTuple):
    """A number of a message, and where it is said: from ``start`` to ``end``; ``ranged``: a range's first
    end, whose second is the next number ("3-4k")."""

    start: int
    end: int
    number: int | float
    ranged: bool = False


def placed_numbers(text: str, language: str | None = None) -> list[Placed]:
    """:func:`said_numbers`, each with where in ``text`` it is said."""
    words = _scaled_words(language)
    fractions = [match.span() for match in _FRACTION.finditer(text) if int(match.group(1)) < int(match.group(2))]
    for start, end in [*date_and_time_spans(text), *fractions]:  # a date's, a time's or a fraction's digits are
        # no number: "4 at 19:30", "3/4 of the rent, 1100"
        text = text[:start] + " " * (end - start) + text[end:]
    # a range's dash, in place
    text = words.dashed.sub(lambda m: m.group(1) + "\x00" + m.group(2), ranges_joined(text, language))
    # a number with spaced thousands first: it comes before its first part, which starts where it does
    found = [Placed(m.start(), m.end(), number) for m in _SPACED.finditer(text) if (number := _number(m.group()))]
    matches = list(_NUMBER.finditer(text))
    for index, match in enumerate(matches):
        number = _scaled(text, match, words.scale)
        following = matches[index + 1] if index + 1 < len(matches) else None
        ranged = following is not None and bool(words.to.fullmatch(text, match.end(), following.start()))
        if number is not None and following is not None and ranged:
            scaled = _scaled_as(number, text, match, following, words.scale)
            second = _scaled(text, following, words.scale)
            number = scaled if second is None or scaled <= second else number  # "900-1.2k" is 900 to 1200
        if number is not None:
            found.append(Placed(match.start(), match.end(), number, ranged))
    return sorted(found, key=lambda place: place.start)


def _scaled_as(
    number: int | float, text: str, first: re.Match[str], second: re.Match[str], scales: re.Pattern[str]
) -> int | float:
    """A range's first end, ``number``, with the scale its second end has where it has none of its own (a scale
    word: what ``scales`` reads)."""
    if first.group()[-1] in "kKM" or scales.match(text, first.end()):
        return number
    if second.group()[-1] in "kKM":
        return _times(number, 1000 if second.group()[-1] in "kK" else 1_000_000)
    scale = scales.match(text, second.end())
    return number if scale is None else _times(number, 1000 if scale.group(1) else 1_000_000)


def _scaled(text: str, match: re.Match[str], scales: re.Pattern[str]) -> int | float | None:
    """The number ``match`` found in ``text``, times the scale word after it ("42 thousand", "1.2 million"), one
    ``scales`` reads."""
    number = _number(match.group())
    scale = scales.match(text, match.end())
    if number is None or scale is None or match.group()[-1] in "kKM":
        return number
    return _times(number, 1000 if scale.group(1) else 1_000_000)


def _number(text: str) -> int | float | None:
    """A number as written (``12,000`` and ``1,299.99`` with thousands, ``2,5`` with a decimal comma, ``1.200,50``,
    ``42k``); None for a code: past 15 digits, or four digits or more after a leading zero."""
    scale = {"k": 1000, "K": 1000, "M": 1_000_000}.get(text[-1])
    text = re.sub(_GROUP + "| ", "", text.rstrip("kKM"))
    digits = sum(c.isdigit() for c in text)
    if digits > 15 or (digits >= 4 and text.lstrip("-").startswith("0")):
        return None  # a pasted reference, a phone number (0612345678): no amount
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    elif re.fullmatch(r"-?\d{1,3}(\.\d{3})+(,\d+)?", text):  # 50.000 and 1.200,50, as written in Europe
        text = text.replace(".", "")
    text = text.replace(",", ".")
    number = float(text) if "." in text else int(text)
    return _times(number, scale) if scale else number  # 42k, 1.5k, 3.5M


def _times(number: int | float, scale: int) -> int | float:
    """``number`` times ``scale``, whole where it is (1.5k is 1500, not 1500.0)."""
    product = number * scale
    return int(product) if float(product).is_integer() else product
