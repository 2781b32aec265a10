"""The console's server-side sessions: an opaque id in a cookie, the key behind it here.

A session is created by a sign-in with a valid API key and holds: the key as presented
(each request authenticates it again, so a revoked key or a shredded tenant ends every
session made with it at its next request), a CSRF token (checked on every POST), its
creation and last-use times, and its open event streams.

Bounds, so that sign-ins cannot grow memory without end: at most ``per_key`` sessions
per key and ``total`` in all (the oldest goes first), each ending ``lifetime`` seconds
after its sign-in or ``idle`` seconds after its last use, whichever comes first. A
session lives in this process only: a second ``tidings serve`` behind the same name
needs sticky routing (docs/console.md). Pure apart from its lock; time is passed in.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SessionSettings:
    total: int = 1000
    per_key: int = 5
    lifetime: float = 8 * 3600.0
    idle: float = 30 * 60.0
    streams_per_session: int = 3
    streams_per_tenant: int = 20


@dataclass
class Session:
    id: str
    key_id: str
    tenant_id: str
    presented: str
    csrf: str
    created: float
    used: float
    streams: int = 0
    ended: bool = field(default=False)
    flash: str | None = None  # one message for the next page shown

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


class Sessions:
    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        self._by_id: OrderedDict[str, Session] = OrderedDict()  # oldest sign-in first
        self._tenant_streams: dict[str, int] = {}
        self._lock = threading.Lock()

    def open(self, key_id: str, tenant_id: str, presented: str, now: float) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            key_id=key_id,
            tenant_id=tenant_id,
            presented=presented,
            csrf=secrets.token_urlsafe(32),
            created=now,
            used=now,
        )
        with self._lock:
            self._expire(now)
            same_key = [s for s in self._by_id.values() if s.key_id == key_id]
            for old in same_key[: max(0, len(same_key) - self.settings.per_key + 1)]:
                self._drop(old)
            while len(self._by_id) >= self.settings.total:
                self._drop(next(iter(self._by_id.values())))
            self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None, now: float) -> Session | None:
        """The live session of this id (its last use moved to ``now``), or None."""
        if not session_id:
            return None
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if self._expired(session, now):
                self._drop(session)
                return None
            session.used = now
            return session

    def end(self, session: Session) -> None:
        with self._lock:
            self._drop(session)

    def end_key(self, key_id: str) -> None:
        """Every session of a key (it was revoked, or its tenant shredded)."""
        with self._lock:
            for session in [s for s in self._by_id.values() if s.key_id == key_id]:
                self._drop(session)

    def take_stream(self, session: Session) -> bool:
        """One of the session's and its tenant's stream slots, if one is left."""
        with self._lock:
            tenant = self._tenant_streams.get(session.tenant_id, 0)
            if (
                session.ended
                or session.streams >= self.settings.streams_per_session
                or tenant >= self.settings.streams_per_tenant
            ):
                return False
            session.streams += 1
            self._tenant_streams[session.tenant_id] = tenant + 1
            return True

    def give_stream(self, session: Session) -> None:
        with self._lock:
            session.streams -= 1
            left = self._tenant_streams.get(session.tenant_id, 1) - 1
            if left <= 0:
                self._tenant_streams.pop(session.tenant_id, None)
            else:
                self._tenant_streams[session.tenant_id] = left

    def __len__(self) -> int:
        return len(self._by_id)

    def _expired(self, session: Session, now: float) -> bool:
        return (
            now - session.created >= self.settings.lifetime
            or now - session.used >= self.settings.idle
        )

    def _expire(self, now: float) -> None:
        for session in [s for s in self._by_id.values() if self._expired(s, now)]:
            self._drop(session)

    def _drop(self, session: Session) -> None:
        session.ended = True  # an open stream sees it and ends
        self._by_id.pop(session.id, None)
