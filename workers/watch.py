"""IDLE watches: thousands per worker, one thread waiting on all their sockets.

Per account, a watch moves through:

    opening --(login, SELECT, catch-up poll, IDLE)--> idling
    idling --(EXISTS)--> fetching --(DONE + fetch + IDLE, one write; [ingest])--> idling
    idling --(silence past probe_after, or IDLE older than reidle_after)--> probing
    probing --(the probe's DONE + IDLE answered)--> idling
    idling --(refresh_folders)--> refreshing --(NOTIFY asked again, IDLE)--> idling
    any --(error, server hang-up, a probe unanswered for probe_timeout, stop())--> stopped

Right after login a watch has the server push the other synced folders (NOTIFY, where
offered: ``hooks.watch_folders``); news of their changes goes to ``on_folders_changed``.

Probing is idling with a probe in flight (``policies.liveness``): the probe is written
by the mux thread and its answer read there, with the socket still registered, so a
probe costs no thread and a black-holed connection holds none.

A watch started ``parked`` (a failover's session opened before its lease is free: see
``policies.failover``) stops short of IDLE: opening --(login, SELECT, catch-up poll)-->
parked --(activate())--> idling. Its IDLE, when it starts, reports mail that came while
it waited (Dovecot syncs the mailbox when IDLE begins).

Threads: the mux thread owns the selector and only ever does non-blocking reads of
idling sockets (on news of mail the session also writes its fetch there, at once);
opening (logins) runs on a small pool, in batches whose reads are made together
(``watch_logins``), fetching and refreshing on another. A session is
touched by one thread at a time: the mux while the watch is idling (registered), a pool
thread otherwise. A fetched page is ingested elsewhere (``watch_ingest``'s group commit,
with other accounts' pages); its outcome comes back as a new pool task, so no pool thread
waits on the database. Selector changes from other threads go through a queue and a
wake-up pipe. Each watch carries a generation: work finishing for a stopped or restarted
watch sees a stale generation and only closes its own session.

A failed ingest on the watch path keeps the watch (the poll catches up); a failed
IMAP exchange stops it, and the supervisor restarts it with backoff.

Every open is timed, from ``start`` to parked or IDLE (``policies.login_rate``): the
login rate a failover's logins are planned with (``login_rate``).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import queue
import random
import selectors
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from application import worker_defaults as defaults
from application.mail.ports import IdleNews, MailProviderError
from application.mail.sync_outcome import SyncOutcome
from workers.policies.liveness import Liveness, Verdict
from workers.policies.watch_stops import StopReason, WhyStopped, keeps_watching
from workers.watch_logins import LoginQueue
from workers.watch_state import State, Watch, WatchCounters, WatchHooks

__all__ = ["State", "Watch", "WatchHooks", "WatchManager"]

log = logging.getLogger("tidings.watch")


class WatchManager:
    def __init__(
        self,
        hooks: WatchHooks,
        *,
        pool_size: int = 8,
        login_pool_size: int | None = None,
        reidle_after: float = defaults.WATCH_REIDLE_AFTER,
        probe_after: float = defaults.WATCH_PROBE_AFTER,
        probe_timeout: float = defaults.WATCH_PROBE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._hooks = hooks
        self._liveness = Liveness(probe_after, probe_timeout, reidle_after)
        self._rng = rng or random.Random()  # noqa: S311 (a spread, not a secret)
        self._clock = clock
        self._watches: dict[str, Watch] = {}
        self._counts = WatchCounters(clock)
        self._generation = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="watch")
        # Logins wait on the server and come in floods (a failover, a restart): their own
        # pool keeps a flood from queueing ahead of sessions that only need IDLE again.
        self._logins = ThreadPoolExecutor(
            max_workers=login_pool_size or pool_size, thread_name_prefix="login"
        )
        self._to_open = LoginQueue(
            self._logins, operator.attrgetter("account_id"), hooks.prepare, self._open
        )
        self._selector = selectors.DefaultSelector()
        self._commands: queue.SimpleQueue[tuple[str, Watch]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        # A wake-up is written only when none is pending: in a burst thousands of watches
        # go back to IDLE within a second, and one write each woke the mux for each.
        self._wake_pending = False
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._running = True
        self._mux = threading.Thread(target=self._loop, name="watch-mux", daemon=True)
        self._mux.start()

    # --- control (any thread) --------------------------------------------------------

    def start(self, account_id: str, *, parked: bool = False) -> int:
        with self._lock:
            if account_id in self._watches:
                return self._watches[account_id].generation
            self._generation += 1
            watch = Watch(account_id, self._generation, parked=parked)
            self._watches[account_id] = watch
            self._counts.login_started()
        self._to_open.put(watch)
        return watch.generation

    def activate(self, account_id: str) -> bool:
        """A parked watch goes on to IDLE (one still opening does so when it is ready).
        False when there is no such watch."""
        with self._lock:
            watch = self._watches.get(account_id)
            if watch is None:
                return False
            watch.parked, waiting = False, watch.state == "parked"
            if waiting:
                watch.state = "fetching"
        if waiting:
            self._submit(self._idle, watch)
        return True

    def stop(self, account_id: str, reason: WhyStopped = StopReason.STOPPED) -> bool:
        with self._lock:
            watch = self._watches.get(account_id)
        if watch is None:
            return False
        self._command("stop", watch, reason)
        return True

    def refresh_folders(self, account_id: str) -> bool:
        """The account's folders were listed again: its watch asks for them to be pushed
        anew before its next IDLE (idling: at once). False when there is no such watch."""
        with self._lock:
            watch = self._watches.get(account_id)
        if watch is None:
            return False
        watch.folders_stale = True
        self._command("refresh", watch)
        return True

    def login_rate(self) -> float | None:
        """Logins (open to parked or IDLE) a second, measured here; None: too few yet."""
        return self._counts.login_rate()

    def watching(self) -> dict[str, State]:
        with self._lock:
            return {a: w.state for a, w in self._watches.items()}

    def take_probe_counts(self) -> dict[str, int]:
        """Liveness probes since the last call, by outcome (for the metrics)."""
        return self._counts.take_probes()

    def is_watching(self, account_id: str) -> bool:
        with self._lock:
            return account_id in self._watches

    def close(self) -> None:
        with self._lock:
            watches = list(self._watches.values())
        for watch in watches:
            self._command("stop", watch, StopReason.SHUTDOWN)
        deadline = time.monotonic() + 5.0
        while self._watches and time.monotonic() < deadline:
            time.sleep(0.02)
        self._running = False
        self._wake()
        self._mux.join(timeout=2.0)
        self._logins.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _command(self, verb: str, watch: Watch, reason: WhyStopped | None = None) -> None:
        if verb == "stop" and watch.stop_reason is None:
            watch.stop_reason = reason
        self._commands.put((verb, watch))
        self._wake()

    def _wake(self) -> None:
        if self._wake_pending:  # the mux has yet to drain: it will see this command too
            return
        self._wake_pending = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _current(self, watch: Watch) -> bool:
        with self._lock:
            return self._watches.get(watch.account_id) is watch

    # --- pool work -------------------------------------------------------------------

    def _open(self, watch: Watch) -> None:
        try:
            watch.session = self._hooks.open_session(watch.account_id)
            watch.connected_at = self._clock()
            self._hooks.watch_folders(watch.account_id, watch.session)  # parked ones too
            self._sync(watch)  # right after start: what arrived since the last poll
        except Exception as error:  # any failure ends this watch
            self._finish(watch, StopReason.ERROR, error)

    def _fetch(self, watch: Watch) -> None:
        try:
            # No DONE here: the session's fetch after IDLE sends it with its own commands
            # (and IDLE again after them) in one round trip.
            self._sync(watch)
        except Exception as error:  # any failure ends this watch
            self._finish(watch, StopReason.ERROR, error)

    def _sync(self, watch: Watch) -> None:
        assert watch.session is not None
        if watch.stop_reason is not None:
            self._finish(watch, watch.stop_reason, None)
            return
        answer = self._hooks.sync(watch.account_id, watch.session)
        answer.add_done_callback(partial(self._answered, watch))

    def _answered(self, watch: Watch, answer: Future[SyncOutcome]) -> None:
        """The page's answer, on whatever thread gave it: on to a pool thread."""
        error = answer.exception()
        if error is not None:
            self._submit(self._finish, watch, StopReason.ERROR, error)
        else:
            self._submit(self._synced, watch, answer.result())

    def _synced(self, watch: Watch, outcome: SyncOutcome) -> None:
        """A page is in: the next page, or IDLE again with the socket back at the mux."""
        try:
            kind = outcome.error_kind
            if kind is not None and not keeps_watching(kind):
                self._finish(watch, kind, None)
                return
            if outcome.ingested:
                self._hooks.on_mail(watch.account_id, outcome)
            if outcome.has_more:
                self._sync(watch)
                return
            with self._lock:
                parked = watch.parked and watch.stop_reason is None
                if parked:
                    watch.state = "parked"  # ``activate`` or ``stop`` takes it on
            if parked:
                self._counts.login_ended(watch, ok=True)
                log.info("watch.parked account_id=%s", watch.account_id)
                return
            self._idle(watch)
        except Exception as error:  # any failure ends this watch
            self._finish(watch, StopReason.ERROR, error)

    def _idle(self, watch: Watch) -> None:
        """IDLE again, the socket back at the mux."""
        try:
            if watch.stop_reason is not None:
                self._finish(watch, watch.stop_reason, None)
                return
            assert watch.session is not None
            if watch.folders_stale:  # the folders were listed again since it asked
                watch.folders_stale = False
                self._hooks.watch_folders(watch.account_id, watch.session)
            news = watch.session.idle_start()
            self._counts.login_ended(watch, ok=True)
            if not watch.idle_since:
                log.info("watch.started account_id=%s", watch.account_id)
            self._fresh_idle(watch, self._clock())
            self._idling(watch, news)
        except Exception as error:  # any failure ends this watch
            self._finish(watch, StopReason.ERROR, error)

    def _fresh_idle(self, watch: Watch, now: float) -> None:
        watch.idle_since = watch.heard_at = now
        watch.probe_sent_at = None
        watch.draw = self._rng.random()

    def _idling(self, watch: Watch, news: IdleNews) -> None:
        """In IDLE: fetch at once if IDLE began with news of mail, else wait at the mux."""
        assert watch.session is not None
        if news.folders_changed:
            self._hooks.on_folders_changed(watch.account_id)
        if news.closed:
            self._finish(watch, StopReason.CLOSED, None)
        elif news.exists:
            watch.state = "fetching"
            self._fetch(watch)
        else:
            watch.fileno = watch.session.idle_fileno()
            watch.state = "idling"
            self._command("register", watch)

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the pool is shut down: we are closing
            self._pool.submit(fn, *args)

    def _finish(self, watch: Watch, reason: WhyStopped, error: BaseException | None) -> None:
        watch.state = "stopped"
        self._counts.login_ended(watch, ok=False)
        if watch.session is not None:
            with contextlib.suppress(Exception):
                watch.session.close()
        with self._lock:
            if self._watches.get(watch.account_id) is watch:
                del self._watches[watch.account_id]
        lived = self._clock() - watch.connected_at if watch.connected_at else 0.0
        if error is not None and not isinstance(error, MailProviderError):
            log.warning(
                "watch.crashed account_id=%s error=%s", watch.account_id, type(error).__name__
            )
        else:
            log.info(
                "watch.stopped account_id=%s reason=%s error=%s",
                watch.account_id,
                watch.stop_reason or reason,
                type(error).__name__ if error else "-",
            )
        self._hooks.on_stopped(
            watch.account_id, watch.generation, watch.stop_reason or reason, error, lived
        )

    # --- the mux thread --------------------------------------------------------------

    def _loop(self) -> None:
        # Timers are seconds to minutes long: checking them (a scan of every watch) on each
        # wake-up would cost O(watches) per EXISTS in a burst of new mail.
        every = self._liveness.check_every
        next_check = 0.0
        while self._running:
            try:
                ready = self._selector.select(timeout=1.0)
            except OSError:
                ready = []
            now = self._clock()
            for key, _ in ready:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                    continue
                self._readable(key.data, now)
            self._wake_pending = False  # before draining: a command queued later wakes us
            self._drain_commands()
            if now >= next_check:
                next_check = now + every
                self._check_timers(now)

    def _unregister(self, watch: Watch) -> None:
        if watch.fileno >= 0:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(watch.fileno)

    def _readable(self, watch: Watch, now: float) -> None:
        assert watch.session is not None
        try:
            news = watch.session.idle_read()
        except Exception as error:  # any failure ends this watch
            self._unregister(watch)
            self._pool.submit(self._finish, watch, StopReason.ERROR, error)
            return
        if news.heard:
            watch.heard_at = now
        if news.answered:
            self._counts.probe("answered")
            self._fresh_idle(watch, now)  # the probe's IDLE runs: a fresh one
        if news.folders_changed:
            self._hooks.on_folders_changed(watch.account_id)
        if news.closed:
            self._unregister(watch)
            self._pool.submit(self._finish, watch, StopReason.CLOSED, None)
        elif news.exists:
            self._unregister(watch)
            watch.state = "fetching"
            self._pool.submit(self._fetch, watch)

    def _drain_commands(self) -> None:
        while True:
            try:
                verb, watch = self._commands.get_nowait()
            except queue.Empty:
                return
            if verb == "register":
                self._register(watch)
            elif verb == "stop":
                # Idling: the socket is ours, close it now; parked: nobody works on it.
                # Otherwise the pool thread working on it sees stop_reason at its next step.
                if self._take(watch, ("idling", "parked"), "stopped"):
                    reason = watch.stop_reason or StopReason.STOPPED
                    self._pool.submit(self._finish, watch, reason, None)
            elif verb == "refresh" and self._take(watch, ("idling",), "refreshing"):
                self._pool.submit(self._idle, watch)  # asks first; otherwise: at its next IDLE

    def _register(self, watch: Watch) -> None:
        if watch.stop_reason is not None or not self._current(watch):
            reason = watch.stop_reason or StopReason.STALE
            self._pool.submit(self._finish, watch, reason, None)
            return
        try:
            self._selector.register(watch.fileno, selectors.EVENT_READ, watch)
        except (KeyError, ValueError, OSError) as error:
            self._pool.submit(self._finish, watch, StopReason.ERROR, error)

    def _take(self, watch: Watch, states: tuple[State, ...], to: State) -> bool:
        """A watch in one of ``states`` moves to ``to``, off the selector; else False."""
        with self._lock:
            ours = watch.state in states
            if ours:
                watch.state = to
        if ours:
            self._unregister(watch)
        return ours

    def _check_timers(self, now: float) -> None:
        with self._lock:
            idling = [w for w in self._watches.values() if w.state == "idling"]
        for watch in idling:
            verdict = self._liveness.verdict(
                now,
                heard_at=watch.heard_at,
                idle_since=watch.idle_since,
                probe_sent_at=watch.probe_sent_at,
                draw=watch.draw,
            )
            if verdict is Verdict.DEAD:
                self._counts.probe("unanswered")
                log.info("watch.unanswered account_id=%s", watch.account_id)
                self._unregister(watch)
                watch.state = "stopped"
                self._pool.submit(self._finish, watch, StopReason.SILENT, None)
            elif verdict is Verdict.PROBE:
                self._probe(watch, now)

    def _probe(self, watch: Watch, now: float) -> None:
        """Write the probe here, on the mux (a few bytes into an idle socket's empty send
        buffer do not block); its answer comes back through ``_readable``."""
        assert watch.session is not None
        try:
            watch.session.idle_probe()
        except Exception as error:  # any failure ends this watch
            self._unregister(watch)
            watch.state = "stopped"
            self._pool.submit(self._finish, watch, StopReason.ERROR, error)
            return
        watch.probe_sent_at = now
        self._counts.probe("sent")
        log.debug("watch.probe account_id=%s", watch.account_id)
