"""The fleet page: the live workers, the accounts each watches, their logins a second
(``application.fleet``: the system's SystemAdmin only), updating live."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from application.fleet import fleet_status
from application.leases import FleetView
from application.result import Result
from infrastructure.http.console.chart import bars
from infrastructure.http.console.gate import Signed
from infrastructure.http.console.pages import Console, paged


async def fleet_of(console: Console, signed: Signed, fleet: FleetView | None) -> Result:
    result: Result = await console.call(lambda: fleet_status(fleet, signed.user, time.time()))
    return result


def live_fleet(data: dict[str, Any]) -> dict[str, str]:
    found = {
        "fleet.workers": str(len(data["workers"])),
        "fleet.accounts": str(data["accounts"]),
        "fleet.loginRate": rate(data["loginRate"]),
    }
    for worker in data["workers"]:
        key = worker["workerId"]
        found[f"{key}.accounts"] = str(worker["accounts"])
        found[f"{key}.loginRate"] = rate(worker["loginRate"])
    return found


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fleet_routes(api: FastAPI, console: Console, fleet: FleetView | None) -> None:
    console.fleet = fleet

    @api.get("/console/fleet", include_in_schema=False)
    async def page(request: Request) -> Response:
        signed = await console.require(request)
        result = await fleet_of(console, signed, fleet)
        if result.error is not None:
            return console.failed(signed, result.error)
        data: dict[str, Any] = result.data or {}
        chart = bars(
            "Accounts per worker",
            [(w["workerId"], float(w["accounts"])) for w in data["workers"]],
            "accounts",
        )
        page = paged(
            data.get("workers", []), request.query_params.get("page"), "/console/fleet", {}
        )
        return console.show(
            signed,
            "fleet.html",
            "fleet",
            fleet=data,
            page=page,
            rate=rate,
            chart=chart,
            live_src="/console/events?view=fleet",
        )
