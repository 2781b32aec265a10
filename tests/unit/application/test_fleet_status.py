"""fleet_status: the system's SystemAdmin only, totals from the heartbeats, no invented
fleet without a registry, 503 when the registry is down."""

from __future__ import annotations

from application import SYSTEM_TENANT_ID, User
from application.fleet import fleet_status
from application.leases import LeaseBackendUnavailable, WorkerSeen

SYSTEM = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


class Fleet:
    def __init__(self, seen: list[WorkerSeen] | None) -> None:
        self.seen = seen

    def workers(self) -> list[WorkerSeen]:
        if self.seen is None:
            raise LeaseBackendUnavailable("down")
        return self.seen


def test_only_the_system_admin_sees_the_fleet() -> None:
    for user in (
        User(id="a", tenant_id="t1", roles=frozenset({"TenantAdmin", "SystemAdmin"})),
        User(id="b", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"TenantAdmin"})),
    ):
        refused = fleet_status(Fleet([]), user, 0.0)
        assert refused.error is not None and refused.error.status == 403


def test_totals_come_from_the_heartbeats() -> None:
    seen = [WorkerSeen("w1", 3, 98.0, 2.5), WorkerSeen("w2", 4, 99.5, None)]
    data = fleet_status(Fleet(seen), SYSTEM, 100.0).data
    assert data is not None
    assert data["accounts"] == 7 and data["loginRate"] == 2.5 and data["registry"] is True
    assert [w["secondsSinceHeartbeat"] for w in data["workers"]] == [2.0, 0.5]


def test_no_registry_and_a_registry_that_is_down() -> None:
    none = fleet_status(None, SYSTEM, 0.0).data
    assert none == {"registry": False, "workers": [], "accounts": 0, "loginRate": None}
    down = fleet_status(Fleet(None), SYSTEM, 0.0)
    assert down.error is not None and down.error.status == 503
