"""Tools of the restaurant_booking example: Trattoria Lucia's reservation book, faked in memory.

Load them with ``--hooks fsm_definitions/hooks/restaurant_booking.py:hooks`` (or
``Hooks.load("fsm_definitions/hooks/restaurant_booking.py:hooks")``). The book below never changes:
a booking is not written anywhere, so every call gives the same answer for the same arguments
(the example's tests rely on that). A real version would query the reservation system instead.

Every result of a tool has the same keys, whatever the answer (``reason`` is ``""`` and
``alternatives`` ``[]`` for a free slot): the runtime merges a result into what its ``result_key``
held, so a key left out would keep the value of an earlier call.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from llm_fsm import Hooks

hooks = Hooks()

SEATINGS = tuple(f"{hour:02d}:{minute:02d}" for hour in range(17, 22) for minute in (0, 30))  # 17:00 .. 21:30
COVERS_PER_SEATING = 24
CLOSED_WEEKDAY = "Monday"
# covers already booked per (date, seating); a seating not listed is empty
BOOKED: dict[tuple[str, str], int] = {
    ("2025-06-13", "19:00"): 24,
    ("2025-06-13", "19:30"): 24,
    ("2025-06-13", "20:00"): 22,
    ("2025-06-13", "20:30"): 24,
    ("2025-06-13", "21:00"): 16,
    ("2025-06-14", "20:00"): 20,
}
ALTERNATIVES = 3


def _day(date: str) -> dt.date:
    try:
        return dt.date.fromisoformat(date)
    except ValueError:
        raise ValueError(f"{date!r} is not a calendar date (YYYY-MM-DD)") from None


def _free(date: str, seating: str) -> int:
    return COVERS_PER_SEATING - BOOKED.get((date, seating), 0)


def _minutes(time: str) -> int:
    hours, minutes = time.split(":")
    return int(hours) * 60 + int(minutes)


def _alternatives(date: str, time: str, party_size: int) -> list[str]:
    """The seatings of ``date`` with room for the party, nearest to ``time`` first (at most three), in time order."""
    open_ = [s for s in SEATINGS if s != time and _free(date, s) >= party_size]
    nearest = sorted(open_, key=lambda s: (abs(_minutes(s) - _minutes(time)), s))[:ALTERNATIVES]
    return sorted(nearest)


def _slot(date: str, time: str, party_size: int) -> dict[str, Any]:
    day = _day(date)
    weekday = day.strftime("%A")
    found: dict[str, Any] = {"date": date, "day_of_week": weekday, "time": time, "party_size": party_size}
    if weekday == CLOSED_WEEKDAY:
        return {**found, "available": False, "reason": "the restaurant is closed on Mondays", "alternatives": []}
    if _minutes(time) < _minutes(SEATINGS[0]):
        reason = f"the first seating is at {SEATINGS[0]}"
    elif _minutes(time) > _minutes(SEATINGS[-1]):
        reason = f"the last seating is at {SEATINGS[-1]}"
    elif time not in SEATINGS:
        reason = "seatings are on the hour and on the half hour"
    elif _free(date, time) < party_size:
        reason = f"the {time} seating is fully booked for {party_size}"
    else:
        return {**found, "available": True, "reason": "", "alternatives": []}
    return {**found, "available": False, "reason": reason, "alternatives": _alternatives(date, time, party_size)}


@hooks.tool()
def check_availability(date: str, time: str, party_size: int) -> dict[str, Any]:
    """Whether a table for ``party_size`` is free at ``date`` (YYYY-MM-DD) and ``time`` (HH:MM).

    The answer echoes the slot with its weekday; when it is not free, ``reason`` says why and
    ``alternatives`` lists up to three times that day with room for the party. A date that does not
    exist raises ``ValueError`` (the model reads it as the call's error).
    """
    return _slot(date, time, party_size)


@hooks.tool()
def book_table(
    date: str, time: str, party_size: int, guest_name: str, phone: str, special_requests: str = ""
) -> dict[str, Any]:
    """Book the table and return the booking with its reference.

    Raises ``ValueError`` when the slot is not free (the model reads why and offers another time).
    The definition asks for a person's approval before this runs for 7 or 8 guests.
    """
    slot = _slot(date, time, party_size)
    if not slot["available"]:
        raise ValueError(f"cannot book {date} at {time}: {slot['reason']}")
    reference = f"TL-{date.replace('-', '')[2:]}-{time.replace(':', '')}-{party_size}"
    return {
        "reference": reference,
        "date": date,
        "day_of_week": slot["day_of_week"],
        "time": time,
        "party_size": party_size,
        "guest_name": guest_name,
        "phone": phone,
        "special_requests": special_requests,
        "held_minutes": 15,
    }
