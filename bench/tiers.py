"""Benchmark: the shared tier state a fleet tick reads, for thousands of accounts.

Each fleet tick every worker reads, for all its directory's accounts, when their users
were last active (Redis) and when their newest mail arrived (the mail read model):
``SharedTierState.read`` - one pipelined Redis round trip (MGETs of 1,000 keys) and one
SQL statement. The baseline is the obvious loop that design avoids: per account one
Redis GET and one indexed SELECT of its row. Both run on the same data, alternately,
best run of each; the goal is a time ratio <= 0.2 at 5,000 accounts.

    python bench/tiers.py                    # both backends, 5,000 accounts
    python bench/tiers.py --accounts 20000 --backend postgresql

Redis: ``TIDINGS_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/0``); keys under a random
prefix, deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    BACKENDS,
    Backend,
    Row,
    alternating,
    environment,
    render,
    say,
    scratch_database,
)
from infrastructure.bootstrap import open_database
from infrastructure.redis.activity import RedisActivity
from infrastructure.redis.client import redis_client
from infrastructure.sql.database import DatabaseUrl, PostgresDatabase
from projections.mail import MailProjection
from projections.mail_reader import MailReader
from workers.account_info import AccountInfo
from workers.shared_tiers import SharedTierState

REDIS_URL = os.environ.get("TIDINGS_BENCH_REDIS", "redis://127.0.0.1:6379/0")
GOAL = 0.2
TENANTS = 50
ROUNDS = 3


def accounts_of(count: int) -> dict[str, AccountInfo]:
    """90% user-scoped (each its own owner), 10% shared, over TENANTS tenants."""
    accounts = {}
    for i in range(count):
        account_id = str(uuid.UUID(int=i + 1))
        tenant = f"t{i % TENANTS}"
        shared = i % 10 == 0
        accounts[account_id] = AccountInfo(
            account_id, tenant, None if shared else f"u{i}", "shared" if shared else "user", "h"
        )
    return accounts


def bench(backend: Backend, count: int) -> Row:
    accounts = accounts_of(count)
    now = time.time()
    prefix = f"tidings-bench:{uuid.uuid4().hex[:8]}:"
    client = redis_client(REDIS_URL)
    activity = RedisActivity(client, 1800.0, prefix=prefix)
    with scratch_database(backend, "tiers") as scratch:
        db = open_database(DatabaseUrl.parse(scratch.url))
        try:
            if isinstance(db, PostgresDatabase):
                db.ensure_schema()
            say(f"{backend}: seeding {count} accounts")
            with db.transaction() as cur:
                MailProjection().create(cur, db.dialect)
                cur.executemany(
                    "INSERT INTO mail_accounts (account_id, tenant_id, owner_user_id, scope,"
                    " provider, auth_method, display_name, address, imap, status,"
                    " last_mail_at) VALUES (?, ?, ?, ?, 'imap', 'password', '', '', '{}',"
                    " 'active', ?)",
                    [
                        (
                            a.account_id,
                            a.tenant_id,
                            a.owner_user_id,
                            a.scope,
                            # a tenth had mail within the hour, the rest long ago or never
                            now - 60 if i % 10 == 3 else (now - 86400 if i % 2 else None),
                        )
                        for i, a in enumerate(accounts.values())
                    ],
                )
            for i, a in enumerate(accounts.values()):
                if i % 4 == 1 and a.owner_user_id is not None:  # a quarter of the users
                    activity.record(a.tenant_id, a.owner_user_id, now - 30)
            shared = SharedTierState(activity, MailReader(db))
            expected = shared.read(accounts)

            def naive() -> None:
                found_users: dict[str, float] = {}
                found_mail: dict[str, float] = {}
                for a in accounts.values():
                    key = (
                        activity.tenant_key(a.tenant_id)
                        if a.scope == "shared"
                        else activity.user_key(a.tenant_id, a.owner_user_id or "")
                    )
                    value = client.get(key)
                    if isinstance(value, str):
                        found_users[a.account_id] = float(value)
                    with db.reading() as cur:
                        cur.execute(
                            "SELECT last_mail_at FROM mail_accounts WHERE account_id = ?",
                            (a.account_id,),
                        )
                        row = cur.fetchone()
                    if row is not None and row[0] is not None and row[0] >= now - 3600:
                        found_mail[a.account_id] = float(row[0])
                assert found_users == expected.user_active and found_mail == expected.mail

            say(f"{backend}: timing (baseline x{ROUNDS + 1}, tidings x{ROUNDS})")
            ours, theirs = alternating(lambda: shared.read(accounts), naive, rounds=ROUNDS)
        finally:
            db.close()
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
    ratio = ours / theirs
    return Row(
        f"tick read, {count} accounts",
        backend,
        f"{ours * 1000:.1f} ms",
        f"{theirs * 1000:.1f} ms",
        ratio,
        f"<= {GOAL}",
        ratio <= GOAL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--accounts", type=int, default=5000)
    args = parser.parse_args(argv)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    rows = [bench(backend, args.accounts) for backend in backends]
    render(
        "tidings shared tier state per fleet tick vs a round trip per account",
        rows,
        environment(backends),
        notes=[
            "tick read: SharedTierState.read (one pipelined Redis round trip, one SQL"
            " statement) vs per account one Redis GET and one indexed SELECT; run"
            f" alternately (baseline x{ROUNDS + 1}, tidings x{ROUNDS}), best run of each.",
        ],
    )
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
