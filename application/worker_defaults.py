"""The worker's default cadences and bounds, in one place: the ``TIDINGS_*`` settings and
the workers' own settings classes both take their defaults from here. Seconds unless
named otherwise."""

POLL_INTERVAL = 300.0  # warm and hot accounts (hot ones: the secondary poll under IDLE)
POLL_COLD = 1800.0
POLL_CONCURRENCY = 8
POLL_DEADLINE = 120.0
WATCH_LOGIN_POOL = 16  # watch logins at once: each waits on its server most of its time
WATCH_LEASE_TTL = 90.0
FLEET_TICK = 5.0  # at most; a short lease ttl shortens it (ttl / 6)
WATCH_PROBE_AFTER = 240.0  # an IDLE connection silent this long is probed (DONE + IDLE)
WATCH_PROBE_TIMEOUT = 30.0  # ...and taken for dead when the probe is unanswered this long
WATCH_REIDLE_AFTER = 25 * 60.0  # servers drop IDLE after 29 minutes: re-issue it before
MAX_ACCOUNTS_PER_WORKER = 5000
HOT_BUDGET_PER_WORKER = 2000
PER_HOST_CONN_CAP = 2000
BACKFILL_WINDOW_DAYS = 30
FOLDER_LIST_INTERVAL = 900.0  # seconds between two LISTs of an account's folders
FOLDER_NOTIFY = False  # other folders pushed with NOTIFY (else: at the poll)
MAX_MESSAGES_PER_POLL = 200
PARSE_CONCURRENCY = 4
USER_ACTIVE_WINDOW = 1800.0  # a user-active keeps the user's accounts hot this long
RECENT_MAIL_WINDOW = 3600.0  # mail that arrived this recently keeps its account hot
WARM_WINDOW = 86400.0  # activity this recent keeps an account warm (older: cold)
