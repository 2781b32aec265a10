"""Small, pure policies of the watch supervisor.

Each module owns one decision and its state; none does I/O or reads a clock (time is
passed in), so each is unit-tested with a fake clock:

- ``lease_keeper``: which watch leases this worker holds, when to renew, when to tear down.
- ``backoff``: when a failed watch may restart, and which scheduled restarts are stale.
- ``tiers``: hot / warm / cold per account, and the poll interval of each tier.
- ``fleet``: which free hot accounts this worker claims and which it gives back;
  which worker polls an account.
- ``failover``: when to look for a dead worker's lapsing leases, which of its accounts
  to log in to ahead of the lapse, and when to start.
- ``login_rate``: how fast this worker logs in, measured from its own logins.
- ``watch_stops``: why a watch stopped, and whether to restart it, back off or forget it.
- ``scheduling``: a due-time heap of per-account next-poll times; the first-poll spread.
- ``watch_report``: which watch states and tiers to write, only on change.
"""
