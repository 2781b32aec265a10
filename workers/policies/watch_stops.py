"""Why a watch stopped, and what the supervisor does about it. Pure.

Stops this worker asked for (a release, a lost lease, a shutdown, …) are quiet: nothing
restarts them — except that a lease held means a watch, so a quiet stop under a lease
still ours, with no watch left, starts the watch again (a parked session closed as
unclaimed just as its lease was won would otherwise leave the account unwatched for
good). A stop that is not of the attempt the supervisor started (``current`` false) is
treated as quiet too. An authentication failure forgets the account; any other failure
restarts it after backoff, if the lease is still ours.

A page that failed on our side of the watch path — the database away, a concurrent
writer, a page that could not be stored — does not stop the watch at all
(``keeps_watching``): the reconciliation poll catches up, and the IDLE session lives on.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from application.mail.state import ErrorKind


class StopReason(StrEnum):
    """Why a watch ended, when no ``ErrorKind`` says it (a failed page's kind does)."""

    # Asked for by this worker.
    STOPPED = "stopped"
    RELEASED = "released"  # the fleet plan gave the account to another worker
    SHUTDOWN = "shutdown"
    STALE = "stale"  # superseded by a newer watch of the same account
    LOST = "lost"  # the lease answered "not yours"
    EXPIRED = "expired"  # renewals failed for a whole ttl
    DEACTIVATED = "deactivated"  # the account is no longer syncable
    UNCLAIMED = "unclaimed"  # a parked session nobody claimed
    AUTH_ERROR = "auth_error"  # the server refused the credentials: forgotten
    # The watch failed.
    ERROR = "error"  # an exchange raised
    CLOSED = "closed"  # the server hung up
    SILENT = "silent"  # a liveness probe went unanswered (``policies.liveness``)


WhyStopped = StopReason | ErrorKind

QUIET_STOPS = frozenset(
    {
        StopReason.STOPPED,
        StopReason.RELEASED,
        StopReason.SHUTDOWN,
        StopReason.STALE,
        StopReason.LOST,
        StopReason.EXPIRED,
        StopReason.DEACTIVATED,
        StopReason.UNCLAIMED,
    }
)


# A failed page of these kinds keeps the watch running: the poll catches up.
KEEP_WATCHING = frozenset(
    {ErrorKind.STORE_UNAVAILABLE, ErrorKind.INGEST_CONFLICT, ErrorKind.INGEST_FAILED}
)


def keeps_watching(kind: ErrorKind | None) -> bool:
    """Whether a watch whose page ended with ``kind`` (None: it succeeded) goes on."""
    return kind is None or kind in KEEP_WATCHING


class AfterStop(Enum):
    NOTHING = "nothing"
    START_AGAIN = "start_again"  # at once, same lease
    FORGET = "forget"  # not syncable until it changes
    BACK_OFF = "back_off"  # restart when the backoff allows, if the lease is still ours


def after_stop(reason: WhyStopped, *, current: bool, held: bool, watching: bool) -> AfterStop:
    """``current``: the stop ends the attempt the supervisor started; ``held``: its lease
    is ours; ``watching``: a watch of the account exists (e.g. a newer one)."""
    if reason in QUIET_STOPS or not current:
        return AfterStop.START_AGAIN if held and not watching else AfterStop.NOTHING
    if reason == ErrorKind.AUTH:
        return AfterStop.FORGET
    return AfterStop.BACK_OFF
