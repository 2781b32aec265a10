"""The tenants page: every tenant's mail health (``list-tenant-health``: the system
tenant's SystemAdmin only), a page of tenants at a time."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from infrastructure.http.console.pages import PAGE_SIZE, Console, Page, page_number


def tenant_routes(api: FastAPI, console: Console) -> None:
    @api.get("/console/tenants", include_in_schema=False)
    async def tenants(request: Request) -> Response:
        signed = await console.require(request)
        number = page_number(request.query_params.get("page"))
        payload = {"limit": PAGE_SIZE, "cursor": str(number * PAGE_SIZE)}
        result = await console.query(signed, "list-tenant-health", payload)
        if result.error is not None:
            return console.failed(signed, result.error)
        assert result.data is not None
        page = Page(
            result.data["items"], number, result.data["total"], PAGE_SIZE, "/console/tenants", {}
        )
        return console.show(signed, "tenants.html", "tenants", page=page)
