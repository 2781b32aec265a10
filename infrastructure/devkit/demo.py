"""``tidings demo``: the product's main flows, narrated, on the embedded default.

The demo is a sequence of steps. Each step is a function of one ``Demo`` — the app,
a fresh tenant and its users, the console, and what earlier steps left behind — so
later flows (mail: a private Dovecot, ingest, IDLE) are added as more steps in
``STEPS`` without touching these. Every run uses a new tenant, so the demo can run
again and again on the same ``./tidings.db``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from application import User
from application.app import App
from infrastructure.cli.output import describe_error, event_progress, out
from infrastructure.cli.projections import TaskProgress, status_table
from infrastructure.cli.runtime import CliError, load_settings, location, opened_app
from infrastructure.devkit.demo_mail import MailDemo
from infrastructure.devkit.demo_mailbox import MailboxDemo
from infrastructure.devkit.demo_retention import expire_by_retention

if TYPE_CHECKING:
    from infrastructure.devkit.demo_webhooks import WebhookDemo

ENTITY = "contact"

FIELDS: dict[str, dict[str, Any]] = {
    "tier": {
        "field": {"type": "enum", "options": ["gold", "silver", "bronze"]},
        "searchable": True,
        "label": "Tier",
    },
    "score": {"field": {"type": "number", "min": 0, "max": 100}, "label": "Lead score"},
    "newsletter": {"field": {"type": "boolean"}, "label": "Newsletter"},
    "birthday": {"field": {"type": "date"}, "label": "Birthday"},
    "website": {"field": {"type": "url"}, "label": "Website"},
    "budget": {"field": {"type": "money", "currency": "EUR"}, "label": "Budget"},
    "tags": {
        "field": {"type": "multi_enum", "options": ["lead", "partner", "press"]},
        "label": "Tags",
    },
}

VALUES: dict[str, dict[str, Any]] = {
    "alice": {
        "tier": "gold",
        "score": 92,
        "newsletter": True,
        "birthday": "1990-04-12",
        "website": "https://alice.example",
        "budget": {"amount": "1200.00", "currency": "EUR"},
        "tags": ["lead", "partner"],
    },
    "bob": {
        "tier": "silver",
        "score": 67,
        "newsletter": False,
        "budget": {"amount": 250, "currency": "EUR"},
    },
    "carol": {
        "tier": "gold",
        "score": 78,
        "website": "http://carol.example/blog",
        "tags": ["press"],
    },
}

# Values the strict validation turns away (no event is written for them).
REJECTED: list[tuple[str, str, Any]] = [
    ("bob", "score", "42"),
    ("bob", "tier", "platinum"),
    ("carol", "birthday", "2023-02-30"),
    ("carol", "budget", {"amount": "10", "currency": "USD"}),
]


class DemoFailed(Exception):
    pass


@dataclass
class Demo:
    app: App
    console: Console
    tenant: str = field(default_factory=lambda: "demo-" + uuid.uuid4().hex[:6])
    columns: list[str] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)
    number: int = 0

    @property
    def admin(self) -> User:
        return User(id="ada", tenant_id=self.tenant, roles=frozenset({"TenantAdmin"}))

    @property
    def member(self) -> User:
        return User(id="max", tenant_id=self.tenant, roles=frozenset({"TenantMember"}))

    def step(self, title: str, story: str) -> None:
        self.number += 1
        self.console.print()
        self.console.rule(f"[bold]{self.number}. {title}", align="left")
        self.console.print(story, style="dim", highlight=False)

    def write(self, handler: str, payload: dict[str, Any], user: User | None = None) -> Any:
        result = self.app.write(handler, payload, user or self.admin)
        if result.error is not None:
            raise DemoFailed(f"{handler}: {describe_error(result.error)}")
        return result.data

    def query(self, handler: str, payload: dict[str, Any]) -> Any:
        self.app.projections.catch_up()
        result = self.app.query(handler, payload, self.member)
        if result.error is not None:
            raise DemoFailed(f"{handler}: {describe_error(result.error)}")
        return result.data


def _show(value: Any) -> str:
    """A value as a table cell: text, never markup (``[anonymized]`` is not a style)."""
    if isinstance(value, dict) and set(value) == {"amount", "currency"}:
        return escape(f"{value['amount']} {value['currency']}")
    if isinstance(value, list):
        return escape(", ".join(map(str, value)))
    return json.dumps(value) if isinstance(value, bool) else escape(str(value))


def contacts_table(demo: Demo, title: str) -> Table:
    """One row per field, one column per contact: the cascade shows as a row of dashes."""
    items = demo.query("list-entities", {"entityName": ENTITY})["items"]
    table = Table(title=title, title_justify="left")
    table.add_column("field", style="bold")
    for item in items:
        table.add_column(item["entityId"])
    for key in demo.columns:
        label = f"{key} [red](deleted)[/]" if key in demo.deleted else key
        table.add_row(
            label,
            *(
                _show(item["customFields"][key]) if key in item["customFields"] else "[dim]—[/]"
                for item in items
            ),
        )
    return table


def _options(field: dict[str, Any]) -> str:
    parts = []
    for name, value in field.items():
        if name == "options":
            parts.append(" | ".join(value))
        elif name != "type":
            parts.append(f"{name} {value}" if name != "currency" else str(value))
    return ", ".join(parts)


# --- custom fields -------------------------------------------------------------------


def define_fields(demo: Demo) -> None:
    demo.step(
        "Define custom fields",
        f"A TenantAdmin of {demo.tenant} adds fields of seven "
        f"types to '{ENTITY}'. Each define appends a FieldDefinitionDefined event.",
    )
    for key, spec in FIELDS.items():
        demo.write("define-tenant-field", {"entityName": ENTITY, "fieldKey": key, **spec})
        demo.columns.append(key)
        extra = " · searchable" if spec.get("searchable") else ""
        demo.console.print(
            f"  [green]✓[/] {key:<11} {spec['field']['type']:<10} {_options(spec['field'])}{extra}",
            highlight=False,
        )
    listed = demo.query("list-field-definitions", {"entityName": ENTITY})["items"]
    demo.console.print(f"  list-field-definitions → {len(listed)} active definitions")


def set_values(demo: Demo) -> None:
    demo.step(
        "Set values",
        "A TenantMember sets values; each is validated strictly against "
        "its definition — no coercion, and a rejected value writes no event.",
    )
    for contact, values in VALUES.items():
        for key, value in values.items():
            demo.write(
                "set-custom-field",
                {"entityName": ENTITY, "entityId": contact, "fieldKey": key, "value": value},
                demo.member,
            )
        demo.console.print(f"  [green]✓[/] {contact:<6} {len(values)} values")
    for contact, key, value in REJECTED:
        result = demo.app.write(
            "set-custom-field",
            {"entityName": ENTITY, "entityId": contact, "fieldKey": key, "value": value},
            demo.member,
        )
        if result.error is None:
            raise DemoFailed(f"{key} = {value!r} was accepted")
        issues = "; ".join(result.error.details.get("issues", [])) or result.error.message
        demo.console.print(
            f"  [red]✗[/] {contact}.{key} = {json.dumps(value)} → "
            f"{result.error.status} {result.error.code}: {issues}",
            highlight=False,
        )


def show_contacts(demo: Demo) -> None:
    demo.step(
        "Query the read model",
        "list-entities reads the projected values; tier is searchable, so it can filter.",
    )
    demo.console.print(contacts_table(demo, "contacts"))
    gold = demo.query("list-entities", {"entityName": ENTITY, "where": {"tier": "gold"}})
    names = ", ".join(item["entityId"] for item in gold["items"])
    demo.console.print(f'  where tier = "gold" → {names}')


def delete_field(demo: Demo) -> None:
    demo.step(
        "Delete a field: the cascade",
        "Deleting tier appends FieldDefinitionDeleted; "
        "the projection removes tier from every contact in one set-based UPDATE.",
    )
    started = time.perf_counter()
    demo.write("delete-tenant-field", {"entityName": ENTITY, "fieldKey": "tier"})
    demo.app.projections.catch_up()
    demo.deleted.add("tier")
    demo.console.print(
        f"  [green]✓[/] deleted and projected in {(time.perf_counter() - started) * 1000:.1f} ms"
    )
    demo.console.print(contacts_table(demo, "contacts after the delete"))
    alice = demo.query("get-entity", {"entityName": ENTITY, "entityId": "alice"})
    demo.console.print(f"  get-entity alice → keys {sorted(alice['customFields'])} (no tier)")
    result = demo.app.query(
        "list-entities", {"entityName": ENTITY, "where": {"tier": "gold"}}, demo.member
    )
    if result.error is not None:
        demo.console.print(f'  where tier = "gold" → {result.error.status} {result.error.code}')


def redefine_field(demo: Demo) -> None:
    demo.step(
        "Re-define it: it starts empty",
        "tier is defined again, now as text: the same "
        "stream, generation 2. Earlier values never come back.",
    )
    defined = demo.write(
        "define-tenant-field",
        {
            "entityName": ENTITY,
            "fieldKey": "tier",
            "field": {"type": "text", "maxLength": 20},
            "searchable": True,
            "label": "Tier",
        },
    )
    demo.deleted.discard("tier")
    demo.console.print(f"  [green]✓[/] tier is text now, generation {defined['generation']}")
    demo.console.print(contacts_table(demo, "contacts right after the re-define"))
    demo.write(
        "set-custom-field",
        {"entityName": ENTITY, "entityId": "bob", "fieldKey": "tier", "value": "platinum"},
        demo.member,
    )
    demo.console.print(contacts_table(demo, 'after setting bob\'s tier to "platinum"'))


def rebuild_and_compare(demo: Demo) -> None:
    demo.step(
        "Rebuild from the log",
        "The read model is rebuilt from position 0 into fresh "
        "tables while the old ones serve, then swapped in: the answers are the same.",
    )
    before = demo.query("list-entities", {"entityName": ENTITY})
    with event_progress() as bar:
        demo.app.projections.rebuild(None, TaskProgress(bar, "rebuild"))
    after = demo.query("list-entities", {"entityName": ENTITY})
    if after != before:
        raise DemoFailed("the rebuilt read model answers differently")
    demo.console.print("  [green]✓[/] list-entities is identical after the rebuild")


def show_status(demo: Demo) -> None:
    demo.step("Projection status", "Each read model's position in the log, and its lag.")
    rows = demo.app.projections.status()
    demo.console.print(
        status_table(
            [{"name": s.name, "position": s.position, "head": s.head, "lag": s.lag} for s in rows]
        )
    )


STEPS: Sequence[Callable[[Demo], None]] = (
    define_fields,
    set_values,
    show_contacts,
    expire_by_retention,
    delete_field,
    redefine_field,
    rebuild_and_compare,
    show_status,
)


def _with_mail(
    mail: MailDemo, hooks: WebhookDemo | None = None
) -> Sequence[Callable[[Demo], None]]:
    """The whole story: mail first, then custom fields, new mail by IDLE (delivered to a
    webhook), the cascade."""
    webhook_steps: list[Callable[[Demo], None]] = (
        [lambda _: hooks.subscribe()] if hooks is not None else []
    )
    delivered_steps: list[Callable[[Demo], None]] = (
        [lambda _: hooks.delivered()] if hooks is not None else []
    )
    return (
        lambda _: mail.start_mailbox(),
        lambda _: mail.connect_and_ingest(),
        lambda _: mail.show_inbox(),
        lambda _: mail.show_content(),
        lambda _: MailboxDemo(mail).whole_mailbox(),
        define_fields,
        set_values,
        show_contacts,
        *webhook_steps,
        lambda _: mail.idle_arrival(),
        *delivered_steps,
        lambda _: mail.send_reply(),
        expire_by_retention,
        delete_field,
        redefine_field,
        rebuild_and_compare,
        show_status,
    )


def demo(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Keep the demo's SQLite database here instead of TIDINGS_DATABASE_URL "
            "(default ./tidings.db)."
        ),
    ] = None,
    mail: Annotated[
        bool, typer.Option("--mail/--no-mail", help="Include the mail flow (needs Dovecot).")
    ] = True,
) -> None:
    """Walk through the product on the embedded store: a private Dovecot mailbox ingested
    and watched by IDLE; custom fields defined, set, deleted (the cascade), re-defined."""
    overrides: dict[str, Any] = {"redis_url": None, "allow_private_hosts": True}  # loopback Dovecot
    if data_dir is not None:
        overrides["database_url"] = f"sqlite:///{data_dir.resolve() / 'tidings.db'}"
        overrides["blob_dir"] = data_dir / "tidings-blobs"
    console = out()
    with opened_app(**overrides) as app:
        run = Demo(app=app, console=console)
        mail_demo = MailDemo(run, load_settings(**overrides)) if mail else None
        hooks = None
        if mail:
            # The demo's webhook receiver serves the HTTP API: imported here, so the rest of
            # the command line (a worker above all) does not carry the web stack.
            from infrastructure.devkit.demo_webhooks import WebhookDemo  # noqa: PLC0415

            hooks = WebhookDemo(run, load_settings(**overrides))
        steps = _with_mail(mail_demo, hooks) if mail_demo is not None else STEPS
        console.print(
            f"[bold]tidings demo[/] · {'mail and ' if mail else ''}custom fields · "
            f"{location(app)} · "
            f"tenant [cyan]{run.tenant}[/] (fresh for this run)",
            highlight=False,
        )
        try:
            for step in steps:
                step(run)
            # A key for the console, in the demo's tenant, so its accounts are there to see.
            console_key = run.write("create-api-key", {"name": "console", "roles": ["TenantAdmin"]})
        except DemoFailed as failed:
            raise CliError(f"demo step {run.number} failed: {failed}") from None
        finally:
            if mail_demo is not None:
                mail_demo.close()
            if hooks is not None:
                hooks.close()
    console.print()
    console.print("Try it yourself:", style="bold")
    env = f"TIDINGS_DATABASE_URL={overrides['database_url']} " if data_dir is not None else ""
    user = json.dumps({"id": "ada", "tenantId": run.tenant, "roles": ["TenantAdmin"]})
    payload = json.dumps({"entityName": ENTITY, "entityId": "bob"})
    console.print(
        f"  {env}tidings query get-entity --as '{user}' --payload '{payload}'",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"  {env}tidings serve, then open the console: http://127.0.0.1:8080/console\n"
        f"  and sign in with the key {console_key['key']}",
        highlight=False,
        soft_wrap=True,
    )
