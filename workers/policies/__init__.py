"""Small, pure policies of the watch supervisor (SPEC §7, STYLE convention 7).

Each module owns one decision and its state; none does I/O or reads a clock (time is
passed in), so each is unit-tested with a fake clock:

- ``lease_keeper``: which watch leases this worker holds, when to renew, when to tear down.
- ``backoff``: when a failed watch may restart, and which scheduled restarts are stale.
- ``tiers``: hot / warm / cold per account, and the poll interval of each tier.
- ``fleet``: which free hot accounts this worker claims and which it gives back;
  which worker polls a warm/cold account.
- ``scheduling``: a due-time heap of per-account next-poll times.
"""
