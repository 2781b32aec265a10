"""The supervisor's settings: one worker's id, its lease and tick, its polls, its room
and its watches (defaults in ``application.worker_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from application import worker_defaults as defaults


@dataclass(frozen=True)
class SupervisorSettings:
    worker_id: str
    lease_ttl: float = defaults.WATCH_LEASE_TTL
    fleet_tick: float = defaults.FLEET_TICK
    poll_warm: float = defaults.POLL_INTERVAL
    poll_cold: float = defaults.POLL_COLD
    poll_concurrency: int = defaults.POLL_CONCURRENCY
    poll_deadline: float = defaults.POLL_DEADLINE
    max_accounts_per_worker: int = defaults.MAX_ACCOUNTS_PER_WORKER
    hot_budget_per_worker: int = defaults.HOT_BUDGET_PER_WORKER
    watch_pool: int = 16
    watch_login_pool: int = defaults.WATCH_LOGIN_POOL
    probe_after: float = defaults.WATCH_PROBE_AFTER
    probe_timeout: float = defaults.WATCH_PROBE_TIMEOUT
    reidle_after: float = defaults.WATCH_REIDLE_AFTER
    # Other folders pushed on the watches (NOTIFY).
    folder_notify: bool = defaults.FOLDER_NOTIFY
