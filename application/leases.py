"""Coordination ports of the watch supervisor: leases and fleet membership.

A lease says which worker holds the IDLE watch of an account. Contract of ``LeaseBackend``
(the store of every account's lease, not one lease):

- ``acquire(key)`` takes a free key for ``ttl_seconds`` and returns a fresh random token
  (one per acquisition), or ``None`` when someone holds the key. Only the token's holder
  may renew or release: a lock value that is not a per-holder token would let an expired
  holder release someone else's lease.
- ``renew(key, token)`` extends the key to a full ttl from now if it still holds
  ``token``; ``False`` means "not yours" (expired, released or taken by another holder).
- ``release(key, token)`` deletes the key if it still holds ``token``; ``False`` means it
  was not ours any more, which is not an error.
- ``acquire_many`` / ``renew_many`` / ``release_many`` do the same for many keys in
  one round trip (``acquire_many``: a token per key taken, ``None`` per key held);
  ``held(keys)`` says which keys anyone holds right now (to find free accounts), and
  ``holders(keys)`` who: the holder name the adapter was built with (a worker id);
  ``held_by(keys)`` both, in one read.
- A backend that cannot answer raises ``LeaseBackendUnavailable``; it never answers
  ``False`` for "I don't know". The caller keeps acting on a lease only until the ttl
  since its last successful acquire/renew runs out (see ``workers.policies.lease_keeper``).

Fleet membership (``WorkerRegistry``): each worker heartbeats with a ttl and reports how
many leases it holds; ``live_workers`` lists the workers whose heartbeat has not expired.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from application.errors import ApplicationError


class LeaseBackendUnavailable(ApplicationError):
    """The lease/fleet backend could not answer (connection refused, timeout, error reply).

    Distinct from a ``False`` answer ("not yours"): the lease may still be ours.
    """


class LeaseBackend(Protocol):
    @property
    def ttl_seconds(self) -> float: ...

    def acquire(self, key: str) -> str | None: ...

    def renew(self, key: str, token: str) -> bool: ...

    def acquire_many(self, keys: Iterable[str]) -> dict[str, str | None]: ...

    def release(self, key: str, token: str) -> bool: ...

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]: ...

    def release_many(self, items: Mapping[str, str]) -> dict[str, bool]: ...

    def held(self, keys: Iterable[str]) -> dict[str, float]:
        """Of ``keys``, those someone holds, with the seconds until each lapses unless
        renewed."""
        ...

    def holders(self, keys: Iterable[str]) -> dict[str, str]:
        """Of ``keys``, those someone holds, with the holder's name ("" when unnamed)."""
        ...

    def held_by(self, keys: Iterable[str]) -> dict[str, tuple[float, str]]:
        """``held`` and ``holders`` in one read: of ``keys``, those someone holds, with
        the seconds until each lapses unless renewed and the holder's name."""
        ...


class WorkerRegistry(Protocol):
    @property
    def worker_id(self) -> str: ...

    @property
    def interval(self) -> float:
        """How often to heartbeat (a third of the heartbeat ttl)."""
        ...

    def heartbeat(self, held: int, login_rate: float | None = None) -> None:
        """This worker is alive, holding ``held`` leases, logging in ``login_rate`` a
        second as it measured (None: not measured yet)."""
        ...

    def live_workers(self) -> dict[str, int]:
        """Live worker id -> how many leases it reported holding."""
        ...

    def leave(self) -> None: ...


@dataclass(frozen=True)
class WorkerSeen:
    """A live worker as its last heartbeat described it."""

    worker_id: str
    held: int  # leases held: the accounts it watches
    seen_at: float  # unix seconds of the heartbeat
    login_rate: float | None  # logins a second as it measured them


class FleetView(Protocol):
    """The live workers, read by those who look at the fleet (the console)."""

    def workers(self) -> list[WorkerSeen]:
        """Raises ``LeaseBackendUnavailable`` when the registry cannot be read."""
        ...
