"""The webhooks pages: the tenant's endpoints, one endpoint's deliveries by state (a
page of ``PAGE`` at a time, after a sequence), their latency, and redeliver.

``list-webhooks``, ``list-webhook-deliveries`` and ``redeliver-webhook`` as the
signed-in user: only a tenant's admins manage its webhooks, and another tenant's
webhook or delivery is the handlers' 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response

from infrastructure.http.console.chart import bars
from infrastructure.http.console.gate import FormRefused
from infrastructure.http.console.pages import Console, back_to, paged

STATES = ["pending", "delivered", "dead"]
PAGE = 50


def latency(delivery: dict[str, Any]) -> float | None:
    """Seconds from a delivery's creation to its success, when it succeeded."""
    if not delivery.get("deliveredAt") or not delivery.get("createdAt"):
        return None
    created = datetime.fromisoformat(delivery["createdAt"])
    delivered = datetime.fromisoformat(delivery["deliveredAt"])
    return max(0.0, (delivered - created).total_seconds())


def webhook_routes(api: FastAPI, console: Console) -> None:
    @api.get("/console/webhooks", include_in_schema=False)
    async def webhooks(request: Request) -> Response:
        signed = await console.require(request)
        result = await console.query(signed, "list-webhooks", {})
        if result.error is not None:
            return console.failed(signed, result.error)
        assert result.data is not None
        page = paged(
            result.data["webhooks"], request.query_params.get("page"), "/console/webhooks", {}
        )
        return console.show(signed, "webhooks.html", "webhooks", page=page)

    @api.get("/console/webhooks/{webhook_id}", include_in_schema=False)
    async def deliveries(request: Request, webhook_id: str) -> Response:
        signed = await console.require(request)
        state = request.query_params.get("state", "dead")
        state = state if state in STATES else "dead"
        raw_after = request.query_params.get("after", "0")
        after = int(raw_after) if raw_after.isdigit() and len(raw_after) < 16 else 0
        payload = {"webhookId": webhook_id, "state": state, "after": after, "limit": PAGE}
        result = await console.query(signed, "list-webhook-deliveries", payload)
        if result.error is not None:
            return console.failed(signed, result.error)
        assert result.data is not None
        rows: list[dict[str, Any]] = result.data["deliveries"]
        timed = [(str(d["sequence"]), latency(d)) for d in rows]
        chart = bars(
            "Seconds from event to delivery",
            [(label, value) for label, value in timed if value is not None],
            "s",
        )
        return console.show(
            signed,
            "deliveries.html",
            "webhooks",
            webhook_id=webhook_id,
            state=state,
            states=STATES,
            rows=rows,
            after=after,
            next_after=result.data["nextAfter"] if len(rows) == PAGE else None,
            chart=chart if state == "delivered" else "",
            back=f"/console/webhooks/{webhook_id}?state={state}&after={after}",
        )

    @api.post("/console/deliveries/{delivery_id}/redeliver", include_in_schema=False)
    async def redeliver(request: Request, delivery_id: str) -> Response:
        signed = await console.require(request)
        try:
            form = await console.gate.form(request, signed.session)
        except FormRefused as refused:
            return console.refused(signed, refused.status, refused.reason)
        result = await console.write(signed, "redeliver-webhook", {"deliveryId": delivery_id})
        if result.error is not None:
            return console.failed(signed, result.error)
        signed.session.flash = "Redelivery queued."
        return RedirectResponse(back_to(form.get("back"), "/console/webhooks"), 303)
