"""Times and dates said in a message, as a clock and a calendar write them (``21:00``, ``2027-03-14``): a
guided value shaped that way is offered from them (:mod:`llm_fsm.guided.words`)."""

from __future__ import annotations

import datetime
import re

from llm_fsm.guided import languages

_TIME = re.compile(  # not a date's day and month: 13.06.2027
    r"(?<![\w:./])(\d{1,2})(?:[:.h](\d{2}))?\s*(a\.?m\.?|p\.?m\.?|h(?:rs)?|uhr)?(?![\w:/]|\.\d)", re.IGNORECASE
)

# every built-in language's names of the months, read whatever the definition's language: a name is read only
# beside a day's number ("13 June", "June 13th"), and none is a function word of another language
# (tests/guided/test_languages.py)
_MONTHS = languages.months()
_MONTH = "(" + languages.either(frozenset(_MONTHS)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th|er|º|\.)?"
_OF = languages.either(languages.union("day_of"))  # "13 of June", "13 de junio"
_DATES = (
    re.compile(rf"\b{_DAY}\s+(?:(?:{_OF})\s+)?{_MONTH}(?:,?\s+(\d{{4}}))?\b", re.IGNORECASE),  # 13 June (2026)
    re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+(\d{{4}}))?\b", re.IGNORECASE),  # June 13th (, 2026)
)
# the words that say a time of day ("noon", "medianoche"), of every built-in language, read as the months are
_TIME_WORDS = languages.times()
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# a date in digits: 13/06/2027, 13.06.27, 6/13 (the day first where it can be, the month first too where both can)
# a date in digits: 13/06/2027, 13-06-2027, 13.06.27, and without a year 13/06 and 13.06. (with its last dot)
_NUMERIC = re.compile(
    r"(?<![\w./:-])(\d{1,2})(?:([./-])(\d{1,2})\2(\d{4}|\d{2})|/(\d{1,2})|\.(\d{1,2})\.)(?![\w/:-]|\.?\d)"
)


def dates(text: str, today: datetime.date | None = None) -> list[str]:
    """The dates ``text`` says with a month's name ("June 13th", "13 de junio", "le 13 juin 2027"), as
    ``YYYY-MM-DD``: of the year said, else the next such day from ``today``."""
    today = today or datetime.date.today()
    found = []
    for index, pattern in enumerate(_DATES):
        for match in pattern.finditer(text):
            day, month = (match.group(1), match.group(2)) if index == 0 else (match.group(2), match.group(1))
            year = int(match.group(3)) if match.group(3) else today.year
            try:
                when = datetime.date(year, _MONTHS[month.casefold()], int(day))
                if not match.group(3) and when < today:
                    when = datetime.date(year + 1, when.month, when.day)
            except (ValueError, KeyError):  # the 31st of June, a name the table lacks
                continue
            found.append(when.isoformat())
    return list(dict.fromkeys(found))


def days_said(text: str, today: datetime.date | None = None) -> list[str]:
    """The dates ``text`` says in digits ("13/06/2027", "13-06-2027", "13.06.27", "le 13/06", "am 13.06."), as
    ``YYYY-MM-DD``: the day first, and the month first too where both can be ("05/06/27"); not "24/7", "1/2" or
    "3/4". Offered to a key shaped as a date only (a name is not "2027-06-13")."""
    return list(dict.fromkeys(day for _, _, days in _numeric_dates(text, today) for day in days))


def _numeric_dates(text: str, today: datetime.date | None = None) -> list[tuple[int, int, list[str]]]:
    today = today or datetime.date.today()
    found = []
    for match in _NUMERIC.finditer(text):
        first, year = int(match.group(1)), match.group(4)
        second = int(match.group(3) or match.group(5) or match.group(6))
        if match.group(5) and ((first, second) == (24, 7) or first < second <= 4):
            continue  # round the clock, a fraction
        days = [when.isoformat() for d, m in ((first, second), (second, first)) if (when := _date(year, m, d, today))]
        if days:
            found.append((match.start(), match.end(), list(dict.fromkeys(days))))
    return found


def date_and_time_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` says a date (in digits, ISO, or with a month's name) or a time of day with a colon, an "h"
    between hours and minutes, or am, pm or Uhr ("19:30", "19h30", "9 pm"): their digits are no count or amount
    (a party of 4 "at 19:30" is not 19 or 30; "9.30" may be a price)."""
    spans = [(start, end) for start, end, _ in _numeric_dates(text)]
    spans += [match.span() for pattern in (ISO_DATE, *_DATES) for match in pattern.finditer(text)]
    for match in _TIME.finditer(text):
        mark = (match.group(3) or "").casefold().replace(".", "")
        # not 2.50 (a price), nor "4 am Samstag" (German "am" is "on")
        if mark in ("pm", "uhr") or re.search(r"\d[:h]\d|\dam|a\.m", match.group(), re.IGNORECASE):
            spans.append(match.span())
    return spans


def _date(year: str | None, month: int, day: int, today: datetime.date) -> datetime.date | None:
    """The day, of ``year`` (two digits: this century, or the last where that is more than ten years ahead: "85"
    is 1985), else the next such day from ``today``; None if there is none."""
    try:
        if year is not None and len(year) == 2:
            year = str(2000 + int(year) if 2000 + int(year) <= today.year + 10 else 1900 + int(year))
        if year is not None:
            return datetime.date(int(year), month, day)
        when = datetime.date(today.year, month, day)
        return when if when >= today else datetime.date(today.year + 1, month, day)
    except ValueError:
        return None


def times(text: str) -> list[str]:
    """The times of day ``text`` says with a clock's marks ("9 pm", "9:30pm", "21h", "19.30"), as ``HH:MM``:
    a time compared as text ("17:00" <= time) is written that way; "at 9" says no time (nine guests?). A time
    from 1 to 11 without am or pm ("tuesday 5.45") is either: both are offered, and a move's conditions (opening
    hours) keep the one that fits."""
    found, dated = [], [(start, end) for start, end, _ in _numeric_dates(text)]
    for match in _TIME.finditer(text):
        if any(start <= match.start() < end for start, end in dated):
            continue  # "am 13.06." is a day, not 13:06
        hour, minutes, mark = int(match.group(1)), match.group(2), (match.group(3) or "").casefold().replace(".", "")
        if not mark and minutes is None:
            continue
        if mark in ("am", "pm"):
            if not 1 <= hour <= 12:
                continue
            hour = hour % 12 + (12 if mark == "pm" else 0)
        if hour > 23 or (minutes is not None and int(minutes) > 59):
            continue
        found.append(f"{hour:02d}:{minutes or '00'}")
        if not mark and 1 <= hour <= 11:  # "5.45" with no am or pm: the afternoon's too, after the morning's
            found.append(f"{hour + 12:02d}:{minutes}")
    for word, time in _TIME_WORDS.items():
        if re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE):
            found.append(time)
    return list(dict.fromkeys(found))


def real_day(text: str) -> bool:
    """Whether ``text`` (``YYYY-MM-DD``) is a day of the calendar: "the 31st" of a February is not."""
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


__all__ = ["ISO_DATE", "date_and_time_spans", "dates", "days_said", "real_day", "times"]
