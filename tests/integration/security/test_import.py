"""Imports are validated (``events import`` through ``eventstore.jsonl``, both backends).

Every event is checked against its class before anything is written: wrongly typed
fields, values the store cannot round-trip, and sealed tokens or blob refs of another
tenant or account are refused with their line number; the file is one transaction,
so a conflict in its last chunk leaves nothing of the earlier chunks.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from application import User
from application.app import App
from infrastructure.bootstrap import event_store
from infrastructure.eventstore.jsonl import BadRecord, ImportConflict, export_events, import_events
from tests.conftest import PG_DSN, drop_schema
from tests.support.later import later
from tests.support.results import ok

Record = dict[str, Any]
INGESTED = "tidings.mail.MessageIngested"
CONNECTED = "tidings.mail.MailAccountConnected"
DEFINED = "tidings.fields.FieldDefinitionDefined"


@pytest.fixture
def target(make_app: Callable[..., App], database_url: str, tmp_path: Any) -> Iterator[App]:
    """A second, empty store on the same backend."""
    if database_url.startswith("sqlite"):
        yield make_app(database_url=f"sqlite:///{tmp_path / 'target.db'}")
        return
    schema = "t_" + uuid.uuid4().hex[:12]
    app = make_app(database_url=f"{PG_DSN}?schema={schema}")
    yield app
    app.close()
    later(drop_schema, schema)


def account(app: App, admin: User, name: str = "Box") -> str:
    payload = {
        "provider": "imap",
        "displayName": name,
        "address": "box@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 143, "security": "none", "username": "box"},
        "secret": "pw",
    }
    account_id: str = ok(app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


@pytest.fixture
def records(app: App, admin: User, operator: User) -> list[Record]:
    """Tenant A's history: a field, two accounts, a message in the first."""
    field = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}
    ok(app.write("define-tenant-field", field, admin))
    first = account(app, admin, "First")
    account(app, admin, "Second")
    message = {
        "accountId": first,
        "providerMessageId": "emailid:1",
        "subject": "Tenant A's secret subject",
        "from": [{"name": "Ann", "address": "ann@a.example"}],
        "receivedAt": "2024-05-01T10:00:00Z",
        "sizeBytes": 10,
    }
    ok(app.write("ingest-message", message, operator))
    out = io.StringIO()
    export_events(event_store(app), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def lines(records: list[Record]) -> list[str]:
    return [json.dumps(r, ensure_ascii=False) + "\n" for r in records]


def first(records: list[Record], topic: str) -> Record:
    return next(r for r in records if r["topic"] == topic)


def refused(target: App, text: list[str], line: int, match: str) -> None:
    store = event_store(target)
    with pytest.raises(BadRecord, match=match) as bad:
        import_events(store, text, chunk_size=1)
    assert bad.value.line == line
    assert store.head() == 0


def test_an_untouched_export_imports(target: App, records: list[Record], admin: User) -> None:
    assert import_events(event_store(target), lines(records)) == len(records)
    target.projections.catch_up()
    # The keys stay in the source store (an export holds no key): the message is listed.
    items = ok(target.query("list-messages", {"limit": 5}, admin))["items"]
    assert len(items) == 1


@pytest.mark.parametrize(
    ("topic", "field", "value", "match"),
    [
        (DEFINED, "generation", "1", "generation"),
        (DEFINED, "required", 1, "required"),
        (DEFINED, "scope", "galaxy", "scope"),
        (DEFINED, "field", ["text"], "field"),
        (DEFINED, "tenant_id", 7, "tenant_id"),
        (INGESTED, "size_bytes", 1.5, "size_bytes"),
        (INGESTED, "size_bytes", 2**63, "2\\^53"),
        (INGESTED, "defects", "none", "defects"),
        (INGESTED, "state", "fine", "state"),
        (INGESTED, "subject", "a\x00b", "NUL"),
        (INGESTED, "subject", "\ud800", "surrogate"),
        (
            CONNECTED,
            "imap",
            {"deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
            "nested",
        ),
    ],
)
def test_wrongly_typed_events_are_refused_with_their_line(
    target: App, records: list[Record], topic: str, field: str, value: Any, match: str
) -> None:
    bad = first(records, topic)
    bad["state"][field] = value
    refused(target, lines(records), records.index(bad) + 1, match)


def test_numbers_json_cannot_round_trip_are_refused(target: App, records: list[Record]) -> None:
    text = lines(records)
    index = records.index(first(records, INGESTED))
    text[index] = text[index].replace('"size_bytes": 10', '"size_bytes": NaN')
    assert "NaN" in text[index]
    refused(target, text, index + 1, "finite")


def test_a_forged_event_for_another_tenant_with_its_tokens_is_refused(
    target: App, records: list[Record]
) -> None:
    # Tenant B's message carrying tenant A's sealed subject: refused, not decrypted for B.
    forged = first(records, INGESTED)
    forged["state"]["tenant_id"] = "t-mallory"
    refused(target, lines(records), records.index(forged) + 1, "another tenant")


def test_a_token_of_another_account_of_the_same_tenant_is_refused(
    target: App, records: list[Record]
) -> None:
    connected = [r for r in records if r["topic"] == CONNECTED]
    second = connected[1]["originatorId"]
    forged = first(records, INGESTED)
    forged["state"]["account_id"] = second  # first account's tokens, second account's message
    refused(target, lines(records), records.index(forged) + 1, "another tenant or account")


def test_an_account_event_with_another_tenants_name_is_refused(
    target: App, records: list[Record]
) -> None:
    connected = [r for r in records if r["topic"] == CONNECTED]
    connected[1]["state"]["display_name"] = connected[0]["state"]["display_name"]
    refused(target, lines(records), records.index(connected[1]) + 1, "another tenant or account")


def test_a_conflict_in_the_last_chunk_leaves_nothing(target: App, records: list[Record]) -> None:
    store = event_store(target)
    last = records[-1:]
    assert import_events(store, lines(last)) == 1  # the message event is taken already
    with pytest.raises(ImportConflict, match="nothing was imported"):
        import_events(store, lines(records), append=True, chunk_size=2)
    assert store.head() == 1
    [only] = store.read_raw(0, 10)
    assert (str(only.originator_id), only.originator_version) == (
        last[0]["originatorId"],
        last[0]["originatorVersion"],
    )


def test_an_event_moving_a_stream_to_another_tenant_is_refused(
    target: App, records: list[Record]
) -> None:
    connected = first(records, CONNECTED)
    forged = {
        **connected,
        "position": records[-1]["position"] + 1,
        "originatorVersion": 2,
        "topic": "tidings.mail.MailAccountDisconnected",
        "state": {"_v": 1, "timestamp": connected["state"]["timestamp"], "tenant_id": "t-b"},
    }
    refused(target, lines([*records, forged]), len(records) + 1, "another tenant")


def test_a_message_of_tenant_b_in_an_account_of_tenant_a_is_refused(
    target: App, records: list[Record]
) -> None:
    message = first(records, INGESTED)
    forged = {
        **message,
        "position": records[-1]["position"] + 1,
        "originatorId": str(uuid.uuid4()),
        "state": {
            **message["state"],
            "tenant_id": "t-b",  # its own tenant's (empty) values, another tenant's account
            **dict.fromkeys(("message_id_header", "references", "sender", "to", "cc"), ""),
            **dict.fromkeys(("subject", "snippet"), ""),
        },
    }
    refused(target, lines([*records, forged]), len(records) + 1, "account of another tenant")
