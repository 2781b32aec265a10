"""Rebuild and catch-up throughput: the mail log's seeder, the strong raw loop and
eventsourcing's own ``ProjectionRunner``, for ``bench/projections.py``.

The raw loop is what a hand-written projector of the same read models costs: pages of
``PAGE`` stored events read with plain SQL, orjson-decoded, then per page one set-based
statement per table (``INSERT … SELECT FROM unnest(...)`` on PostgreSQL, one
``executemany`` on SQLite) and one tracking update, in one transaction. It keeps the
read models tidings keeps — custom-field values with the clock of when each was last set
(or messages, threads and account counts) and the change feed (one row per public
event, numbered per tenant) — but none of tidings' guarantees: no definition check, no
quarantine, no savepoints, state in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from eventsourcing.application import Application
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from eventsourcing.projection import Projection as EsProjection
from eventsourcing.projection import ProjectionRunner as EsProjectionRunner
from eventsourcing.utils import register_topic

from bench._common import Scratch, raw_connection
from domain.custom_field_values import CustomFieldValueCleared, CustomFieldValueSet
from domain.events import DomainEvent
from domain.field_definition import FieldDefinitionDeleted, definition_id
from domain.mail_account import MailAccountConnected
from domain.message import MessageIngested, message_id
from infrastructure.eventstore.recorder import EVENTS_TABLE

PAGE = 5000
SET_TOPIC = CustomFieldValueSet.TOPIC
CLEAR_TOPIC = CustomFieldValueCleared.TOPIC
MESSAGE_TOPIC = MessageIngested.TOPIC
DELETED_TOPIC = FieldDefinitionDeleted.TOPIC
_ITEM_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:tidings:feed-item").bytes


# --- the mail log -------------------------------------------------------------------------


class MailSeeder:
    """Connected accounts and their ingested messages, built directly (sealed as the
    ingester seals them) and appended in large chunks. Each account's sealed fields come
    from a small pool of tokens sealed once, so seeding a million messages is not a
    million encryptions; every token is still a real one under the account's key."""

    def __init__(self, app: Any, *, tenants: int = 4, accounts: int = 40, seed: int = 5) -> None:
        self.app = app
        self.rng = random.Random(seed)
        self.tenants = [f"mail-tenant-{i}" for i in range(tenants)]
        self.accounts: list[tuple[str, str]] = []  # (tenant, account id)
        self.pools: dict[str, list[dict[str, str]]] = {}
        self.threads: dict[str, list[str]] = {}
        self.sent: dict[str, int] = {}
        self.now = datetime(2025, 1, 1, tzinfo=UTC)
        self.appended = 0
        for i in range(accounts):
            tenant = self.tenants[i % tenants]
            account_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
            self.accounts.append((tenant, account_id))

    def _tick(self) -> datetime:
        self.now += timedelta(milliseconds=3)
        return self.now

    def _pool(self, tenant: str, account_id: str) -> list[dict[str, str]]:
        seal = self.app.ctx.mail.cipher.sealer(tenant, account_id)
        pool = []
        for i in range(16):
            who = orjson.dumps([{"name": f"Sender {i}", "address": f"s{i}@example.com"}])
            pool.append(
                {
                    "message_id_header": seal(f"<m{i}@example.com>"),
                    "references": seal("[]"),
                    "sender": seal(who.decode()),
                    "to": seal('[{"name": "Me", "address": "me@example.com"}]'),
                    "cc": seal("[]"),
                    "subject": seal(f"Subject number {i} about the quarterly numbers"),
                    "snippet": seal(f"Hello, this is snippet {i} of a fairly ordinary message"),
                }
            )
        return pool

    def seed(self, target: int, chunk: int = 5000) -> None:
        store = self.app.ctx.store
        pending: list[DomainEvent] = []
        for tenant, account_id in self.accounts:
            self.pools[account_id] = self._pool(tenant, account_id)
            self.threads[account_id] = []
            self.sent[account_id] = 0
            pool = self.pools[account_id][0]
            pending.append(
                MailAccountConnected(
                    originator_id=uuid.UUID(account_id),
                    originator_version=1,
                    timestamp=self._tick(),
                    tenant_id=tenant,
                    owner_user_id=None,
                    scope="tenant",
                    provider="imap",
                    auth_method="password",
                    display_name=pool["subject"],
                    address=pool["sender"],
                    imap={"host": "imap.example.com", "port": 993, "security": "ssl"},
                    trusted_authserv_id=None,
                )
            )
        while self.appended + len(pending) < target:
            pending.append(self._message())
            if len(pending) >= chunk:
                store.append(pending)
                self.appended += len(pending)
                pending = []
        if pending:
            store.append(pending)
            self.appended += len(pending)

    def _message(self) -> MessageIngested:
        rng = self.rng
        tenant, account_id = self.accounts[min(int(rng.expovariate(0.08)), len(self.accounts) - 1)]
        n = self.sent[account_id] = self.sent[account_id] + 1
        threads = self.threads[account_id]
        if not threads or rng.random() < 0.35:  # about three messages a thread
            threads.append(uuid.UUID(int=rng.getrandbits(128)).hex)
        thread = threads[-1] if rng.random() < 0.7 else rng.choice(threads)
        sealed = rng.choice(self.pools[account_id])
        now = self._tick()
        provider_id = f"fp2:{account_id[:8]}:{n}"
        return MessageIngested(
            originator_id=message_id(account_id, provider_id),
            originator_version=1,
            timestamp=now,
            tenant_id=tenant,
            account_id=account_id,
            provider_message_id=provider_id,
            thread_key=thread,
            received_at=(now - timedelta(seconds=rng.randrange(60))).strftime("%Y-%m-%dT%H:%M:%SZ"),
            body_ref=hashlib.sha256(provider_id.encode()).hexdigest(),
            size_bytes=rng.randrange(1_000, 200_000),
            folder="INBOX",
            state="ok",
            defects=[],
            extra={},
            **sealed,
        )


# --- the raw loop -------------------------------------------------------------------------


def item_id(originator_id: str, version: int) -> str:
    """The feed's item id (uuid5 of the event's identity), computed with hashlib."""
    digest = bytearray(
        hashlib.sha1(_ITEM_NAMESPACE + f"{originator_id}/{version}".encode()).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


def _micros(timestamp: str) -> int:
    """An event's ISO time as microseconds since the epoch (the clock's ``set_at``)."""
    at = datetime.fromisoformat(timestamp)
    return (at - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@contextlib.contextmanager
def _transaction(conn: Any, pg: bool) -> Iterator[Any]:
    if pg:
        with conn.transaction(), conn.cursor() as cur:
            yield cur
        return
    conn.execute("BEGIN IMMEDIATE")
    cur = conn.cursor()
    try:
        yield cur
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class _RawTables:
    """The raw loop's statements on one backend (arrays travel in binary: psycopg's text
    format escapes each element through a regular expression)."""

    def __init__(self, pg: bool) -> None:
        self.pg = pg
        jsonb = "JSONB" if pg else "TEXT"
        self.create = [
            "DROP TABLE IF EXISTS raw_values",
            "DROP TABLE IF EXISTS raw_value_clock",
            "DROP TABLE IF EXISTS raw_feed",
            "DROP TABLE IF EXISTS raw_messages",
            "DROP TABLE IF EXISTS raw_threads",
            "DROP TABLE IF EXISTS raw_accounts",
            "DROP TABLE IF EXISTS raw_tracking",
            "CREATE TABLE raw_values (tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL,"
            f" entity_id TEXT NOT NULL, fields {jsonb} NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id))",
            # The retention clock, laid out as tidings' (one B-tree, keyed by definition).
            "CREATE TABLE raw_value_clock (definition_id TEXT NOT NULL,"
            " generation INTEGER NOT NULL, tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL,"
            " entity_id TEXT NOT NULL, field_key TEXT NOT NULL, set_at BIGINT NOT NULL,"
            " PRIMARY KEY (definition_id, generation, tenant_id, entity_name, entity_id,"
            f" field_key)){'' if pg else ' WITHOUT ROWID'}",
            "CREATE TABLE raw_feed (tenant_id TEXT NOT NULL, sequence BIGINT NOT NULL,"
            " item_id TEXT NOT NULL, type TEXT NOT NULL, occurred_at TEXT NOT NULL,"
            " account_id TEXT, data TEXT NOT NULL, position BIGINT NOT NULL,"
            " PRIMARY KEY (tenant_id, sequence))",
            "CREATE UNIQUE INDEX raw_feed_item ON raw_feed (item_id)",
            "CREATE TABLE raw_messages (message_id TEXT PRIMARY KEY, account_id TEXT NOT NULL,"
            " tenant_id TEXT NOT NULL, thread_key TEXT NOT NULL, sender TEXT NOT NULL,"
            " subject TEXT NOT NULL, snippet TEXT NOT NULL, received_at TEXT NOT NULL,"
            " size_bytes BIGINT NOT NULL)",
            "CREATE INDEX raw_messages_recent ON raw_messages (tenant_id, received_at, message_id)",
            "CREATE INDEX raw_messages_account ON raw_messages (account_id)",
            "CREATE TABLE raw_threads (account_id TEXT NOT NULL, thread_key TEXT NOT NULL,"
            " message_count INTEGER NOT NULL, last_received_at TEXT NOT NULL,"
            " PRIMARY KEY (account_id, thread_key))",
            "CREATE TABLE raw_accounts (account_id TEXT PRIMARY KEY,"
            " message_count INTEGER NOT NULL)",
            "CREATE TABLE raw_tracking (name TEXT PRIMARY KEY, position BIGINT NOT NULL)",
            "INSERT INTO raw_tracking VALUES ('raw', 0)",
        ]
        p = "%s" if pg else "?"
        position = "notification_id" if pg else "rowid"
        self.select = (
            f"SELECT {position}, originator_id, originator_version, topic, state"
            f" FROM {EVENTS_TABLE} WHERE {position} > {p} ORDER BY {position} LIMIT {PAGE}"
        )
        self.track = f"UPDATE raw_tracking SET position = {p} WHERE name = 'raw'"
        self.clock_forget = f"DELETE FROM raw_value_clock WHERE definition_id = {p}"
        clock_conflict = (
            " ON CONFLICT (definition_id, generation, tenant_id, entity_name, entity_id,"
            " field_key) DO UPDATE SET set_at = excluded.set_at"
        )
        if pg:
            self.clock_stop = (
                "DELETE FROM raw_value_clock AS c USING unnest(%b::text[], %b::int[],"
                " %b::text[], %b::text[], %b::text[], %b::text[]) AS u(d, g, t, e, i, k)"
                " WHERE c.definition_id = u.d AND c.generation = u.g AND c.tenant_id = u.t"
                " AND c.entity_name = u.e AND c.entity_id = u.i AND c.field_key = u.k"
            )
            self.clock_start = (
                "INSERT INTO raw_value_clock SELECT * FROM unnest(%b::text[], %b::int[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[])" + clock_conflict
            )
        else:
            self.clock_stop = (
                "DELETE FROM raw_value_clock WHERE definition_id = ? AND generation = ?"
                " AND tenant_id = ? AND entity_name = ? AND entity_id = ? AND field_key = ?"
            )
            self.clock_start = (
                "INSERT INTO raw_value_clock VALUES (?, ?, ?, ?, ?, ?, ?)" + clock_conflict
            )
        if pg:
            self.values = (
                "INSERT INTO raw_values (tenant_id, entity_name, entity_id, fields)"
                " SELECT t, e, i, jsonb_object_agg(k, v::jsonb ORDER BY o)"
                " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::int[]) AS u(t, e, i, k, v, o) GROUP BY t, e, i"
                " ON CONFLICT (tenant_id, entity_name, entity_id)"
                " DO UPDATE SET fields = raw_values.fields || excluded.fields"
            )
            self.feed = (
                "INSERT INTO raw_feed SELECT * FROM unnest(%b::text[], %b::bigint[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[])"
            )
            self.messages = (
                "INSERT INTO raw_messages SELECT * FROM unnest(%b::text[], %b::text[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::bigint[]) ON CONFLICT (message_id) DO NOTHING"
            )
            self.threads = (
                "INSERT INTO raw_threads SELECT * FROM unnest(%b::text[], %b::text[],"
                " %b::int[], %b::text[]) ON CONFLICT (account_id, thread_key) DO UPDATE SET"
                " message_count = raw_threads.message_count + excluded.message_count,"
                " last_received_at = greatest(raw_threads.last_received_at,"
                " excluded.last_received_at)"
            )
            self.accounts = (
                "INSERT INTO raw_accounts SELECT * FROM unnest(%b::text[], %b::int[])"
                " ON CONFLICT (account_id) DO UPDATE SET"
                " message_count = raw_accounts.message_count + excluded.message_count"
            )
        else:
            self.values = (
                "INSERT INTO raw_values (tenant_id, entity_name, entity_id, fields)"
                " VALUES (?, ?, ?, json_object(?, json(?)))"
                " ON CONFLICT (tenant_id, entity_name, entity_id)"
                " DO UPDATE SET fields = json_set(fields, ?, json(?))"
            )
            self.feed = "INSERT INTO raw_feed VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            self.messages = (
                "INSERT INTO raw_messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (message_id) DO NOTHING"
            )
            self.threads = (
                "INSERT INTO raw_threads VALUES (?, ?, ?, ?)"
                " ON CONFLICT (account_id, thread_key) DO UPDATE SET"
                " message_count = raw_threads.message_count + excluded.message_count,"
                " last_received_at = max(raw_threads.last_received_at,"
                " excluded.last_received_at)"
            )
            self.accounts = (
                "INSERT INTO raw_accounts VALUES (?, ?) ON CONFLICT (account_id) DO UPDATE"
                " SET message_count = raw_accounts.message_count + excluded.message_count"
            )


class RawLoop:
    """One full pass over the log into fresh raw tables; answers the events read."""

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch
        self.pg = scratch.backend == "postgresql"
        self.sql = _RawTables(self.pg)

    def __call__(self) -> int:
        conn = raw_connection(self.scratch)
        try:
            for statement in self.sql.create:
                conn.execute(statement)
            return self._run(conn)
        finally:
            conn.close()

    def _run(self, conn: Any) -> int:
        heads: dict[str, int] = {}
        position, seen = 0, 0
        while True:
            with _transaction(conn, self.pg) as cur:
                cur.execute(self.sql.select, (position,))
                rows = cur.fetchall()
                if not rows:
                    return seen
                self._page(cur, rows, heads)
                position = rows[-1][0]
                cur.execute(self.sql.track, (position,))
            seen += len(rows)

    def _page(self, cur: Any, rows: Sequence[Any], heads: dict[str, int]) -> None:
        values: list[tuple[Any, ...]] = []
        clock: dict[tuple[Any, ...], int | None] = {}  # the last op of the page wins
        forgotten: list[tuple[str]] = []  # deleted definitions: their clock rows go
        feed: list[tuple[Any, ...]] = []
        messages: list[tuple[Any, ...]] = []
        threads: dict[tuple[str, str], list[Any]] = {}
        accounts: dict[str, int] = {}
        for order, (position, originator, version, topic, state) in enumerate(rows):
            if topic == DELETED_TOPIC:  # the page's earlier ops of it go too
                data = orjson.loads(state)
                gone = str(definition_id(data["tenant_id"], data["entity_name"], data["field_key"]))
                forgotten.append((gone,))
                clock = {k: at for k, at in clock.items() if k[0] != gone}
                continue
            if topic not in (SET_TOPIC, CLEAR_TOPIC, MESSAGE_TOPIC):
                continue
            data = orjson.loads(state)
            tenant = data["tenant_id"]
            heads[tenant] = sequence = heads.get(tenant, 0) + 1
            if topic != MESSAGE_TOPIC:
                clock[
                    (
                        data["definition_id"],
                        data["generation"],
                        tenant,
                        data["entity_name"],
                        data["entity_id"],
                        data["field_key"],
                    )
                ] = _micros(data["timestamp"]) if topic == SET_TOPIC else None
            if topic == SET_TOPIC:
                cell = orjson.dumps({"s": data["sealed"], "d": data["digest"]}).decode()
                key = data["field_key"]
                values.append(
                    (tenant, data["entity_name"], data["entity_id"], key, cell, order)
                    if self.pg
                    else (
                        tenant,
                        data["entity_name"],
                        data["entity_id"],
                        key,
                        cell,
                        f'$."{key}"',
                        cell,
                    )
                )
                kind, account, public = "custom_field_value.set", None, cell
            elif topic == CLEAR_TOPIC:
                kind, account, public = "custom_field_value.cleared", None, data["field_key"]
            else:
                account = data["account_id"]
                messages.append(
                    (
                        str(originator),
                        account,
                        tenant,
                        data["thread_key"],
                        data["sender"],
                        data["subject"],
                        data["snippet"],
                        data["received_at"],
                        data["size_bytes"],
                    )
                )
                thread = threads.setdefault((account, data["thread_key"]), [0, ""])
                thread[0] += 1
                thread[1] = max(thread[1], data["received_at"])
                accounts[account] = accounts.get(account, 0) + 1
                kind, public = "message.received", orjson.dumps(data).decode()
            feed.append(
                (
                    tenant,
                    sequence,
                    item_id(str(originator), version),
                    kind,
                    data["timestamp"],
                    account,
                    public,
                    position,
                )
            )
        self._write(cur, self.sql.values, values)
        for forget in forgotten:  # rare: one statement each
            cur.execute(self.sql.clock_forget, forget)
        self._write(cur, self.sql.clock_stop, [key for key, at in clock.items() if at is None])
        self._write(
            cur, self.sql.clock_start, [(*key, at) for key, at in clock.items() if at is not None]
        )
        self._write(cur, self.sql.messages, messages)
        self._write(cur, self.sql.threads, [(*key, *row) for key, row in threads.items()])
        self._write(cur, self.sql.accounts, list(accounts.items()))
        self._write(cur, self.sql.feed, feed)

    def _write(self, cur: Any, statement: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if self.pg:
            cur.execute(statement, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(statement, rows)


# --- eventsourcing's ProjectionRunner -----------------------------------------------------


class _Event:
    """What eventsourcing's mapper makes of a stored tidings event: its state as attributes."""

    originator_id: uuid.UUID
    originator_version: int
    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    sealed: str
    digest: str
    timestamp: str


class EsValuesView(PostgresTrackingRecorder):
    """The equivalent view: the value's upsert and its feed row, with the tracking record,
    in one transaction per event (eventsourcing's projection pattern)."""

    heads: dict[str, int]

    def apply(self, event: _Event, tracking: Tracking) -> None:
        tenant = event.tenant_id
        self.heads[tenant] = sequence = self.heads.get(tenant, 0) + 1
        cell = orjson.dumps({"s": event.sealed, "d": event.digest}).decode()
        schema = self.datastore.schema
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                f'INSERT INTO "{schema}".raw_values AS v'
                " (tenant_id, entity_name, entity_id, fields)"
                " VALUES (%s, %s, %s, jsonb_build_object(%s::text, %s::jsonb))"
                " ON CONFLICT (tenant_id, entity_name, entity_id)"
                " DO UPDATE SET fields = v.fields || excluded.fields",
                (tenant, event.entity_name, event.entity_id, event.field_key, cell),
                prepare=True,
            )
            curs.execute(
                f'INSERT INTO "{schema}".raw_feed VALUES (%s, %s, %s, %s, %s, %s, %s, %s)',
                (
                    tenant,
                    sequence,
                    item_id(str(event.originator_id), event.originator_version),
                    "custom_field_value.set",
                    event.timestamp,
                    None,
                    cell,
                    tracking.notification_id,
                ),
                prepare=True,
            )
            self._insert_tracking(curs, tracking)


class EsValuesProjection(EsProjection[EsValuesView]):
    name = "esbench"
    topics = (SET_TOPIC,)

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(domain_event, tracking)


class Stored(Application[uuid.UUID]):
    """Reads tidings' ``stored_events`` (eventsourcing names the table after the app)."""

    name = "Stored"


def es_runner_rate(scratch: Scratch, upto: int, timeout: float = 900.0) -> tuple[int, float]:
    """Run eventsourcing's ProjectionRunner from position 0 until it has tracked position
    ``upto``; answer (events of the log covered, seconds)."""
    register_topic(SET_TOPIC, _Event)
    url = scratch.parsed
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.dbname,
        "POSTGRES_HOST": url.host,
        "POSTGRES_PORT": str(url.port),
        "POSTGRES_USER": url.user,
        "POSTGRES_PASSWORD": url.password or "unused-under-trust",
        "POSTGRES_SCHEMA": url.schema,
    }
    conn = raw_connection(scratch)
    try:
        for statement in _RawTables(True).create:
            conn.execute(statement)
    finally:
        conn.close()
    EsValuesView.heads = {}
    start = time.perf_counter()
    with EsProjectionRunner(
        application_class=Stored,
        projection_class=EsValuesProjection,
        view_class=EsValuesView,
        env=env,
    ) as runner:
        while True:
            if runner.is_interrupted.wait(0.05):
                runner.run_forever(timeout=0)  # raises the processing thread's error
                raise RuntimeError("eventsourcing's runner stopped before the end")
            tracked = runner.view.max_tracking_id("Stored") or 0
            if tracked >= upto:
                break
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"eventsourcing's runner reached {tracked} of {upto}")
        seconds = time.perf_counter() - start
    return upto, seconds
