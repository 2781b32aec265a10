"""The app-layer façade (docs/fault-isolation.md): ``write`` and ``query`` by name,
never raising for a caller's mistake.

Every payload passes the generic boundary rules (``application.payloads``) before any
handler sees it. A write whose events committed answers success whatever its inline
projection step does: a retry would repeat a write that happened, and the next
catch-up applies (or quarantines) its events anyway.

Inline catch-ups are shared: a write waits for one catch-up that started after its
commit. Writers that finish while a catch-up runs wait for it, then one of them runs the
next for all of them, so concurrent writes (committed together by the event store's
group commit) cost one catch-up, not one each. Where the store's group commit numbers
its batches (``GroupCommitted``), the thread that wrote a batch runs its catch-up before
the batch's callers are answered: each finds its batch covered and returns at once, no
caller waits on another thread's catch-up, and a batch costs one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from application.context import Context
from application.errors import EventNotStorable, StoreUnavailable, UnreadableEvent
from application.handlers import QUERIES, WRITES, UseCase
from application.payloads import boundary_errors, parse
from application.ports import CommitCount, GroupCommitted, Projections
from application.privacy import KeyErased
from application.result import Result
from application.users import User

log = logging.getLogger("tidings.app")


class App:
    def __init__(
        self,
        ctx: Context,
        projections: Projections,
        on_close: Callable[[], None] = lambda: None,
        *,
        project_inline: bool = False,
    ) -> None:
        self.ctx = ctx
        self.projections = projections
        self._on_close = on_close
        self._project_inline = project_inline
        batches = ctx.store if isinstance(ctx.store, GroupCommitted) else None
        self._batches = batches if project_inline else None
        self._catch_ups = SharedCatchUp(projections.catch_up, self._batches)
        if self._batches is not None:
            self._batches.catch_up_after_batches(self._catch_ups.run_covering)
        self.feed = Feed(self)

    def write(self, name: str, payload: Any, user: User) -> Result:
        use_case = WRITES.get(name)
        if self._batches is not None and use_case is not None and use_case.appends:
            with self._batches.inline():
                result = self._dispatch(WRITES, "write handler", name, payload, user)
        else:
            result = self._dispatch(WRITES, "write handler", name, payload, user)
        if result.is_success and self._project_inline and use_case and use_case.appends:
            try:
                self._catch_ups.run()
            except Exception as error:  # the write is committed: see the module docstring
                log.warning(
                    "inline projection deferred handler=%s error=%s", name, type(error).__name__
                )
        return result

    def query(self, name: str, payload: Any, user: User) -> Result:
        return self._dispatch(QUERIES, "query", name, payload, user)

    def _dispatch(  # noqa: PLR0911
        self, table: dict[str, UseCase], kind: str, name: str, payload: Any, user: User
    ) -> Result:
        use_case = table.get(name)
        if use_case is None:
            return Result.fail(
                "unknown_handler", 404, f"no {kind} named {name!r}", known=sorted(table)
            )
        if not isinstance(user, User):
            return Result.fail("invalid_user", 400, "the caller must be a User")
        # The caller's ids end up in events and read models like any payload string.
        if not _valid_user(user):
            return Result.fail("invalid_user", 400, "the caller's ids must be valid text")
        parsed = parse(use_case.payload, payload)
        if isinstance(parsed, Result):
            return parsed
        try:
            result: Result = use_case.handle(parsed, user, self.ctx)
        except StoreUnavailable as error:
            log.warning("store unavailable handler=%s error=%s", name, type(error).__name__)
            return Result.fail("unavailable", 503, "the store is unavailable; try again")
        except EventNotStorable as error:
            # The boundary rules should have refused it: nothing was written.
            log.error("event not storable handler=%s error=%s", name, error)
            return Result.fail(
                "invalid_payload",
                400,
                "the payload holds a value that cannot be stored",
                errors=[{"path": "(payload)", "message": "a value cannot be stored exactly"}],
            )
        except UnreadableEvent as error:
            # A stream holds an event the codec cannot read (imported or written by an
            # older encoder): this stream's writes fail, nothing else does.
            log.error("unreadable stream handler=%s error=%s", name, type(error).__name__)
            return Result.fail("stream_unreadable", 500, "a stored event cannot be read")
        except KeyErased:
            # The account's or tenant's key was shredded: its data is gone for good.
            return Result.fail("erased", 410, "this account's data was erased")
        return result

    def close(self) -> None:
        self._on_close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _valid_user(user: User) -> bool:
    """Whether the caller's ids pass the payload rules; the answer for ids of text is
    remembered (a server sees the same few users over and over)."""
    if type(user.id) is str and type(user.tenant_id) is str:
        return _valid_ids(user.id, user.tenant_id, user.roles)
    return not _user_errors(user.id, user.tenant_id, user.roles)


@lru_cache(maxsize=4096)
def _valid_ids(user_id: str, tenant_id: str, roles: frozenset[str]) -> bool:
    return not _user_errors(user_id, tenant_id, roles)


def _user_errors(user_id: Any, tenant_id: Any, roles: frozenset[Any]) -> list[dict[str, str]]:
    return boundary_errors({"id": user_id, "tenantId": tenant_id, "roles": [*roles]})


class SharedCatchUp:
    """``run`` returns once a catch-up that started after the caller's commit has
    finished; one catch-up at a time, shared by every caller it covers. Without a
    ``CommitCount`` the caller's call stands for its commit (a catch-up that started
    after the call). A failed catch-up raises in the thread that ran it only; its
    waiters count it as done (the next write's catch-up, or the projections process,
    applies the events)."""

    def __init__(self, catch_up: Callable[[], int], counts: CommitCount | None = None) -> None:
        self._catch_up = catch_up
        self._counts = counts
        self._changed = threading.Condition()
        self._started = 0
        self._finished = 0
        self._covered = 0  # batches committed before the last finished catch-up started
        self._running = False

    def run(self) -> None:
        mine = self._counts.committed_by_this_thread() if self._counts is not None else None
        with self._changed:
            wanted = self._started + 1  # without counts: the next one to start covers this

            def covered() -> bool:
                return self._covered >= mine if mine is not None else self._finished >= wanted

            while not covered() and self._running:
                self._changed.wait()
            if covered():
                return
            self._running = True
            self._started += 1
            covers = self._counts.committed() if self._counts is not None else 0
        try:
            self._catch_up()
        finally:
            with self._changed:
                self._running = False
                self._finished += 1
                self._covered = max(self._covered, covers)
                self._changed.notify_all()

    def run_covering(self, batch: int) -> None:
        """In the thread that wrote batch ``batch``, before its callers are answered: a
        catch-up that covers it (none when one that started later has finished)."""
        with self._changed:
            while self._running and self._covered < batch:
                self._changed.wait()
            if self._covered >= batch:
                return
            self._running = True
            self._started += 1
        try:
            self._catch_up()
        except Exception as error:  # the batch is committed: see the module docstring
            log.warning("inline projection deferred error=%s", type(error).__name__)
        finally:
            with self._changed:
                self._running = False
                self._finished += 1
                self._covered = max(self._covered, batch)
                self._changed.notify_all()


class Feed:
    """``app.feed.read(user, after=SEQUENCE, limit=N)``: the caller's tenant's change feed
    (``read-feed``), items after a sequence, in order."""

    def __init__(self, app: App) -> None:
        self._app = app

    def read(self, user: User, after: int = 0, limit: int = 100) -> Result:
        return self._app.query("read-feed", {"after": after, "limit": limit}, user)
