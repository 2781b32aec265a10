"""Without Redis (one process: the app and its worker), on both backends: a worker
restarted in the same process finds the accounts that were hot hot again, with no new
activity — user activity from the in-process store, recent mail from the read model;
after the whole process restarts only the recent mail is remembered (the in-process
store went with the process), and old mail never made an account hot."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from application import User
from tests.integration.mail.conftest import MakeMailApp
from tests.integration.mail.helpers import accounts, connect
from tests.integration.workers.test_watch_report import Worker, wait_for
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message
from workers.news import Wake

SETTINGS: dict[str, Any] = {"watch_lease_ttl": 6.0, "poll_interval": 60.0}


def stop(worker: Worker) -> None:
    worker.stop.set()
    assert worker.supervisor is not None and worker.thread is not None
    worker.supervisor.inbox.tell(Wake())
    worker.thread.join(timeout=30)
    assert not worker.thread.is_alive()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.thread is not None and worker.thread.is_alive():
            stop(worker)


def test_a_restarted_worker_finds_the_hot_accounts_hot_again(
    make_mail_app: MakeMailApp,
    workers: list[Worker],
    tenant: str,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Any,
) -> None:
    member = User(f"member-{tenant}", tenant, frozenset({"TenantMember"}))
    boxes: dict[str, DovecotUser] = {k: new_mailbox() for k in ("active", "mail", "old", "quiet")}
    dovecot.deliver(boxes["mail"], [make_message(1)])  # arrives now
    old = datetime.now(UTC) - timedelta(days=2)
    dovecot.deliver(boxes["old"], [make_message(2)], internal_date=old)
    mail = make_mail_app(**SETTINGS)
    app = mail.app
    ids = {
        "active": connect(app, member, dovecot, boxes["active"], scope="user"),
        **{
            k: connect(
                app,
                User(f"{k}-{tenant}", tenant, frozenset({"TenantMember"})),
                dovecot,
                boxes[k],
                scope="user",
            )
            for k in ("mail", "old", "quiet")
        },
    }
    app.projections.catch_up()

    def tiers(of: Any = None) -> dict[str, tuple[str, str]]:
        listed = accounts(of or app, admin)
        return {k: (listed[a]["watchState"], listed[a]["tier"]) for k, a in ids.items()}

    def hot(*names: str, but: tuple[str, ...] = ()) -> Any:
        return lambda seen: all(
            seen[k] == (("watching", "hot") if k in names else ("idle", "warm"))
            for k in ids
            if k not in but
        )

    first = Worker(mail)
    workers.append(first)
    first.start()
    app.write("user-active", {}, member)
    # ("old": the worker that polls it counts its backfill as mail seen now, for itself.)
    wait_for("the first worker's tiers", tiers, hot("active", "mail", but=("old",)))
    stop(first)

    # The same process, a new worker, nobody active since.
    second = Worker(mail)
    workers.append(second)
    second.start()
    wait_for("the restarted worker's tiers", tiers, hot("active", "mail"))
    stop(second)

    # A new process: the in-process activity went with the old one; the read model stays.
    again = make_mail_app(**SETTINGS)
    third = Worker(again)
    workers.append(third)
    third.start()
    wait_for("the new process's tiers", lambda: tiers(again.app), hot("mail"))
