"""The tools of the support_triage_bot example: Parcelly's orders and its carrier's tracking, faked in memory.

Load them with ``--hooks fsm_definitions/hooks/support_triage_bot.py:hooks`` (or
``Hooks.load("fsm_definitions/hooks/support_triage_bot.py:hooks")``). The data below never changes, so a
call gets the same answer every time (the example's tests rely on that). A real version would call the
shop's order system and the carrier's tracking API instead.

Every result of a tool has the same keys, whatever the answer (an order not shipped yet has
``"tracking_number": None``), so what reads ``order.tracking_number`` finds the key on every answer. The
runtime replaces what a ``result_key`` held with each new result (it does not merge them): a second
``lookup_order`` leaves nothing of the first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llm_fsm import Hooks

hooks = Hooks()

ORDERS: dict[str, dict[str, Any]] = {
    "PO-20417": {
        "number": "PO-20417",
        "items": "trail running shoes (size 42)",
        "ordered": "2026-11-26",
        "status": "shipped",
        "carrier": "UPS",
        "tracking_number": "1Z999AA10123456784",
    },
    "PO-20533": {
        "number": "PO-20533",
        "items": "a rain jacket (M)",
        "ordered": "2026-12-01",
        "status": "processing",
        "carrier": "UPS",
        "tracking_number": None,
    },
}

PARCELS: dict[str, dict[str, Any]] = {
    "1Z999AA10123456784": {
        "tracking_number": "1Z999AA10123456784",
        "status": "delayed",
        "last_seen": "UPS hub, Denver CO, 2026-12-02 18:40",
        "expected_delivery": "2026-12-05",
        "note": "Weather delay: snowstorm in the Denver area.",
    },
}


@hooks.tool()
def lookup_order(order_number: str) -> dict[str, Any]:
    """The order with this number: its items, date, status, carrier and tracking number.

    An unknown number raises ``LookupError`` (the model reads it as the call's error).
    """
    order = ORDERS.get(order_number.strip().upper())
    if order is None:
        raise LookupError(f"no order {order_number}: ask the customer to check the number in their confirmation email")
    return dict(order)


@hooks.tool()
async def check_shipping(tracking_number: str) -> dict[str, Any]:
    """The carrier's word on a parcel: status, where it was last seen, expected delivery and the carrier's note.

    An unknown tracking number raises ``LookupError``.
    """
    await asyncio.sleep(0)  # a real version awaits the carrier's HTTP API here
    parcel = PARCELS.get(tracking_number.strip().upper())
    if parcel is None:
        raise LookupError(f"the carrier has no parcel {tracking_number}")
    return dict(parcel)
