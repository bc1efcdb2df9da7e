"""Tools of the support_triage example: Cloudlane's invoices, refunds and status page, faked in memory.

Load them with ``--hooks fsm_definitions/hooks/support_triage.py:hooks`` (or
``Hooks.load("fsm_definitions/hooks/support_triage.py:hooks")``). The data below never changes: a
refund is not recorded, so every call gives the same answer for the same arguments (the example's
tests rely on that). A real version would call the billing system and the status page instead.

Every result of a tool has the same keys, whatever the answer (a service without incidents has
``"incidents": []``): the runtime merges a result into what its ``result_key`` held, so a key left
out would keep the value of an earlier call.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from llm_fsm import Hooks

hooks = Hooks()

INVOICES: dict[str, dict[str, Any]] = {
    "INV-20931": {
        "number": "INV-20931",
        "date": "2025-06-01",
        "plan": "Team (monthly)",
        "amount": 49.0,
        "currency": "USD",
        "status": "paid",
        "charged_twice": True,
    },
    "INV-20417": {
        "number": "INV-20417",
        "date": "2025-05-20",
        "plan": "Business (yearly)",
        "amount": 588.0,
        "currency": "USD",
        "status": "paid",
        "charged_twice": False,
    },
    "INV-19902": {
        "number": "INV-19902",
        "date": "2025-04-01",
        "plan": "Team (monthly)",
        "amount": 49.0,
        "currency": "USD",
        "status": "refunded",
        "charged_twice": False,
    },
}

Service = Literal["login", "boards", "api", "notifications", "billing"]
STATUS: dict[str, dict[str, Any]] = {
    "login": {"status": "operational", "incidents": []},
    "boards": {
        "status": "major_outage",
        "incidents": [{"id": "INC-4471", "title": "Project boards fail to load (HTTP 500)", "since": "09:12 UTC"}],
    },
    "api": {"status": "operational", "incidents": []},
    "notifications": {
        "status": "degraded",
        "incidents": [{"id": "INC-4468", "title": "Email notifications are late", "since": "07:40 UTC"}],
    },
    "billing": {"status": "operational", "incidents": []},
}


@hooks.tool()
def lookup_invoice(invoice_number: str) -> dict[str, Any]:
    """The invoice with this number: date, plan, amount, payment status and whether it was charged twice.

    An unknown number raises ``LookupError`` (the model reads it as the call's error).
    """
    invoice = INVOICES.get(invoice_number.strip().upper())
    if invoice is None:
        raise LookupError(f"no invoice {invoice_number}: ask the customer to check the number on their receipt email")
    return dict(invoice)


@hooks.tool()
def issue_refund(
    invoice_number: str, amount: float, reason: Literal["duplicate_charge", "refund_request"]
) -> dict[str, Any]:
    """Refund ``amount`` USD of an invoice to the card it was paid with; the refund is queued.

    Raises ``ValueError`` for an invoice already refunded or an amount above the invoice's. The
    definition asks the billing team to approve refunds above 100 USD before this runs.
    """
    invoice = lookup_invoice(invoice_number)
    if invoice["status"] == "refunded":
        raise ValueError(f"{invoice['number']} was already refunded")
    if amount > invoice["amount"]:
        raise ValueError(f"{amount:.2f} USD is more than {invoice['number']}'s {invoice['amount']:.2f} USD")
    return {
        "refund_id": f"RF-{invoice['number'][4:]}-{round(amount * 100)}",
        "invoice_number": invoice["number"],
        "amount": amount,
        "reason": reason,
        "status": "queued",
        "arrives_in": "5-7 business days",
    }


@hooks.tool()
async def service_status(service: Service) -> dict[str, Any]:
    """The status page's word on a Cloudlane service: operational, degraded or major_outage, and its
    open incidents (none: an empty list)."""
    await asyncio.sleep(0)  # a real version awaits the status page's HTTP API here
    return {"service": service, **STATUS[service]}
