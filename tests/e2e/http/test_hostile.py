"""The second audit's HTTP findings, tried against a real ``tidings serve`` (uvicorn) on
both backends as a legitimate user of one tenant with an API key would: a burst of
requests that dial out to slow servers leaves other tenants at their latency; a
revoked key's open stream and long poll end; made-up keys spend a budget before any
key is looked up; a shredded tenant's keys answer 401; a client dripping its headers
is cut off and a key's streams are capped; keys are listed over HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from application import SYSTEM_TENANT_ID, User
from application.app import App
from infrastructure.crypto.keyring import LIVE_RECHECK
from infrastructure.http.feed_routes import RECHECK
from tests.e2e.http.conftest import Server, create_key
from tests.support.oauth_server import OAuthServer
from tests.support.results import ok

FIELD = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}
OPERATOR = User(id="op", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
StartServer = Any  # the conftest's factory: start_server(**settings) -> Server


def _user(*roles: str) -> User:
    tenant = "t-" + uuid.uuid4().hex[:8]
    return User(id="u-" + tenant, tenant_id=tenant, roles=frozenset(roles))


def _key_id(key: str) -> str:
    return key.split("_")[1]


def _query_seconds(http: httpx.Client) -> float:
    started = time.monotonic()
    answer = http.post("/v1/queries/list-field-definitions", json={"entityName": "contact"})
    assert answer.status_code == 200, answer.text
    return time.monotonic() - started


def _verify_payload(kind: str, imap_port: int, token_url: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": "Box",
        "address": "box@mail.example",
        "scope": "user",
        "imap": {"host": "127.0.0.1", "port": imap_port, "security": "none", "username": "b"},
        "verify": True,
    }
    if kind == "oauth":
        oauth = {"provider": "custom", "refreshToken": "rt", "tokenUrl": token_url}
        return {**payload, "authMethod": "xoauth2", "oauth": oauth}
    return {**payload, "authMethod": "password", "secret": "pw"}


def test_one_tenants_dial_out_burst_leaves_other_tenants_at_their_latency(
    start_server: StartServer, local_app: App
) -> None:
    server = start_server(
        allow_private_hosts="true",
        api_rate_per_second="1000",
        api_rate_burst="1000",
        api_address_rate_per_second="100000",
        api_address_rate_burst="100000",
        oauth_token_timeout="3",
        verify_timeout="3",
    )
    attacker = create_key(local_app, _user("TenantAdmin", "TenantMember"), "TenantMember")
    victim_user = _user("TenantAdmin")
    victim = create_key(local_app, victim_user, "TenantAdmin")
    ok(local_app.write("define-tenant-field", FIELD, victim_user))
    with server.client(victim) as http:
        baseline = sorted(_query_seconds(http) for _ in range(5))
    # An IMAP server that accepts (the kernel's backlog) and never greets, and a token
    # endpoint that sends a status line and then a header byte every half second.
    with socket.create_server(("127.0.0.1", 0), backlog=256) as silent, OAuthServer() as tokens:
        tokens.drip = 0.5
        port = silent.getsockname()[1]
        payloads = [_verify_payload(k, port, tokens.token_url) for k in ("oauth", "imap") * 24]

        def attack(payload: dict[str, Any]) -> tuple[int, float]:
            started = time.monotonic()
            with httpx.Client(base_url=server.url, timeout=60.0) as http:
                answer = http.post(
                    "/v1/commands/connect-mail-account",
                    json=payload,
                    headers={"Authorization": f"Bearer {attacker}"},
                )
            return answer.status_code, time.monotonic() - started

        with ThreadPoolExecutor(len(payloads)) as pool:
            futures = [pool.submit(attack, payload) for payload in payloads]
            time.sleep(1.0)  # the burst is in flight
            with server.client(victim) as http:
                during = [_query_seconds(http) for _ in range(10)]
            answers = [future.result() for future in futures]
        tokens.drip = None
    assert max(during) < 1.0, (baseline, during)
    statuses = Counter(status for status, _ in answers)
    assert set(statuses) <= {422, 429}, statuses
    assert statuses[429] > 0  # past the tenant's cap of requests that dial out
    assert statuses[422] > 0  # those that ran ended at their deadline, answered
    assert max(seconds for _, seconds in answers) < 20, answers


def _stream_lines(server: Server, key: str, lines: list[tuple[float, str]]) -> None:
    timeout = httpx.Timeout(10.0, read=40.0)
    with (
        server.client(key) as http,
        http.stream("GET", "/v1/events/stream", timeout=timeout) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append((time.monotonic(), line))


def test_a_revoked_keys_stream_and_long_poll_end(server: Server, local_app: App) -> None:
    admin = _user("TenantAdmin")
    key = create_key(local_app, admin, "TenantAdmin")
    ok(local_app.write("define-tenant-field", FIELD, admin))
    local_app.projections.catch_up()
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_stream_lines, args=(server, key, lines), daemon=True)
    reader.start()
    polled: list[tuple[int, float]] = []

    def long_poll() -> None:
        with server.client(key) as http:
            answer = http.get("/v1/events", params={"after": 1, "wait": 30}, timeout=40)
        polled.append((answer.status_code, time.monotonic()))

    poller = threading.Thread(target=long_poll, daemon=True)
    poller.start()
    deadline = time.monotonic() + 10
    while not any(line.startswith("data:") for _, line in lines):
        assert time.monotonic() < deadline, "the stream delivered nothing"
        time.sleep(0.1)
    ok(local_app.write("revoke-api-key", {"apiKeyId": _key_id(key)}, admin))
    revoked_at = time.monotonic()
    poller.join(RECHECK + 5)
    assert polled and polled[0][0] == 401, polled
    assert polled[0][1] - revoked_at < RECHECK + 3
    for n in range(10):  # values keep coming for 10 s after the revocation
        value = {"entityName": "contact", "entityId": f"c{n}", "fieldKey": "tier"}
        ok(local_app.write("set-custom-field", {**value, "value": f"after-{n}"}, admin))
        local_app.projections.catch_up()
        time.sleep(1.0)
    reader.join(5)
    assert not reader.is_alive(), "the stream is still open 10 s after the revocation"
    late = [line for at, line in lines if at > revoked_at + RECHECK + 1]
    assert not [line for line in late if line.startswith("data:") and "after-" in line], late
    assert not any("after-" in line for _, line in lines)  # none of them, in fact


def test_made_up_keys_spend_the_budgets_before_any_key_is_looked_up(
    start_server: StartServer,
) -> None:
    for limits in (
        {"api_address_rate_per_second": "10", "api_address_rate_burst": "50"},
        {"api_global_rate_per_second": "10", "api_global_rate_burst": "50"},
    ):
        server = start_server(**limits)
        statuses: Counter[int] = Counter()
        with httpx.Client(base_url=server.url, timeout=10.0) as http:
            for _ in range(1000):
                made_up = f"tdk_{uuid.uuid4().hex}_{'A' * 43}"
                answer = http.post(
                    "/v1/queries/list-field-definitions",
                    json={},
                    headers={"Authorization": f"Bearer {made_up}"},
                )
                statuses[answer.status_code] += 1
        assert set(statuses) == {401, 429}, statuses
        assert statuses[429] >= 700, (limits, statuses)


def test_a_shredded_tenants_keys_answer_401(server: Server, local_app: App) -> None:
    admin = _user("TenantAdmin")
    key = create_key(local_app, admin, "TenantAdmin")
    with server.client(key) as http:
        assert http.post("/v1/commands/define-tenant-field", json=FIELD).status_code == 200
        ok(local_app.write("shred-tenant", {"tenantId": admin.tenant_id}, OPERATOR))
        time.sleep(LIVE_RECHECK + 0.5)  # the server process sees another's shred this soon
        other = {**FIELD, "fieldKey": "other"}
        key_payload = {"name": "x", "roles": ["TenantAdmin"]}
        answers = [
            http.post("/v1/commands/define-tenant-field", json=other),
            http.post("/v1/commands/create-api-key", json=key_payload),
            http.post("/v1/queries/list-api-keys", json={}),
            http.get("/v1/events", params={"after": 0}),
        ]
    assert [a.status_code for a in answers] == [401] * 4


def test_headers_dripped_past_the_deadline_are_cut_and_streams_per_key_are_capped(
    start_server: StartServer, local_app: App
) -> None:
    server = start_server(api_request_timeout="2", api_streams_per_key="2")
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        stop = threading.Event()

        def drip() -> None:
            with contextlib.suppress(OSError):
                while not stop.wait(0.3):
                    sock.sendall(b"X-Drip: a\r\n")

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        sock.settimeout(15)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        stop.set()
        assert closed and time.monotonic() - started < 6
    key = create_key(local_app, _user("TenantAdmin"), "TenantAdmin")
    with contextlib.ExitStack() as held, server.client(key) as http:
        for _ in range(2):
            response = held.enter_context(http.stream("GET", "/v1/events/stream", timeout=20))
            assert response.status_code == 200
        third = http.get("/v1/events", params={"after": 0, "wait": 5})
        assert third.status_code == 429 and third.json()["code"] == "too_many_streams"
        held.close()  # both streams go; their slots come back
        deadline = time.monotonic() + 5
        while http.get("/v1/events", params={"after": 0, "wait": 1}).status_code == 429:
            assert time.monotonic() < deadline, "a closed stream kept its slot"
            time.sleep(0.3)


def test_list_api_keys_over_http(server: Server, local_app: App) -> None:
    admin = _user("TenantAdmin")
    key = create_key(local_app, admin, "TenantAdmin")
    with server.client(key) as http:
        minted = http.post(
            "/v1/commands/create-api-key", json={"name": "m", "roles": ["TenantAdmin"]}
        )
        assert minted.status_code == 200
        listed = http.post("/v1/queries/list-api-keys", json={}).json()["items"]
        assert {item["name"] for item in listed} == {"test", "m"}
        revoke = http.post("/v1/commands/revoke-api-key", json={"apiKeyId": _key_id(key)})
        assert revoke.json()["alsoRevoked"] == [minted.json()["apiKeyId"]]
    with server.client(minted.json()["key"]) as http:
        assert http.post("/v1/queries/list-api-keys", json={}).status_code == 401
