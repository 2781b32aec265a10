"""The projections page (each read model's position, the log's head, lag, quarantined
count) and the outbox page (``list-outbound``, by state, a page at a time).

The read models are the whole installation's, not a tenant's: only a SystemAdmin of
the system tenant sees them (the same rule as the operator's CLI, which runs with the
installation's own credentials); anyone else gets 403.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from infrastructure.http.console.chart import bars
from infrastructure.http.console.live import may_see_read_models
from infrastructure.http.console.pages import Console, paged

OUTBOX_STATES = ["queued", "sending", "sent", "retrying", "failed", "canceled", "uncertain"]
OUTBOX_LIMIT = 500


def read_model_routes(api: FastAPI, console: Console) -> None:
    @api.get("/console/projections", include_in_schema=False)
    async def projections(request: Request) -> Response:
        signed = await console.require(request)
        if not may_see_read_models(signed):
            return console.refused(
                signed, 403, "The read models are shown to the system tenant's SystemAdmin."
            )
        rows = await console.call(console.app.projections.status)
        chart = bars("Lag per read model", [(row.name, float(row.lag)) for row in rows], "events")
        return console.show(
            signed,
            "projections.html",
            "projections",
            rows=rows,
            chart=chart,
            live_src="/console/events?view=projections",
        )

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
