"""``HttpTokenClient``: the OAuth2 token endpoint over HTTP (implements ``TokenClient``).

The answer is hostile input. The whole exchange (connect, TLS, request, status line,
headers, body) has one wall-clock deadline (``timeout``): a watchdog shuts the socket
down when it passes, so a server that drips a byte every second is cut off like one
that never answers (a per-read timeout restarts with every byte and would never fire).
The body is read up to ``max_bytes`` and no further, redirects are not followed, and
the JSON must be an object (nested at most ``MAX_JSON_DEPTH`` deep) holding a bearer
``access_token`` (printable ASCII, bounded), an ``expires_in`` within bounds and, when
rotated, a ``refresh_token`` of the same kind. A 400/401 naming ``invalid_grant`` is the
only refusal; a passed deadline is a ``TokenTimeout``; every other failure is a
``TokenServerError`` (transient). The token URL's host passes the destination check
(``TIDINGS_ALLOW_PRIVATE_HOSTS``) before each request, and the request goes to the
address the check approved (the name in ``Host`` and SNI); plain ``http`` is accepted
only for a host that check lets through as private.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, urlencode, urlsplit, urlunsplit

from application.destinations import DestinationPolicy, HostNotAllowed, IpAddress
from application.mail.oauth import TokenAnswer, TokenRefusedGrant, TokenServerError, TokenTimeout
from application.mail.ports import MailProviderError

MAX_TOKEN_CHARS = 8192
MIN_EXPIRES_IN = 1.0
MAX_EXPIRES_IN = 366 * 24 * 3600.0
DEFAULT_EXPIRES_IN = 3600.0
MAX_JSON_DEPTH = 32  # a token answer is flat; deeper nesting is an attack on the parser
USER_AGENT = "tidings-oauth/1"


class HttpTokenClient:
    def __init__(
        self,
        destinations: DestinationPolicy,
        *,
        timeout: float = 15.0,
        max_bytes: int = 64 * 1024,
        allow_http: bool = False,
    ) -> None:
        self._destinations = destinations
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._allow_http = allow_http

    def refresh(
        self,
        token_url: str,
        *,
        refresh_token: str,
        client_id: str | None,
        client_secret: str | None,
        scopes: tuple[str, ...],
    ) -> TokenAnswer:
        url = check_token_url(token_url, allow_http=self._allow_http)
        host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
        try:
            approved = self._destinations.approved(host, port)
        except HostNotAllowed:
            raise TokenServerError("the token URL's host is not allowed") from None
        except MailProviderError:
            raise TokenServerError("the token URL's host does not resolve") from None
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        if client_id:
            form["client_id"] = client_id
        if client_secret:
            form["client_secret"] = client_secret
        if scopes:
            form["scope"] = " ".join(scopes)
        address = approved[0] if approved else None
        status, body = self._post(url, address, form)
        return parse_answer(status, body)

    def _post(
        self, url: SplitResult, address: IpAddress | None, form: dict[str, str]
    ) -> tuple[int, bytes]:
        target = pinned(url, address)
        deadline = time.monotonic() + self._timeout
        conn = _connection(url, address, deadline)
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            conn.expired = True
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self._timeout, cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request(
                "POST",
                urlunsplit(("", "", url.path or "/", url.query, "")),
                body=urlencode(form).encode(),
                headers={
                    "Host": target.host_header,
                    "Accept": "application/json",
                    "Content-Type": "application/x-www-form-urlencoded",
                    "User-Agent": USER_AGENT,
                    "Connection": "close",
                },
            )
            response = conn.getresponse()
            body = response.read(self._max_bytes + 1)
            status = response.status
        except (OSError, http.client.HTTPException, ValueError) as error:
            # A socket timeout is the deadline too: each read may wait what was left of it
            # when the connection was made, so it can fire just before the watchdog does.
            if expired.is_set() or isinstance(error, TimeoutError) or time.monotonic() >= deadline:
                raise TokenTimeout("the token request passed its deadline") from None
            raise TokenServerError(f"token request failed ({type(error).__name__})") from None
        finally:
            watchdog.cancel()
            conn.close()
        if expired.is_set():
            raise TokenTimeout("the token request passed its deadline")
        if len(body) > self._max_bytes:
            raise TokenServerError("the token answer is too large")
        return status, body


class _DeadlineConnection(http.client.HTTPConnection):
    """Connects to the approved address (not the name) within what is left of the
    exchange's deadline; the watchdog can shut the socket from the moment it exists."""

    def __init__(self, host: str, port: int, address: str, expires: float) -> None:
        super().__init__(host, port, timeout=max(expires - time.monotonic(), 0.001))
        self._address = address
        self._expires = expires
        self.expired = False

    def connect(self) -> None:
        left = self._expires - time.monotonic()
        if left <= 0:
            raise TimeoutError("the token request passed its deadline")
        self.sock = socket.create_connection((self._address, self.port), left)
        if self.expired:  # the watchdog fired while the socket was being made
            raise TimeoutError("the token request passed its deadline")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _DeadlineTLSConnection(_DeadlineConnection):
    def __init__(self, host: str, port: int, address: str, expires: float) -> None:
        super().__init__(host, port, address, expires)
        self._context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        # The watchdog shuts the plain socket down, which ends a dripped handshake too.
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


def _connection(url: SplitResult, address: IpAddress | None, expires: float) -> _DeadlineConnection:
    https = url.scheme == "https"
    name = url.hostname or ""
    port = url.port or (443 if https else 80)
    kind = _DeadlineTLSConnection if https else _DeadlineConnection
    return kind(name, port, str(address) if address is not None else name, expires)


@dataclass(frozen=True)
class Pinned:
    """A request's URL naming the address to connect to, with the name the server is
    asked for (``Host``) and whose certificate it must present (SNI)."""

    url: str
    host_header: str
    server_name: str


def pinned(url: SplitResult, address: IpAddress | None = None) -> Pinned:
    """``url`` sent to ``address`` (the one the destination check approved), so the
    name is not resolved again between the check and the connection."""
    name = url.hostname or ""
    host_header = url.netloc
    if address is None:
        return Pinned(urlunsplit(url), host_header, name)
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{literal}:{url.port}" if url.port else literal
    return Pinned(urlunsplit(url._replace(netloc=netloc)), host_header, name)


def check_token_url(token_url: str, *, allow_http: bool) -> SplitResult:
    """The parsed URL of an acceptable token endpoint: https (http only when allowed),
    a host, no user info, no fragment; raise ``ValueError`` otherwise."""
    url = urlsplit(token_url)
    if url.scheme not in ("https", "http") or (url.scheme == "http" and not allow_http):
        raise ValueError("the token URL must be https")
    if not url.hostname or url.username is not None or url.password is not None:
        raise ValueError("the token URL needs a host and no user info")
    if url.fragment:
        raise ValueError("the token URL has no fragment")
    url.port  # noqa: B018 - raises ValueError for a bad port
    return url


def parse_answer(status: int, body: bytes) -> TokenAnswer:  # noqa: C901
    """A token endpoint's answer, strictly."""
    data: object = None
    if body and nesting_within(body, MAX_JSON_DEPTH):
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            data = None
    elif body:
        raise TokenServerError("the token answer is nested too deep")
    if status != 200:
        if status in (400, 401) and isinstance(data, dict) and data.get("error") == "invalid_grant":
            raise TokenRefusedGrant("invalid_grant")
        raise TokenServerError(f"token endpoint answered {status}")
    if not isinstance(data, dict):
        raise TokenServerError("the token answer is not a JSON object")
    access = _token(data.get("access_token"))
    if access is None:
        raise TokenServerError("the token answer has no usable access_token")
    kind = data.get("token_type", "Bearer")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise TokenServerError("the token answer is not a bearer token")
    expires = data.get("expires_in", DEFAULT_EXPIRES_IN)
    if isinstance(expires, str) and expires.isdigit():  # some servers send a string
        expires = int(expires)
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise TokenServerError("the token answer's expires_in is not a number")
    if not MIN_EXPIRES_IN <= expires <= MAX_EXPIRES_IN:
        raise TokenServerError("the token answer's expires_in is out of bounds")
    rotated = data.get("refresh_token")
    refresh = _token(rotated) if rotated is not None else None
    if rotated is not None and refresh is None:
        raise TokenServerError("the token answer's refresh_token is not usable")
    return TokenAnswer(access_token=access, expires_in=float(expires), refresh_token=refresh)


def _token(value: object) -> str | None:
    """A token as it may go into a SASL string: printable ASCII without spaces."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TOKEN_CHARS:
        return None
    if not all("\x21" <= ch <= "\x7e" for ch in value):
        return None
    return value


def nesting_within(body: bytes, limit: int) -> bool:
    """True when no array or object in the JSON text ``body`` opens deeper than
    ``limit`` (brackets inside strings do not count): checked before parsing, since a
    deep document exhausts the parser's recursion."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return True
