"""AccountDirectory's reads, on the stores it is given (read model and event store, both
backends): ``fetch`` lists the syncable accounts of the read model, ``lookup`` reads one
account from the event store, and what is not an active account is None."""

from __future__ import annotations

import uuid

from application import User
from tests.integration.mail.conftest import MakeMailApp
from tests.integration.mail.helpers import connect
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.account_info import AccountInfo
from workers.directory import AccountDirectory


def test_fetch_and_lookup_read_the_read_model_and_the_event_store(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = make_mail_app().app
    directory = AccountDirectory(app.ctx.mail.read_model, app.ctx.store)
    account_id = connect(app, admin, dovecot, mailbox, scope="shared")
    expected = AccountInfo(account_id, admin.tenant_id, None, "shared", dovecot.host)

    assert directory.lookup(account_id) == expected  # the event store: at once
    app.projections.catch_up()
    assert directory.fetch()[account_id] == expected

    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    assert directory.lookup(account_id) is None
    app.projections.catch_up()
    assert account_id not in directory.fetch()

    assert directory.lookup(str(uuid.uuid4())) is None  # no such stream
    assert directory.lookup("not-an-id") is None
