"""NOTIFY on the watch, end to end on both backends against the private Dovecot: with
NOTIFY, a message saved in Archive and a flag set in Sent by another client are mirrored
within seconds, by a poll the watch's news brought forward (a burst of a hundred
arrivals is a poll or two, never one per STATUS line); with NOTIFY hidden, or offered but
the worker's ``folder_notify`` off (the default), they wait for the account's poll."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from application import User
from application.mail.sync_outcome import SyncOutcome
from infrastructure.bootstrap_workers import build_supervisor
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import RECENT, connect, messages, raw_mail
from tests.integration.mail.test_folder_sync import append, by_subject, imap
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.collaborators import Polls
from workers.news import Wake

PUSHED_WITHIN = 5.0  # NOTIFY's ~0.5-1 s, the 0.5 s debounce, one poll, on a loaded machine


@pytest.fixture(scope="module", params=["notify", "hidden", "off"])
def server(
    request: pytest.FixtureRequest, dovecot: DovecotServer
) -> Iterator[tuple[DovecotServer, bool, bool]]:
    """The private Dovecot; whether the worker asks for folders pushed (``folder_notify``)
    and whether they are pushed (asked for, and the server offers NOTIFY)."""
    if request.param == "hidden":
        with DovecotServer(hide_capabilities=["NOTIFY"]) as hidden:
            yield hidden, True, False
        return
    asked = request.param == "notify"
    yield dovecot, asked, asked


def new_box(server: DovecotServer) -> DovecotUser:
    return server.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


class CountedPolls:
    """The supervisor's ``Poller``, counting the polls it started and finished."""

    def __init__(self, inner: Polls) -> None:
        self.inner = inner
        self.started = self.finished = 0
        self._lock = threading.Lock()

    def free_slots(self) -> int:
        return self.inner.free_slots()

    def submit(self, account_id: str, on_done: Callable[[SyncOutcome], None]) -> bool:
        def done(outcome: SyncOutcome) -> None:
            with self._lock:
                self.finished += 1
            on_done(outcome)

        with self._lock:
            self.started += 1
        if self.inner.submit(account_id, done):
            return True
        with self._lock:
            self.started -= 1
        return False

    def idle(self) -> bool:
        with self._lock:
            return self.started == self.finished

    def close(self) -> None:
        self.inner.close()


def wait_until(what: str, done: Callable[[], bool], timeout: float = 30.0) -> float:
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.1)
    return time.monotonic() - started


def listed(mail: MailApp, admin: User, account_id: str) -> dict[str, dict[str, Any]]:
    return by_subject(messages(mail.app, admin, accountId=account_id))


@contextlib.contextmanager
def watched(
    make_mail_app: MakeMailApp,
    admin: User,
    server: DovecotServer,
    box: DovecotUser,
    *,
    folder_notify: bool = True,
) -> Iterator[tuple[MailApp, str, CountedPolls]]:
    """An account polled once (its folders listed), then watched by a running worker
    whose own polls are a long way off."""
    append(server, box, "Sent", raw_mail(1, subject="sent before", date=RECENT))
    mail = make_mail_app(poll_interval=600.0, folder_notify=folder_notify)
    account_id = connect(mail.app, admin, server, box)
    [first] = mail.poll()
    assert first.error_kind is None
    supervisor = build_supervisor(mail.app, mail.settings, "w-" + uuid.uuid4().hex[:6])
    polls = CountedPolls(supervisor.poller)
    supervisor.poller = polls
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), name="supervisor")
    thread.start()
    try:
        ok(mail.app.write("user-active", {}, admin))
        wait_until(
            "the watch in IDLE",
            lambda: supervisor.owner.watch_states().get(account_id) == "idling",
        )
        time.sleep(2.5)  # the worker's first poll of a new account, if it started one
        wait_until("no poll running", polls.idle)
        yield mail, account_id, polls
    finally:
        stop.set()
        supervisor.inbox.tell(Wake())
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_other_folders_are_mirrored_within_seconds_with_notify_and_at_the_poll_without(
    make_mail_app: MakeMailApp, admin: User, server: tuple[DovecotServer, bool, bool]
) -> None:
    dovecot, asked, pushed = server
    box = new_box(dovecot)
    with watched(make_mail_app, admin, dovecot, box, folder_notify=asked) as (
        mail,
        account_id,
        polls,
    ):
        before = polls.started
        changed_elsewhere(dovecot, box)
        if pushed:
            took = wait_until("both changes mirrored", lambda: mirrored(mail, admin, account_id))
            assert took < PUSHED_WITHIN, took
            assert 1 <= polls.started - before <= 2  # one burst of news: one poll (or two)
            return
        time.sleep(PUSHED_WITHIN)
        assert not mirrored(mail, admin, account_id)
        assert polls.started == before  # nothing brought the poll forward
        mail.poll()  # the account's poll, whenever it comes
        assert mirrored(mail, admin, account_id)


def changed_elsewhere(server: DovecotServer, box: DovecotUser) -> None:
    """Another client saves a message in Archive and flags one in Sent."""
    append(server, box, "Archive", raw_mail(2, subject="archived elsewhere", date=RECENT))
    with imap(server, box) as client:
        client.select_folder("Sent")
        client.add_flags(client.search(["SUBJECT", "sent before"]), [b"\\Flagged"])


def mirrored(mail: MailApp, admin: User, account_id: str) -> bool:
    items = listed(mail, admin, account_id)
    archived = items.get("archived elsewhere")
    return (
        archived is not None
        and archived["folders"] == ["Archive"]
        and items["sent before"]["flagged"] is True
    )


def test_a_burst_of_arrivals_is_a_poll_or_two_not_one_per_status_line(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer
) -> None:
    box = new_box(dovecot)
    with watched(make_mail_app, admin, dovecot, box) as (mail, account_id, polls):
        before = polls.started
        burst = [raw_mail(100 + n, subject=f"burst {n}", date=RECENT) for n in range(100)]
        append(dovecot, box, "Archive", *burst)

        def all_in() -> bool:
            items = listed(mail, admin, account_id)
            return all(f"burst {n}" in items for n in range(100))

        wait_until("the burst mirrored", all_in)
        time.sleep(1.0)  # news still on its way would bring another poll now
        assert 1 <= polls.started - before <= 3
