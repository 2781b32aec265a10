"""The supervisor keeps "a lease held means a watch": a watch that stops quietly (e.g. a
parked session closed as unclaimed) while its lease is ours is started again. Found as a
failover where a dozen accounts stayed unwatched under leases the survivor kept renewing:
the lease was won while the parked session was closing, so ``_start_watch`` saw a watch
and started nothing, and the closing one's quiet stop started nothing either."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from application.app import App
from infrastructure.bootstrap import build_syncer
from infrastructure.in_process.lease import InProcessLease
from infrastructure.in_process.registry import LocalRegistry
from infrastructure.runtime.settings import Settings
from workers.supervisor import Supervisor, SupervisorSettings


class Watches:
    """The part of ``WatchManager`` the supervisor's lease bookkeeping uses."""

    def __init__(self) -> None:
        self.watching: set[str] = set()
        self.started: list[str] = []

    def is_watching(self, account_id: str) -> bool:
        return account_id in self.watching

    def start(self, account_id: str, *, parked: bool = False) -> int:
        self.started.append(account_id)
        self.watching.add(account_id)
        return 1

    def activate(self, account_id: str) -> bool:
        return False


@pytest.fixture
def supervisor(app: App) -> Iterator[tuple[Supervisor, Watches]]:
    lease = InProcessLease(30.0, holder="w1")
    sup = Supervisor(
        app,
        build_syncer(app, Settings()),
        lease,
        LocalRegistry("w1", 30.0),
        SupervisorSettings(worker_id="w1", lease_ttl=30.0),
    )
    sup.watches.close()  # the real one: its threads are not needed here
    fake = Watches()
    sup.watches = fake  # type: ignore[assignment]
    sup.prewarmer._watches = fake  # type: ignore[assignment]
    yield sup, fake
    sup.poller.close()
    sup.reader.close()


def held(sup: Supervisor, account_id: str) -> None:
    claim = sup.keeper.claim(account_id)
    assert claim is not None and sup.keeper.on_acquired(claim, "tok", sent_at=0.0)


def test_a_quiet_stop_under_a_lease_still_ours_starts_the_watch_again(
    supervisor: tuple[Supervisor, Watches],
) -> None:
    sup, watches = supervisor
    held(sup, "acct")
    sup._watch_stopped("acct", "unclaimed", None, 0.0, now=0.0)
    assert watches.started == ["acct"]


def test_a_quiet_stop_after_the_lease_went_starts_nothing(
    supervisor: tuple[Supervisor, Watches],
) -> None:
    sup, watches = supervisor
    sup._watch_stopped("acct", "released", None, 0.0, now=0.0)  # not held
    held(sup, "other")
    watches.watching.add("other")  # held and watched already
    sup._watch_stopped("other", "stale", None, 0.0, now=0.0)
    assert watches.started == []
