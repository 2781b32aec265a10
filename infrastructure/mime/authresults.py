"""Authentication-Results (RFC 8601) parsing and the DMARC verdict. Pure.

Only headers stamped with the account's trusted authserv-id count. RFC 8601 §5
makes the receiving MTA delete incoming headers that carry its own authserv-id,
so a trusted header was written by the trusted server; the topmost such header
with a ``dmarc`` result decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_METHOD = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:/\s*\d+\s*)?=\s*([A-Za-z0-9_.-]+)")
_PROP = re.compile(r"([A-Za-z0-9_-]+\.[A-Za-z0-9_.-]+)\s*=\s*(\"[^\"]*\"|[^\s;]+)")


@dataclass(frozen=True, slots=True)
class MethodResult:
    method: str
    result: str
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AuthenticationResults:
    authserv_id: str
    results: tuple[MethodResult, ...]

    def result(self, method: str) -> str | None:
        for r in self.results:
            if r.method == method:
                return r.result
        return None


def parse_authentication_results(value: str) -> AuthenticationResults | None:
    """One header value → its authserv-id and method results; None if unreadable."""
    segments = _split(_strip_comments(value))
    if not segments or not segments[0].split():
        return None
    authserv_id = segments[0].split()[0].strip('"').lower()
    results = []
    for seg in segments[1:]:
        match = _METHOD.match(seg)
        if not match:
            continue
        props = tuple((k.lower(), v.strip('"')) for k, v in _PROP.findall(seg[match.end() :]))
        results.append(MethodResult(match.group(1).lower(), match.group(2).lower(), props))
    return AuthenticationResults(authserv_id, tuple(results))


def dmarc_verdict(headers: Iterable[AuthenticationResults], trusted_authserv_id: str) -> str | None:
    """``pass`` / ``fail`` / ``none`` / … from the trusted server, or None if it said nothing."""
    trusted = trusted_authserv_id.strip().lower()
    if not trusted:
        return None
    for header in headers:
        if header.authserv_id == trusted:
            verdict = header.result("dmarc")
            if verdict is not None:
                return verdict
    return None


def _strip_comments(value: str) -> str:
    out: list[str] = []
    depth = 0
    quoted = False
    escaped = False
    for ch in value:
        if escaped:
            escaped = False
            if depth == 0:
                out.append(ch)
            continue
        if ch == "\\":
            escaped = True
            if depth == 0:
                out.append(ch)
        elif ch == '"' and depth == 0:
            quoted = not quoted
            out.append(ch)
        elif ch == "(" and not quoted:
            depth += 1
        elif ch == ")" and not quoted and depth:
            depth -= 1
            out.append(" ")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _split(value: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in value:
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]
