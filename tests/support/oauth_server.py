"""A small OAuth2 token server for the tests, on 127.0.0.1 (a real HTTP server).

- ``POST /token`` (``grant_type=refresh_token``): issues an access token valid for
  ``expires_in`` seconds; with ``rotate`` on, a new refresh token too, and the old one
  dies. Counts every refresh request (``refresh_count``) and keeps every form posted
  (``forms``). On command it answers ``invalid_grant`` (``revoke``), 503
  (``fail_with``), hangs (``hang``; a hung request never issues anything), or sends a
  status line and then one header byte every ``drip`` seconds for as long as it is set
  (a per-read timeout never fires on it); ``delay``
  widens the window in which racing refreshers could slip through.
- ``POST /introspect`` (``token=…``, Dovecot's ``introspection_mode = post``): answers
  ``{"active": true, "username": …}`` for a live access token, ``{"active": false}``
  otherwise (unknown or expired: ``expire_all``).

Usage::

    with OAuthServer() as server:
        refresh = server.grant("user1")        # a refresh token for the mailbox user
        server.token_url                       # http://127.0.0.1:PORT/token
        server.dovecot_config(tmp_path)        # passdb lines for DovecotServer(extra_config=)
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs


@dataclass
class _State:
    refresh: dict[str, str] = field(default_factory=dict)  # refresh token -> user
    access: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> user, expiry
    refresh_requests: list[str] = field(default_factory=list)  # refresh tokens presented
    hosts: list[str] = field(default_factory=list)  # the Host header of each token request
    forms: list[dict[str, str]] = field(default_factory=list)  # each token request's form
    introspections: int = 0


class OAuthServer:
    def __init__(self, *, expires_in: int = 3600, rotate: bool = True) -> None:
        self.expires_in = expires_in
        self.rotate = rotate
        self.delay = 0.0
        self.fail_with: int | None = None
        self.hang = threading.Event()  # set: /token hangs until cleared (or 30 s)
        self.raw_answer: bytes | None = None  # set: /token answers these bytes with 200
        self.drip: float | None = None  # set: /token drips its headers, a byte this often
        # Called with each introspected token before the answer (what was stored then).
        self.on_introspect: Callable[[str], None] | None = None
        self._state = _State()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        # Polled 20 times a second, so ``shutdown`` returns at once, not after up to the
        # default half second.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.hang.clear()
        self.drip = None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    @property
    def introspection_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/introspect"

    def dovecot_config(self, directory: Path) -> str:
        """Extra Dovecot 2.3 lines: an ``oauth2`` passdb for XOAUTH2/OAUTHBEARER that
        validates tokens through this server's introspection endpoint."""
        ext = directory / "dovecot-oauth2.conf.ext"
        ext.write_text(
            f"introspection_url = {self.introspection_url}\n"
            "introspection_mode = post\n"
            "force_introspection = yes\n"
            "username_attribute = username\n"
            "active_attribute = active\n"
            "active_value = true\n"
            "timeout_msecs = 5000\n"
        )
        ext.chmod(0o644)
        directory.chmod(0o755)
        mechanisms = "xoauth2 oauthbearer"
        return f"passdb {{\n  driver = oauth2\n  mechanisms = {mechanisms}\n  args = {ext}\n}}\n"

    # -- commands ----------------------------------------------------------

    def grant(self, user: str) -> str:
        token = "rt-" + secrets.token_urlsafe(16)
        with self._lock:
            self._state.refresh[token] = user
        return token

    def revoke(self, refresh_token: str | None = None) -> None:
        """Kill one refresh token (all when None): the next refresh is ``invalid_grant``."""
        with self._lock:
            if refresh_token is None:
                self._state.refresh.clear()
            else:
                self._state.refresh.pop(refresh_token, None)

    def expire_all(self) -> None:
        """Every access token issued so far stops being valid."""
        with self._lock:
            for token, (user, _) in list(self._state.access.items()):
                self._state.access[token] = (user, 0.0)

    def live_refresh_tokens(self, user: str) -> list[str]:
        with self._lock:
            return [t for t, u in self._state.refresh.items() if u == user]

    @property
    def refresh_count(self) -> int:
        with self._lock:
            return len(self._state.refresh_requests)

    @property
    def hosts(self) -> list[str]:
        """The ``Host`` header of every token request so far."""
        with self._lock:
            return list(self._state.hosts)

    @property
    def forms(self) -> list[dict[str, str]]:
        """Every form posted to ``/token`` so far (client credentials included)."""
        with self._lock:
            return list(self._state.forms)

    @property
    def refresh_requests(self) -> list[str]:
        with self._lock:
            return list(self._state.refresh_requests)

    @property
    def introspections(self) -> int:
        with self._lock:
            return self._state.introspections

    def issued_access_tokens(self) -> list[str]:
        with self._lock:
            return list(self._state.access)

    # -- the HTTP side -----------------------------------------------------

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        presented = form.get("refresh_token", "")
        with self._lock:
            self._state.refresh_requests.append(presented)
        if self.delay:
            time.sleep(self.delay)
        give_up, hung = time.monotonic() + 30, self.hang.is_set()
        while self.hang.is_set() and time.monotonic() < give_up:
            time.sleep(0.05)
        if hung:  # its client gave up long ago: a hung request never issues a token
            return 503, {"error": "temporarily_unavailable"}
        if self.fail_with is not None:
            return self.fail_with, {"error": "temporarily_unavailable"}
        if form.get("grant_type") != "refresh_token":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            user = self._state.refresh.get(presented)
            if user is None:
                return 400, {"error": "invalid_grant", "error_description": "revoked"}
            access = "at-" + secrets.token_urlsafe(24)
            self._state.access[access] = (user, time.time() + self.expires_in)
            answer: dict[str, object] = {
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": self.expires_in,
            }
            if self.rotate:
                del self._state.refresh[presented]
                rotated = "rt-" + secrets.token_urlsafe(16)
                self._state.refresh[rotated] = user
                answer["refresh_token"] = rotated
        return 200, answer

    def _introspect(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        if self.on_introspect is not None:
            self.on_introspect(form.get("token", ""))
        with self._lock:
            self._state.introspections += 1
            found = self._state.access.get(form.get("token", ""))
        if found is None or found[1] <= time.time():
            return 200, {"active": False}
        return 200, {"active": True, "username": found[0]}

    def _special(self, handler: BaseHTTPRequestHandler, form: dict[str, str]) -> bool:
        """Record a token request; answer it with a drip or the raw answer (True) when
        one is set."""
        with self._lock:
            self._state.hosts.append(handler.headers.get("Host", ""))
            self._state.forms.append(form)
        if self.drip is not None:
            self._drip(handler, self.drip)
            return True
        if self.raw_answer is not None and self.fail_with is None:
            with self._lock:
                self._state.refresh_requests.append(form.get("refresh_token", ""))
            _send(handler, 200, self.raw_answer)
            return True
        return False

    def _drip(self, handler: BaseHTTPRequestHandler, every: float) -> None:
        give_up = time.monotonic() + 120
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            handler.wfile.flush()
            while self.drip is not None and time.monotonic() < give_up:
                time.sleep(every)
                handler.wfile.write(b"X")
                handler.wfile.flush()
        except OSError:  # the client cut it off: what the tests expect
            pass
        handler.close_connection = True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                form = {k: v[0] for k, v in parse_qs(raw).items()}
                if self.path == "/token":
                    if server._special(self, form):
                        return
                    status, body = server._token(form)
                elif self.path == "/introspect":
                    status, body = server._introspect(form)
                else:
                    status, body = 404, {"error": "not_found"}
                self._send(status, json.dumps(body).encode())

            def _send(self, status: int, body: bytes) -> None:
                _send(self, status, body)

        return Handler


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    except OSError:  # the client gave up (a timeout test)
        pass
