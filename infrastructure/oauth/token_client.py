"""``HttpTokenClient``: the OAuth2 token endpoint over httpx (implements ``TokenClient``).

The answer is hostile input: the request has a total deadline (``timeout``) as well as
httpx's per-phase timeouts, the body is read in chunks up to ``max_bytes`` and no
further, redirects are not followed, and the JSON must be an object holding a bearer
``access_token`` (printable ASCII, bounded), an ``expires_in`` within bounds and, when
rotated, a ``refresh_token`` of the same kind. A 400/401 naming ``invalid_grant`` is the
only refusal; every other failure is a ``TokenServerError`` (transient). The token URL's
host passes the destination check (``TIDINGS_ALLOW_PRIVATE_HOSTS``) before each request,
and the request goes to the address the check approved (the name in ``Host`` and SNI);
plain ``http`` is accepted only for a host that check lets through as private.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

from application.destinations import DestinationPolicy, HostNotAllowed, IpAddress
from application.mail.oauth import TokenAnswer, TokenRefusedGrant, TokenServerError
from application.mail.ports import MailProviderError

MAX_TOKEN_CHARS = 8192
MIN_EXPIRES_IN = 1.0
MAX_EXPIRES_IN = 366 * 24 * 3600.0
DEFAULT_EXPIRES_IN = 3600.0


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
        status, body = self._post(pinned(url, approved[0] if approved else None), form)
        return parse_answer(status, body)

    def _post(self, url: Pinned, form: dict[str, str]) -> tuple[int, bytes]:
        import httpx  # noqa: PLC0415 - only a refresh needs it; every CLI start would pay

        deadline = time.monotonic() + self._timeout
        timeout = httpx.Timeout(self._timeout)
        try:
            with (
                httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
                client.stream(
                    "POST",
                    url.url,
                    data=form,
                    headers={"Accept": "application/json", "Host": url.host_header},
                    extensions={"sni_hostname": url.server_name},
                ) as response,
            ):
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise TokenServerError("the token answer is too large")
                    if time.monotonic() > deadline:
                        raise TokenServerError("the token answer took too long")
                    chunks.append(chunk)
                return response.status_code, b"".join(chunks)
        except httpx.HTTPError as error:
            raise TokenServerError(f"token request failed ({type(error).__name__})") from None


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
    try:
        data = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        data = None
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
