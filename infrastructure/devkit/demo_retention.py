"""The demo's retention step: a ``note`` field kept 30 days then anonymized, a value
set, the clock moved 31 days on (the clock port, not a sleep), the sweeper run, and
the value read back as ``[anonymized]`` — with its expiry in the change feed."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from rich.markup import escape

from application.ports import Clock
from infrastructure.bootstrap import retention_sweeper
from infrastructure.cli.runtime import CliError, load_settings

NOTE = {
    "entityName": "contact",
    "fieldKey": "note",
    "field": {"type": "text", "maxLength": 500},
    "label": "Note",
    "retention": {"keepFor": "30d", "action": "anonymize"},
}


class Later:
    """The app's clock, ``ahead`` into the future."""

    def __init__(self, clock: Clock, ahead: timedelta) -> None:
        self.clock, self.ahead = clock, ahead

    def now(self) -> datetime:
        return self.clock.now() + self.ahead


def expire_by_retention(demo: Any) -> None:
    demo.step(
        "Retention: a value that expires",
        "note is kept 30 days, then anonymized. The clock port is moved 31 days on and "
        "the sweeper (which the workers run on a schedule, one at a time under a lease) "
        "records a CustomFieldValueExpired for the value.",
    )
    demo.write("define-tenant-field", NOTE)
    demo.columns.append("note")
    value = {"entityName": "contact", "entityId": "alice", "fieldKey": "note"}
    demo.write("set-custom-field", {**value, "value": "prefers calls after 5pm"}, demo.member)
    alice = demo.query("get-entity", {"entityName": "contact", "entityId": "alice"})
    before = escape(repr(alice["customFields"]["note"]))
    demo.console.print(f"  today:         alice.note = {before}", highlight=False)
    app = demo.app
    today = app.ctx
    app.ctx = dataclasses.replace(today, clock=Later(today.clock, timedelta(days=31)))
    try:
        sweeper = retention_sweeper(app, load_settings(redis_url=None), holder="demo")
        report = sweeper.run()
    finally:
        app.ctx = today
    if report is None:
        raise CliError("another sweeper holds the retention lease")
    mine = sum(n for (_, tenant, *_), n in report.counts.items() if tenant == demo.tenant)
    alice = demo.query("get-entity", {"entityName": "contact", "entityId": "alice"})
    note = alice["customFields"].get("note")
    demo.console.print(
        f"  31 days later: {mine} expired → alice.note = {escape(repr(note))}", highlight=False
    )
    if note != "[anonymized]":
        raise CliError(f"the note was not anonymized: {note!r}")
    items = app.feed.read(demo.admin, after=0, limit=1000).data["items"]
    expired = [i for i in items if i["type"] == "custom_field_value.expired"]
    last = expired[-1]["data"]
    demo.console.print(
        f"  feed: custom_field_value.expired {last['action']} {last['entityId']}.{last['fieldKey']}"
        f" → {escape(repr(last['value']))}",
        highlight=False,
    )
