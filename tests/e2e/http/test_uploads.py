"""``POST /v1/uploads`` against a real ``tidings serve`` (uvicorn) on both backends, as a
tenant's application and as a hostile client would use it: an upload named by its
``uploadId`` in ``send-message``; a declared or streamed body past ``max_send_mb`` is
413; a body dripped slower than ``api_upload_timeout`` is cut with 408 at that deadline,
and while it drips the tenant's second upload is 429 (another tenant's goes through);
another account's or tenant's use of an ``uploadId`` is 404."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from application import User
from application.app import App
from tests.e2e.http.conftest import Server, create_key
from tests.support.results import ok

StartServer = Any


def _tenant() -> tuple[User, str]:
    tenant = "t-" + uuid.uuid4().hex[:8]
    return User(id="u-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin"})), tenant


def _account(app: App, user: User, name: str) -> str:
    """An account on a public address that nothing dials (no verify, no worker runs)."""
    host = "93.184.215.14"
    payload = {
        "provider": "imap",
        "displayName": name,
        "address": f"{name}@mail.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": host, "port": 993, "security": "none", "username": name},
        "smtp": {"host": host, "port": 587, "security": "starttls", "username": name},
        "secret": "pw",
    }
    return str(ok(app.write("connect-mail-account", payload, user))["accountId"])


def _upload(http: httpx.Client, account_id: str, content: Any, **headers: str) -> httpx.Response:
    return http.post(
        "/v1/uploads",
        params={"accountId": account_id, "filename": "report.pdf"},
        content=content,
        headers={"Content-Type": "application/pdf", **headers},
    )


def _answer(sock: socket.socket) -> bytes:
    """A whole response (a problem's JSON ends with ``}``), or what came before EOF."""
    data = b""
    while not data.rstrip().endswith(b"}") and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _send(http: httpx.Client, account_id: str, upload_id: str) -> httpx.Response:
    return http.post(
        "/v1/commands/send-message",
        json={
            "accountId": account_id,
            "to": ["someone@mail.example"],
            "subject": "The report",
            "attachments": [{"uploadId": upload_id}],
            "idempotencyKey": uuid.uuid4().hex,
        },
    )


def test_an_upload_over_http_is_sent_by_its_id_from_its_own_account_only(
    start_server: StartServer, local_app: App
) -> None:
    server: Server = start_server(max_send_mb="0.5")
    user, _ = _tenant()
    mine, other = _account(local_app, user, "sales"), _account(local_app, user, "support")
    stranger, _ = _tenant()
    with server.client(create_key(local_app, user, "TenantAdmin")) as http:
        data = os.urandom(200 * 1024)
        answer = _upload(http, mine, data)
        assert answer.status_code == 200, answer.text
        upload = answer.json()
        assert upload["size"] == len(data) and upload["contentType"] == "application/pdf"
        assert _send(http, other, upload["uploadId"]).status_code == 404
        with server.client(create_key(local_app, stranger, "TenantAdmin")) as theirs:
            assert _upload(theirs, mine, b"x").status_code == 404
            assert _send(theirs, mine, upload["uploadId"]).status_code == 404
        sent = _send(http, mine, upload["uploadId"])
        assert sent.status_code == 200, sent.text
        assert sent.json()["state"] == "queued"
        assert _send(http, mine, upload["uploadId"]).status_code == 404, "used once"
        refused = _upload(http, mine, b"x", **{"Content-Type": "not a type"})
        assert refused.status_code == 400
        injected = http.post(
            "/v1/uploads",
            params={"accountId": mine, "filename": "a.pdf\r\nBcc: x@mail.example"},
            content=b"x",
        )
        assert injected.status_code == 400


def test_uploads_past_the_limit_are_413_declared_or_streamed(
    start_server: StartServer, local_app: App
) -> None:
    server: Server = start_server(max_send_mb="0.5")
    user, _ = _tenant()
    account = _account(local_app, user, "sales")
    with server.client(create_key(local_app, user, "TenantAdmin")) as http:

        def endless() -> Iterator[bytes]:  # chunked: no length declared
            for _ in range(64):
                yield b"y" * (64 * 1024)

        streamed = _upload(http, account, endless())
        assert streamed.status_code == 413 and streamed.json()["code"] == "upload_too_large"
        assert _upload(http, account, b"z" * 1024).status_code == 200
    # A declared length past the limit: answered before a byte of the body is sent.
    key = http.headers["Authorization"].split()[1]
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/uploads?accountId={account}&filename=a.bin HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Length: {10 * 1024 * 1024}\r\n\r\n".encode()
        )
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413") and b"upload_too_large" in answer


def test_a_dripped_upload_is_cut_at_its_deadline_and_holds_only_its_tenants_slot(
    start_server: StartServer, local_app: App
) -> None:
    server: Server = start_server(api_upload_timeout="2", api_uploads_per_tenant="1")
    user, _ = _tenant()
    account = _account(local_app, user, "sales")
    key = create_key(local_app, user, "TenantAdmin")
    port = int(server.url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/uploads?accountId={account}&filename=a.bin HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head)
        started = time.monotonic()
        stop = threading.Event()

        def drip() -> None:
            with contextlib.suppress(OSError):
                while not stop.wait(0.2):
                    sock.sendall(b"x")

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        time.sleep(0.5)
        with server.client(key) as http:
            second = _upload(http, account, b"while the first drips")
            assert second.status_code == 429 and second.json()["code"] == "too_many_uploads"
        other, _ = _tenant()
        other_account = _account(local_app, other, "sales")
        with server.client(create_key(local_app, other, "TenantAdmin")) as http:
            assert _upload(http, other_account, b"another tenant").status_code == 200
        sock.settimeout(15)
        answer = _answer(sock)
        stop.set()
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"request_timeout" in answer
        assert 1.5 < elapsed < 6
    with server.client(key) as http:  # the slot came back
        assert _upload(http, account, b"after the drip").status_code == 200
