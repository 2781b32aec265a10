"""Mailbox passwords and OAuth tokens at rest: sealed under the account's own key, for
the purpose ``secret``. A row opens only for the account it is keyed by: a token naming
another account's key reads as no secret."""

from __future__ import annotations

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
        if row is None:
            return None
        owner = self.keys.account_named_by(row[0])
        if owner is None or owner[1] != account_id:
            return None
        return self.keys.reveal(row[0], owner[0], account_id, PURPOSE)

    def delete(self, account_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {self.table} WHERE account_id = ?", (account_id,))
