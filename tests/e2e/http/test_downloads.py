"""Downloads over HTTP in the real server process: a message's raw MIME and its
attachments, streamed from the sealed blob (the server's peak memory stays flat for a
large attachment), authenticated, and 404 for anything of another message or tenant."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from application import User
from application.app import App
from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.runtime.settings import Settings
from tests.e2e.http.conftest import Server, create_key
from tests.support import content_corpus as corpus
from tests.support.dovecot import DovecotServer
from tests.support.results import ok
from workers.once import poll_once

MiB = 1024 * 1024
BIG = 12 * MiB


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise LookupError("VmHWM")


@pytest.fixture(scope="module")
def mail(settings: dict[str, str]) -> Iterator[dict[str, Any]]:
    """Two tenants' messages ingested from a private Dovecot into the server's database."""
    tenant = "t-" + uuid.uuid4().hex[:8]
    admin = User(id="a", tenant_id=tenant, roles=frozenset({"TenantAdmin"}))
    app: App = bootstrap(None, **settings, allow_private_hosts=True, project_inline=False)
    full = Settings(**settings, allow_private_hosts=True, project_inline=False)  # type: ignore[arg-type]
    try:
        with DovecotServer() as dovecot:
            box = dovecot.add_user("u" + uuid.uuid4().hex[:10], "pw-" + uuid.uuid4().hex[:8])
            dovecot.deliver(
                box,
                [
                    corpus.rich_message(),
                    corpus.big_attachment_message(BIG),
                    corpus.folded_type_message(),
                ],
            )
            payload = {
                "provider": "imap",
                "displayName": "Box",
                "address": "box@mail.example",
                "scope": "shared",
                "authMethod": "password",
                "imap": {
                    "host": dovecot.host,
                    "port": dovecot.port,
                    "security": "none",
                    "username": box.name,
                },
                "secret": box.password,
            }
            ok(app.write("connect-mail-account", payload, admin))
            poll_once(app, build_syncer(app, full), concurrency=2, deadline_seconds=120.0)
        app.projections.catch_up()
        listed = ok(app.query("list-messages", {"limit": 10}, admin))["items"]
        by_subject = {m["subject"]: m["messageId"] for m in listed}
        rich = ok(app.query("get-message", {"messageId": by_subject["rich"]}, admin))
        big = ok(app.query("get-message", {"messageId": by_subject["big attachment"]}, admin))
        folded = ok(app.query("get-message", {"messageId": by_subject["folded type"]}, admin))
        yield {"admin": admin, "app": app, "rich": rich, "big": big, "folded": folded}
    finally:
        app.close()


def _key(mail: dict[str, Any]) -> str:
    return create_key(mail["app"], mail["admin"], "TenantAdmin")


def test_a_large_attachment_streams_with_flat_server_memory(
    server: Server, mail: dict[str, Any]
) -> None:
    [attachment] = mail["big"]["attachments"]
    url = f"/v1/messages/{mail['big']['messageId']}/attachments/{attachment['attachmentId']}"
    with server.client(_key(mail)) as client:
        client.get(f"/v1/messages/{mail['rich']['messageId']}/raw")  # warm the route
        before = _peak_rss_kib(server.process.pid)
        digest, size = hashlib.sha256(), 0
        with client.stream("GET", url) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-length"] == str(BIG)
            for chunk in response.iter_bytes():
                digest.update(chunk)
                size += len(chunk)
        growth = (_peak_rss_kib(server.process.pid) - before) * 1024
    assert size == BIG
    assert digest.hexdigest() == hashlib.sha256(corpus.big_attachment_bytes(BIG)).hexdigest()
    assert growth < 8 * MiB, f"the server's peak RSS grew {growth / MiB:.1f} MiB"


def test_the_raw_message_and_each_attachment_download(server: Server, mail: dict[str, Any]) -> None:
    rich = mail["rich"]
    with server.client(_key(mail)) as client:
        raw = client.get(f"/v1/messages/{rich['messageId']}/raw")
        assert raw.status_code == 200
        assert raw.headers["content-type"] == "message/rfc822"
        assert raw.content == corpus.rich_message()
        png, pdf, notes = rich["attachments"]
        expected = {png["attachmentId"]: corpus.PNG, pdf["attachmentId"]: corpus.PDF}
        for attachment_id, data in expected.items():
            got = client.get(f"/v1/messages/{rich['messageId']}/attachments/{attachment_id}")
            assert got.status_code == 200 and got.content == data
            assert got.headers["content-type"] == "application/octet-stream"
            assert got.headers["x-content-type-options"] == "nosniff"
            assert got.headers["content-security-policy"].startswith("sandbox")
        got = client.get(f"/v1/messages/{rich['messageId']}/attachments/{pdf['attachmentId']}")
        disposition = got.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="r_sum_ final.pdf"')
        assert "filename*=UTF-8''r%C3%A9sum%C3%A9%20final.pdf" in disposition
        assert got.headers["x-tidings-content-type"] == "application/pdf"
        got = client.get(f"/v1/messages/{rich['messageId']}/attachments/{notes['attachmentId']}")
        assert got.content == b"notes in a file\r\n"


def test_a_folded_content_type_and_a_hostile_name_download_cleanly(
    server: Server, mail: dict[str, Any]
) -> None:
    """A sender's Content-Type with CR LF inside once went into a response header (the
    HTTP library refused it and the connection dropped): it is reduced to its
    ``type/subtype``, and the name loses its bidi override and zero-width space."""
    folded = mail["folded"]
    [attachment] = folded["attachments"]
    assert attachment["filename"] == "invoicefdp.exe"
    url = f"/v1/messages/{folded['messageId']}/attachments/{attachment['attachmentId']}"
    with server.client(_key(mail)) as client:
        got = client.get(url)
    assert got.status_code == 200 and got.content == b"evil"
    assert got.headers["x-tidings-content-type"] == "application/x-evil"
    assert 'filename="invoicefdp.exe"' in got.headers["content-disposition"]


def test_downloads_of_another_message_or_tenant_are_404_and_need_a_key(
    server: Server, mail: dict[str, Any], local_app: App
) -> None:
    rich, big = mail["rich"], mail["big"]
    pdf = rich["attachments"][1]
    stranger = User(id="s", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"}))
    strange_key = create_key(local_app, stranger, "TenantAdmin")
    own = f"/v1/messages/{rich['messageId']}/attachments/{pdf['attachmentId']}"
    with server.client(_key(mail)) as client:
        for path in (
            f"/v1/messages/{big['messageId']}/attachments/{pdf['attachmentId']}",
            f"/v1/messages/{rich['messageId']}/attachments/2",
            f"/v1/messages/{rich['messageId']}/attachments/..%2F..%2Fetc%2Fpasswd",
            f"/v1/messages/{uuid.uuid4()}/raw",
            f"/v1/messages/{'x' * 3000}/attachments/{'y' * 3000}",
        ):
            response = client.get(path)
            assert response.status_code == 404, (path, response.text)
            assert response.headers["content-type"] == "application/problem+json"
    with server.client(strange_key) as client:
        assert client.get(own).status_code == 404
        assert client.get(f"/v1/messages/{rich['messageId']}/raw").status_code == 404
    with server.client() as client:
        assert client.get(own).status_code == 401
    with httpx.Client(base_url=server.url) as client:
        assert client.get(own, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_the_openapi_document_names_the_downloads(server: Server) -> None:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    assert "/v1/messages/{messageId}/raw" in paths
    assert "/v1/messages/{messageId}/attachments/{attachmentId}" in paths
