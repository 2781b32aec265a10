"""A running worker reports each account's real watch state and tier: ``watching`` /
``hot`` after its user is active, ``idle`` again once the account is disconnected (the
worker gave it up). Both backends; a real supervisor against a real Dovecot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from application import User
from infrastructure.bootstrap_workers import build_supervisor
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import accounts, connect
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.news import Wake
from workers.supervisor import Supervisor

DEADLINE = 60.0  # a loaded 2-core machine; the worker's own cadence is about a second


@dataclass
class Worker:
    """A mail app, and a supervisor on it run by ``start`` on a thread of its own."""

    mail: MailApp
    supervisor: Supervisor | None = None
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Supervisor:
        self.supervisor = build_supervisor(self.mail.app, self.mail.settings, "w-report")
        self.thread = threading.Thread(
            target=self.supervisor.run, args=(self.stop,), name="supervisor"
        )
        self.thread.start()
        return self.supervisor


@pytest.fixture
def worker(make_mail_app: MakeMailApp) -> Iterator[Worker]:
    # A short lease ttl makes the fleet tick (ttl / 6) one second.
    world = Worker(make_mail_app(watch_lease_ttl=6.0, poll_interval=60.0))
    yield world
    world.stop.set()
    if world.supervisor is not None and world.thread is not None:
        world.supervisor.inbox.tell(Wake())
        world.thread.join(timeout=30)
        assert not world.thread.is_alive()


def wait_for(
    what: str, look: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    seen = look()
    while not done(seen):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: still {seen} after {DEADLINE} s")
        time.sleep(0.2)
        seen = look()
    return seen


def test_a_running_worker_reports_watching_and_hot_then_idle_after_disconnect(
    worker: Worker, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = worker.mail.app
    # Connected before the worker runs: it learns of the account from the read model,
    # with no signal (a connect's signal alone would make it hot).
    account_id = connect(app, admin, dovecot, mailbox)
    app.projections.catch_up()
    supervisor = worker.start()

    def view() -> dict[str, Any]:
        item = accounts(app, admin)[account_id]  # catches the read model up first
        return {"watchState": item["watchState"], "tier": item["tier"]}

    def written() -> dict[str, Any]:
        health = app.ctx.mail.state.health([account_id])  # what `tidings accounts list` reads
        return {a: (h.watch_state, h.tier) for a, h in health.items()}

    # Known, nobody active: polled by this worker (its first poll writes the row), warm.
    wait_for("a polled account", written, lambda w: w == {account_id: ("idle", "warm")})
    assert not supervisor.owner.holds(account_id)
    ok(app.write("user-active", {}, admin))
    wait_for("an active user's account", view, lambda v: v["watchState"] == "watching")
    assert view() == {"watchState": "watching", "tier": "hot"}
    assert written() == {account_id: ("watching", "hot")}
    assert supervisor.owner.holds(account_id)

    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    wait_for("a disconnected account", view, lambda v: v["watchState"] == "idle")
    assert not supervisor.owner.holds(account_id)


def test_a_worker_clears_only_the_rows_it_wrote_last(make_mail_app: MakeMailApp) -> None:
    state = make_mail_app().app.ctx.mail.state
    state.record_watches("w1", {"a": ("watching", "hot"), "b": ("idle", "cold")})
    state.record_watches("w2", {"a": ("watching", "hot")})  # a's new holder wrote since
    state.record_watches("w1", {"a": None, "b": None})  # w1 gives both up
    health = state.health(["a", "b"])
    assert (health["a"].watch_state, health["a"].tier) == ("watching", "hot")
    assert (health["b"].watch_state, health["b"].tier) == ("idle", "warm")


def test_thousands_of_changes_are_one_write(make_mail_app: MakeMailApp) -> None:
    state = make_mail_app().app.ctx.mail.state
    ids = [f"acct-{i}" for i in range(2000)]
    state.record_watches("w1", dict.fromkeys(ids, ("watching", "hot")))
    health = state.health(ids)
    assert {(h.watch_state, h.tier) for h in health.values()} == {("watching", "hot")}
    assert len(health) == 2000
