"""Every duration the end-to-end tests use, in seconds, with what it is for.

Three kinds, kept apart because they change for different reasons:

- **Bounds** the product promises (docs/workers.md). Tests assert them on the workers'
  own log times; change one only when the product's promise changes.
- **Settings** the test workers run with: short, so that lease lapses, polls and dead
  IDLE connections happen within a test, yet long enough that a loaded 2-core machine
  (seven test suites at once) does not miss a renewal.
- **Margins**: how long a test waits for something before it fails, and how much later
  than a worker's log the test may see a change at the server. A margin only has to be
  comfortably above what a loaded machine takes: too long costs nothing on a pass, too
  short makes a test flaky. Every wait is bounded and fails with what it saw last.
"""

from __future__ import annotations

# --- bounds the product promises (asserted) -----------------------------------------------

HOT_BOUND = 5.0  # user-active -> the user's accounts are watched
SIGNAL_BOUND = 5.0  # an account change (disconnect, reconnect, sync-now, connect) acted on
BACKOFF_FIRST = 5.0  # a failed watch restarts no earlier than the backoff's base delay...
BACKOFF_FIRST_MAX = 6.0  # ...and no later than the base plus its 20% jitter
SIGTERM_EXIT = 8.0  # SIGTERM -> the worker exits 0 ("within seconds")
LOOP_AGE_HEALTHY = 5.0  # /healthz loopAgeSeconds of a worker at rest
LOOP_AGE_IN_OUTAGE = 3.0  # the supervisor loop keeps turning while the database is down
LOGIN_STORM_WINDOW_MINUTES = 1  # the restart test's window; fewer than 3 logins an account

# --- what the test workers run with ------------------------------------------------------

WORKER_SETTINGS = {
    "watch_lease_ttl": "6",  # failover and Redis-outage tests wait about one ttl
    "poll_interval": "4",  # the warm poll picks mail up within a few seconds
    "poll_deadline": "30",  # far above a healthy poll; bounds a stuck one
    "imap_read_timeout": "15",
}
TTL = float(WORKER_SETTINGS["watch_lease_ttl"])
POLL = float(WORKER_SETTINGS["poll_interval"])
FLEET_TICK = min(5.0, TTL / 6)  # the supervisor's fleet tick for this ttl (bootstrap)
SLOW_POLL = "60"  # where only a signal or a watch may explain work done within seconds
KEEPALIVE = 1.0  # the test Dovecot's "still here" interval (harness.DOVECOT_EXTRA)
PROBE_AFTER = 3.0  # TIDINGS_WATCH_PROBE_AFTER in the liveness tests
PROBE_TIMEOUT = 2.0  # TIDINGS_WATCH_PROBE_TIMEOUT in the liveness tests
PROBE_SPREAD = 0.25  # a probe comes after (1 - spread) to 1 times probe_after of silence
# A black-holed watch is dropped no earlier than the shortest silence before a probe plus
# probe_timeout, less the last keepalive's age; and no later than probe_after +
# probe_timeout plus the timer check (0.5 s) and a loaded machine's delay.
DEAD_EARLY = PROBE_AFTER * (1 - PROBE_SPREAD) + PROBE_TIMEOUT - KEEPALIVE
DEAD_LATE = PROBE_AFTER + PROBE_TIMEOUT + 3.0
QUIET_PERIODS = 8  # the quiet-IDLE test's silence, in probe periods
# Longer than the database pools' 10 s wait for a connection, so the watches' ingests
# really fail (StoreUnavailable) instead of waiting the outage out.
PG_DOWN = 12.0
DOVECOT_DOWN = 1.5  # the test Dovecot stays halted this long while mail lands

# --- margins of a loaded machine ----------------------------------------------------------

OBSERVE_SLACK = 5.0  # the server shows a change this much later than a worker's log says
LOG_GRACE = 2.0  # a log line may be written this long after the server shows its effect
LOGIN = 2.0  # one IMAP login and its catch-up poll
PROCESS = 120.0  # one CLI process (demo, write, query, export) runs to its end
PROCESS_EXIT = 10.0  # a killed worker or server process is reaped
SERVER_START = 10.0  # a private redis-server answers PING
SERVER_STOP = 5.0  # a terminated redis-server exits before it is killed
SERVER_COMMAND = 60.0  # initdb / pg_ctl of the private PostgreSQL cluster
PG_START = 30.0  # pg_ctl start -w: the private cluster accepts connections
CLIENT = 2.0  # one request to a local server (/healthz, /metrics, Redis)
PING = 1.0  # one readiness probe of the private Redis
THREAD_JOIN = 5.0  # a background sampler thread stops
WORKERS_READY = 60.0  # worker processes import, connect and answer /healthz
SETTLE = 30.0  # the fleet's shares of the hot accounts hold still
SETTLE_HOLD = 2.0  # ...for this long (two fleet ticks at the test ttl)
WAIT = 15.0  # one change, seen at the server or in the read model
WAIT_QUICK = 5.0  # a change that needs no login (sessions closing, a gauge updating)
WAIT_HOT = 20.0  # the first hot mailboxes reach IDLE (logins of a dozen accounts)
WAIT_LONG = 30.0  # after an outage: reconnects, backoff, catch-up
WAIT_AFTER_PG = 40.0  # everything ingested after the PostgreSQL restart
WAIT_FAILOVER_EXTRA = 20.0  # beyond ttl + one tick, for the orphans' logins under load
WAIT_FAILOVER_MAIL = 20.0  # the mail that arrived while nobody watched, once watched again
SIGTERM_WAIT = 20.0  # a worker still running this long after SIGTERM fails the test
PROJECTIONS_LOG = 30.0  # ``projections run`` logs a line it is expected to
PROJECTIONS_EXIT = 30.0  # ``projections run`` exits after SIGTERM

# --- pauses and sampling ------------------------------------------------------------------

FIRST_TICKS = 1.5  # the workers' first fleet ticks and first-sight polls are over
QUIET_CHECK = 1.5  # long enough for a wrongly restarted watch to show at the server
AFTER_KILL = 0.5  # the killed worker's last sessions have closed
STEADY = 10.0  # the steady state is sampled this long
STEADY_AFTER = 2.0  # a little more of the new steady state after a failover
STORM_WATCH = 3.0  # a login storm would show in these seconds
SAMPLE = 0.2  # a steady-state or readiness sample
POLL_STEP = 0.1  # the usual re-check of a waited-for condition
FAST_POLL = 0.05  # a wait for something that happens within a second
LOG_POLL = 0.05  # a re-read of the workers' logs
LINE_POLL = 0.2  # a wait for the next line of a child's output
