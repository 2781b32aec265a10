"""Recent mail in the read model: what keeps an account hot across a fleet restart.

Per account the mail projection keeps the newest message's arrival (never later than
when it was recorded), and ``recent_mail`` answers it for all active accounts at once;
a rebuild gives the same answer, and tables made before the column existed gain it."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from application import User
from infrastructure.bootstrap import projection_runner
from projections.mail_reader import MailReader
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

HOUR = 3600.0


def ingest(mail: MailApp, operator: User, account_id: str, n: int, received: datetime) -> None:
    payload: dict[str, Any] = {
        "accountId": account_id,
        "providerMessageId": f"emailid:M{n}",
        "messageIdHeader": f"<m{n}@origin.example>",
        "references": [],
        "from": [{"name": "Ann", "address": "ann@origin.example"}],
        "to": [],
        "cc": [],
        "subject": "s",
        "snippet": "",
        "receivedAt": received.isoformat(),
        "bodyRef": None,
        "sizeBytes": 10,
        "folder": "INBOX",
    }
    ok(mail.app.write("ingest-message", payload, operator))


def reader(mail: MailApp) -> MailReader:
    model = mail.app.ctx.mail.read_model
    assert isinstance(model, MailReader)
    return model


def test_recent_mail_is_the_newest_arrival_per_active_account(
    mail: MailApp,
    admin: User,
    operator: User,
    dovecot: DovecotServer,
    new_mailbox: Any,
) -> None:
    fresh, old, future, quiet, gone = (
        connect(mail.app, admin, dovecot, new_mailbox()) for _ in range(5)
    )
    now = datetime.now(UTC)
    ingest(mail, operator, fresh, 1, now - timedelta(minutes=10))
    ingest(mail, operator, fresh, 2, now - timedelta(minutes=40))  # older: not the newest
    ingest(mail, operator, old, 3, now - timedelta(days=2))
    ingest(mail, operator, future, 4, now + timedelta(days=3))  # a bad Date: capped
    ingest(mail, operator, gone, 5, now - timedelta(minutes=1))
    ok(mail.app.write("disconnect-mail-account", {"accountId": gone}, admin))
    mail.app.projections.catch_up()
    recorded_by = time.time()

    recent = reader(mail).recent_mail(recorded_by - HOUR)
    assert set(recent) == {fresh, future}, "quiet, old and disconnected ones are not recent"
    assert recent[fresh] == pytest.approx(
        (now - timedelta(minutes=10)).timestamp(), abs=1.0
    )  # kept to the second
    assert now.timestamp() - 1 <= recent[future] <= recorded_by, "capped at its recording"
    assert quiet not in reader(mail).recent_mail(0.0)
    week = reader(mail).recent_mail(recorded_by - 7 * 24 * HOUR)
    assert week[old] == pytest.approx(
        (now - timedelta(days=2)).timestamp(), abs=1.0
    )  # kept to the second

    projection_runner(mail.app).rebuild("mail")
    assert reader(mail).recent_mail(recorded_by - 7 * 24 * HOUR) == week


def test_tables_made_before_the_column_gain_it(
    make_mail_app: MakeMailApp,
    admin: User,
    operator: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    first = make_mail_app()
    account_id = connect(first.app, admin, dovecot, mailbox)
    first.app.projections.catch_up()
    with first.app.ctx.mail.read_model.db.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("ALTER TABLE mail_accounts DROP COLUMN last_mail_at")
    first.app.close()

    second = make_mail_app()  # bootstrap adds the column back
    ingest(second, operator, account_id, 1, datetime.now(UTC))
    second.app.projections.catch_up()
    assert set(reader(second).recent_mail(time.time() - HOUR)) == {account_id}
    [row] = ok(second.app.query("list-mail-accounts", {}, admin))["items"]
    assert row["health"]["messageCount"] == 1
