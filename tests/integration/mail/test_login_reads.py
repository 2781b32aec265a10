"""What logins read before they connect, read for many accounts at once (a fleet join, a
failover): the same account, secret and cursor as each login's own reads, only for
active accounts, and a secret row copied to another account opens for neither."""

from __future__ import annotations

import uuid

from application import User
from application.mail.ports import MailboxCursor
from infrastructure.crypto.secret_store import SECRETS_TABLE, SqlSecretStore
from tests.integration.mail.conftest import MailApp
from tests.support.accounts import connect
from tests.support.results import ok

ADMIN = User(id="admin", tenant_id="t1", roles=frozenset({"TenantAdmin"}))


def test_many_logins_read_together_what_each_would_read_alone(mail: MailApp) -> None:
    app = mail.app
    ids = [connect(app, ADMIN, f"Box {i}") for i in range(5)]
    state, secrets = app.ctx.mail.state, app.ctx.mail.secrets
    state.save_cursor(ids[0], MailboxCursor(7, 42, 99))
    state.save_cursor(ids[1], MailboxCursor(8, 10, None, backfill_until=250))
    gone = ids[4]
    ok(app.write("disconnect-mail-account", {"accountId": gone}, ADMIN))
    stranger = str(uuid.uuid4())

    reads = mail.syncer.read_logins([*ids, stranger])

    assert set(reads) == set(ids[:4])  # active ones only; an unknown id is no account
    for account_id, read in reads.items():
        alone = mail.syncer.syncable(account_id)
        assert alone is not None and read.account.version == alone.version
        assert read.account.imap == alone.imap
        assert read.secret == secrets.get(account_id) == "pw"
        assert read.cursor == state.cursor(account_id)
    assert reads[ids[0]].cursor == MailboxCursor(7, 42, 99)
    assert reads[ids[2]].cursor is None


def test_a_secret_row_copied_to_another_account_opens_for_neither_read(mail: MailApp) -> None:
    app = mail.app
    first, second = connect(app, ADMIN, "First"), connect(app, ADMIN, "Second")
    secrets = app.ctx.mail.secrets
    assert isinstance(secrets, SqlSecretStore)
    with secrets.db.transaction() as cur:  # an attacker with the table copies first's row to second
        cur.execute(f"SELECT sealed FROM {SECRETS_TABLE} WHERE account_id = ?", (first,))
        (sealed,) = cur.fetchone()
        cur.execute(f"UPDATE {SECRETS_TABLE} SET sealed = ? WHERE account_id = ?", (sealed, second))
    assert app.ctx.mail.secrets.get(second) is None
    assert app.ctx.mail.secrets.get_many([first, second]) == {first: "pw"}
    reads = mail.syncer.read_logins([first, second])
    assert reads[first].secret == "pw" and reads[second].secret is None
