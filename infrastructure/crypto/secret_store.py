"""Mailbox passwords and OAuth tokens at rest: sealed under the account's own key, for
the purpose ``secret``. A row opens only for the account it is keyed by: a token naming
another account's key reads as no secret."""

from __future__ import annotations

from collections.abc import Collection

from application.ports import SqlDatabase
from infrastructure.crypto.keyring import KeyRing

PURPOSE = "secret"

SECRETS_TABLE = "mail_secrets"
SMTP_SECRETS_TABLE = "mail_smtp_secrets"  # an account's own SMTP secret (``smtpSecret``)


class SqlSecretStore:
    """Implements ``SecretStore``: secrets sealed under the account's own key."""

    def __init__(self, db: SqlDatabase, keys: KeyRing, table: str = SECRETS_TABLE) -> None:
        self.db = db
        self.keys = keys
        self.table = table

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (account_id TEXT PRIMARY KEY,"
                " sealed TEXT NOT NULL)"
            )

    def put(self, tenant_id: str, account_id: str, secret: str) -> None:
        sealed = self.keys.seal(tenant_id, account_id, secret, PURPOSE)
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {self.table} (account_id, sealed) VALUES (?, ?)"
                " ON CONFLICT (account_id) DO UPDATE SET sealed = excluded.sealed",
                (account_id, sealed),
            )

    def get(self, account_id: str) -> str | None:
        with self.db.reading() as cur:
            cur.execute(f"SELECT sealed FROM {self.table} WHERE account_id = ?", (account_id,))
            row = cur.fetchone()
        return None if row is None else self._open(account_id, row[0])

    def get_many(self, account_ids: Collection[str]) -> dict[str, str]:
        ids = list(account_ids)
        if not ids:
            return {}
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT account_id, sealed FROM {self.table}"
                f" WHERE account_id IN ({', '.join('?' * len(ids))})",
                ids,
            )
            rows = cur.fetchall()
        opened = ((account_id, self._open(account_id, sealed)) for account_id, sealed in rows)
        return {account_id: secret for account_id, secret in opened if secret is not None}

    def _open(self, account_id: str, sealed: str) -> str | None:
        owner = self.keys.account_named_by(sealed)
        if owner is None or owner[1] != account_id:
            return None
        return self.keys.reveal(sealed, owner[0], account_id, PURPOSE)

    def delete(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {self.table} WHERE account_id = ?", (account_id,))
