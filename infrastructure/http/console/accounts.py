"""The accounts page (filter, search, pages), one account's page, and their actions.

The list is ``list-mail-accounts`` as the signed-in user; filtering and paging happen
on its answer, so a key sees here exactly the accounts it sees through the API. The
actions are ``reconnect-mail-account``, ``sync-account-now`` and
``disconnect-mail-account``, with their own checks (another tenant's account: 404).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response

from infrastructure.http.console.chart import bars
from infrastructure.http.console.gate import FormRefused, Signed
from infrastructure.http.console.pages import (
    PAGE_SIZE,
    Console,
    Page,
    Redirect,
    back_to,
    page_number,
)
from infrastructure.http.console.text import cleaned
from infrastructure.http.console.timeline import timeline_chart

ACTIONS = {
    "reconnect": ("reconnect-mail-account", "Reconnect", "Reconnect requested."),
    "sync": ("sync-account-now", "Sync now", "Sync requested."),
    "disconnect": ("disconnect-mail-account", "Disconnect", "Disconnected."),
}
BUTTONS = [(action, label) for action, (_, label, _) in ACTIONS.items()]
STATUSES = ["active", "auth_error", "reauth_required", "disconnected"]
MAX_SEARCH = 200


def live_fields(account: dict[str, Any]) -> dict[str, str]:
    """The values of one account that the page updates live, by ``data-live`` key."""
    health = account["health"]
    key = account["accountId"]
    return {
        f"{key}.status": str(account["status"]),
        f"{key}.watchState": str(account["watchState"]),
        f"{key}.tier": str(account["tier"]),
        f"{key}.lastSyncAt": _when(health["lastSyncAt"]),
        f"{key}.lastErrorKind": str(health["lastErrorKind"] or "-"),
        f"{key}.consecutiveFailures": str(health["consecutiveFailures"]),
    }


def summary(counts: dict[str, int]) -> dict[str, int]:
    """Accounts by status: the usual three always, any other that has accounts."""
    return {status: 0 for status in STATUSES} | counts


async def _page(
    console: Console, signed: Signed, q: str, status: str, number: int
) -> dict[str, Any] | Response:
    payload: dict[str, Any] = {"limit": PAGE_SIZE, "cursor": str(number * PAGE_SIZE)}
    payload |= ({"search": q} if q.strip() else {}) | ({"status": status} if status else {})
    result = await console.query(signed, "list-mail-accounts", payload)
    if result.error is not None:
        return console.failed(signed, result.error)
    assert result.data is not None
    return dict(result.data)


def account_routes(api: FastAPI, console: Console) -> None:
    @api.get("/console/accounts", include_in_schema=False)
    async def accounts(request: Request) -> Response:
        return await _accounts_page(console, request)

    @api.get("/console/accounts/{account_id}", include_in_schema=False)
    async def account(request: Request, account_id: str) -> Response:
        signed = await console.require(request)
        found = await _one(console, signed, account_id)
        if isinstance(found, Response):
            return found
        now = datetime.now(UTC)
        folders = found["health"]["folders"]
        ages = [(f["name"], _age(f["lastSyncAt"], now)) for f in folders]
        failures = [(f["name"], float(f["consecutiveFailures"])) for f in folders]
        chart = bars("Minutes since each folder's last sync", ages, "min")
        chart += bars("Consecutive failures per folder", failures, "")
        history = await console.query(
            signed, "get-mail-account-timeline", {"accountId": found["accountId"]}
        )
        if history.error is not None:
            return console.failed(signed, history.error)
        return console.show(
            signed,
            "account.html",
            "accounts",
            a=found,
            actions=BUTTONS,
            back=f"/console/accounts/{found['accountId']}",
            chart=chart,
            timeline=timeline_chart(history.data or {}, now),
            live_src=f"/console/events?view=accounts&ids={found['accountId']}",
        )

    @api.post("/console/accounts/{account_id}/{action}", include_in_schema=False)
    async def act(request: Request, account_id: str, action: str) -> Response:
        signed = await console.require(request)
        try:
            form = await console.gate.form(request, signed.session)
        except FormRefused as refused:
            return console.refused(signed, refused.status, refused.reason)
        if action not in ACTIONS:
            return console.refused(signed, 404, "No such action.")
        name, _, done = ACTIONS[action]
        result = await console.write(signed, name, {"accountId": account_id})
        if result.error is not None:
            return console.failed(signed, result.error)
        signed.session.flash = done
        return RedirectResponse(back_to(form.get("back"), "/console/accounts"), 303)


async def _accounts_page(console: Console, request: Request) -> Response:
    signed = await console.require(request)
    q = cleaned(request.query_params.get("q", ""), MAX_SEARCH)
    status = request.query_params.get("status", "")
    status = status if status in STATUSES else ""
    number = page_number(request.query_params.get("page"))
    answer = await _page(console, signed, q, status, number)
    if isinstance(answer, Response):
        return answer
    last = max(0, (answer["total"] - 1) // PAGE_SIZE)
    if number > last:  # past the end (the list shrank, or a made-up link): the last
        number = last
        answer = await _page(console, signed, q, status, number)
        if isinstance(answer, Response):
            return answer
    page = Page(
        answer["items"],
        number,
        answer["total"],
        PAGE_SIZE,
        "/console/accounts",
        {"q": q, "status": status},
    )
    ids = ",".join(a["accountId"] for a in page.items)
    return console.show(
        signed,
        "accounts.html",
        "accounts",
        page=page,
        q=q,
        status=status,
        statuses=STATUSES,
        summary=sorted(summary(answer["statusCounts"]).items()),
        actions=BUTTONS,
        back=page.link(page.number),
        live_src=f"/console/events?view=accounts&ids={ids}",
    )


async def _one(console: Console, signed: Signed, account_id: str) -> dict[str, Any] | Response:
    """The account as ``list-mail-accounts`` shows it to this user; 404 when it does not."""
    if not 0 < len(account_id) <= 64:
        return console.refused(signed, 404, "No such mail account.")
    payload = {"accountIds": [account_id], "limit": 1}
    result = await console.query(signed, "list-mail-accounts", payload)
    if result.error is not None:
        return console.failed(signed, result.error)
    assert result.data is not None
    if not result.data["items"]:
        return console.refused(signed, 404, "No such mail account.")
    return dict(result.data["items"][0])


def _when(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def _age(value: str | None, now: datetime) -> float:
    if not value:
        return 0.0
    at = datetime.fromisoformat(value)
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (now - at).total_seconds() / 60)


__all__ = ["Redirect", "account_routes", "live_fields", "summary"]
