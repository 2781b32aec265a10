"""The projections page (each read model's position, the log's head, lag, quarantined
events with their reason, and retry) and the outbox page (``list-outbound``, by state,
a page at a time).

The read models are the whole installation's: ``application.read_models`` shows them to
a SystemAdmin of the system tenant only (403 for anyone else), and retries for them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response

from application import read_models
from infrastructure.http.console.chart import bars
from infrastructure.http.console.gate import FormRefused
from infrastructure.http.console.pages import Console, paged

OUTBOX_STATES = ["queued", "sending", "sent", "retrying", "failed", "canceled", "uncertain"]
OUTBOX_LIMIT = 500
QUARANTINE_SHOWN = 200
RETRIED = {
    "applied": "The event was applied and left the quarantine.",
    "failed": "The event failed again; its new error is shown.",
}


def read_model_routes(api: FastAPI, console: Console) -> None:
    projections = console.app.projections

    @api.get("/console/projections", include_in_schema=False)
    async def status(request: Request) -> Response:
        signed = await console.require(request)
        result = await console.call(lambda: read_models.status(projections, signed.user))
        if result.error is not None:
            return console.failed(signed, result.error)
        held = await console.call(
            lambda: read_models.quarantined(projections, signed.user, QUARANTINE_SHOWN)
        )
        rows = result.data["readModels"]
        chart = bars("Lag per read model", [(r["name"], float(r["lag"])) for r in rows], "events")
        return console.show(
            signed,
            "projections.html",
            "projections",
            rows=rows,
            held=held.data["events"] if held.data is not None else [],
            chart=chart,
            live_src="/console/events?view=projections",
        )

    @api.post("/console/projections/{name}/{position}/retry", include_in_schema=False)
    async def retry(request: Request, name: str, position: str) -> Response:
        signed = await console.require(request)
        try:
            await console.gate.form(request, signed.session)
        except FormRefused as refused:
            return console.refused(signed, refused.status, refused.reason)
        if not position.isdigit() or len(position) > 18:
            return console.refused(signed, 404, "No such quarantined event.")
        result = await console.call(
            lambda: read_models.retry(projections, signed.user, name, int(position))
        )
        if result.error is not None:
            return console.failed(signed, result.error)
        signed.session.flash = RETRIED[result.data["outcome"]]
        return RedirectResponse("/console/projections", 303)

    @api.get("/console/outbox", include_in_schema=False)
    async def outbox(request: Request) -> Response:
        signed = await console.require(request)
        state = request.query_params.get("state", "")
        state = state if state in OUTBOX_STATES else ""
        payload: dict[str, Any] = {"limit": OUTBOX_LIMIT} | ({"state": state} if state else {})
        result = await console.query(signed, "list-outbound", payload)
        if result.error is not None:
            return console.failed(signed, result.error)
        assert result.data is not None
        page = paged(
            result.data["items"],
            request.query_params.get("page"),
            "/console/outbox",
            {"state": state},
        )
        return console.show(
            signed, "outbox.html", "outbox", page=page, state=state, states=OUTBOX_STATES
        )
