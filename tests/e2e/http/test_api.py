"""The HTTP API in a real uvicorn process, driven with httpx: keys, every error as
problem+json, bounds on what a client sends, the OpenAPI document, operations."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable

import httpx
import orjson
import pytest
from openapi_spec_validator import validate

from application import SYSTEM_TENANT_ID, User
from application.app import App
from application.handlers import QUERIES, WRITES
from tests.e2e.http.conftest import Server, create_key
from tests.integration.redis.conftest import REDIS_URL

PROBLEM = "application/problem+json"
FIELD = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "enum", "options": ["a"]}}


def _tenant() -> str:
    return "t-" + uuid.uuid4().hex[:8]


def admin_of(tenant: str) -> User:
    return User(id="admin-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin"}))


def problem_of(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, object] = response.json()
    assert body["status"] == status and body["code"] == code
    assert body["type"] == f"urn:tidings:error:{code}"
    assert isinstance(body["details"], dict)
    return body


def test_a_key_acts_as_a_user_of_its_tenant(server: Server, local_app: App) -> None:
    tenant = _tenant()
    key = create_key(local_app, admin_of(tenant), "TenantAdmin")
    with server.client(key) as http:
        defined = http.post("/v1/commands/define-tenant-field", json=FIELD)
        assert defined.status_code == 200, defined.text
        assert defined.headers["content-type"] == "application/json"
        value = {"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "a"}
        assert http.post("/v1/commands/set-custom-field", json=value).status_code == 200
        local_app.projections.catch_up()
        entity = http.post(
            "/v1/queries/get-entity", json={"entityName": "contact", "entityId": "c1"}
        )
    assert entity.status_code == 200
    assert entity.json()["customFields"] == {"tier": "a"}
    # The field was defined in the key's tenant, and only there.
    other = local_app.query("list-field-definitions", {}, admin_of(_tenant()))
    assert other.data is not None
    assert [d for d in other.data["items"] if d["scope"] == "tenant"] == []
    mine = local_app.query("list-field-definitions", {}, admin_of(tenant))
    assert mine.data is not None
    assert [d["fieldKey"] for d in mine.data["items"] if d["scope"] == "tenant"] == ["tier"]


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer not-a-key",
        "Bearer tdk_" + "0" * 32 + "_" + "a" * 43,  # well-formed, unknown
    ],
)
def test_missing_or_unknown_keys_answer_401(server: Server, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = httpx.post(f"{server.url}/v1/queries/list-field-definitions", headers=headers)
    problem_of(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_revoked_key_answers_401_at_once(server: Server, local_app: App) -> None:
    admin = admin_of(_tenant())
    key, other_key = (
        create_key(local_app, admin, "TenantAdmin"),
        create_key(local_app, admin, "TenantAdmin"),
    )
    key_id = str(uuid.UUID(hex=key.split("_")[1]))
    with server.client(other_key) as http:
        revoked = http.post("/v1/commands/revoke-api-key", json={"apiKeyId": key_id})
    assert revoked.status_code == 200 and revoked.json()["alreadyRevoked"] is False
    with server.client(key) as http:
        problem_of(http.post("/v1/queries/list-field-definitions", json={}), 401, "unauthorized")


def test_keys_never_escalate_or_cross_tenants(server: Server, local_app: App) -> None:
    tenant = _tenant()
    member = User(id="m", tenant_id=tenant, roles=frozenset({"TenantMember"}))
    admin_key = create_key(local_app, admin_of(tenant), "TenantAdmin")
    refused = local_app.write("create-api-key", {"name": "x", "roles": ["TenantMember"]}, member)
    assert refused.error is not None and refused.error.status == 403
    with server.client(admin_key) as http:
        problem_of(
            http.post("/v1/commands/create-api-key", json={"name": "x", "roles": ["SystemAdmin"]}),
            422,
            "role_not_held",
        )
        problem_of(
            http.post("/v1/commands/create-api-key", json={"name": "x", "roles": ["Root"]}),
            400,
            "invalid_payload",
        )
        foreign = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
        foreign_id = str(uuid.UUID(hex=foreign.split("_")[1]))
        problem_of(
            http.post("/v1/commands/revoke-api-key", json={"apiKeyId": foreign_id}),
            404,
            "not_found",
        )
    with server.client(foreign) as http:  # the other tenant's key still works
        assert http.post("/v1/queries/list-field-definitions", json={}).status_code == 200


def test_every_error_of_the_app_layer_arrives_as_problem_json(
    server: Server, local_app: App
) -> None:
    tenant = _tenant()
    admin_key = create_key(local_app, admin_of(tenant), "TenantAdmin")
    both = User(id="a", tenant_id=tenant, roles=frozenset({"TenantAdmin", "TenantMember"}))
    member_key = create_key(local_app, both, "TenantMember")
    with server.client(admin_key) as http:
        assert http.post("/v1/commands/define-tenant-field", json=FIELD).status_code == 200
        problem_of(
            http.post("/v1/commands/define-tenant-field", json=FIELD), 409, "version_conflict"
        )
        body = problem_of(
            http.post("/v1/commands/define-tenant-field", json={"entityName": 3}),
            400,
            "invalid_payload",
        )
        assert body["details"]["errors"]  # type: ignore[index]
        problem_of(
            http.post(
                "/v1/commands/update-tenant-field",
                json={**FIELD, "field": {"type": "text"}},
            ),
            422,
            "field_type_immutable",
        )
        problem_of(
            http.post("/v1/queries/get-message", json={"messageId": str(uuid.uuid4())}),
            404,
            "not_found",
        )
        problem_of(http.post("/v1/commands/no-such-handler", json={}), 404, "not_found")
        problem_of(http.get("/v1/commands/define-tenant-field"), 405, "method_not_allowed")
    with server.client(member_key) as http:
        problem_of(
            http.post("/v1/commands/delete-tenant-field", json=FIELD | {"field": None}),
            400,
            "invalid_payload",
        )
        problem_of(
            http.post(
                "/v1/commands/delete-tenant-field",
                json={"entityName": "contact", "fieldKey": "tier"},
            ),
            403,
            "forbidden",
        )


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_payload"),
        (b'{"a": NaN}', 400, "invalid_json"),
        (b"[" * 100_000, 400, "invalid_json"),
        (b'{"entityName": "' + b"x" * (2 * 1024 * 1024) + b'"}', 413, "payload_too_large"),
        (b"\xff\xfe\x00", 400, "invalid_json"),
    ],
)
def test_hostile_bodies_are_refused_with_a_problem(
    server: Server, local_app: App, body: bytes, status: int, code: str
) -> None:
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    with server.client(key) as http:
        response = http.post(
            "/v1/commands/define-tenant-field",
            content=body,
            headers={"Content-Type": "application/json"},
        )
    problem_of(response, status, code)
    with server.client(key) as http:  # and the server serves on
        assert http.post("/v1/queries/list-field-definitions", json={}).status_code == 200


def test_a_huge_declared_body_is_refused_before_it_is_read(server: Server, local_app: App) -> None:
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"POST /v1/queries/list-field-definitions HTTP/1.1\r\n"
            b"Host: x\r\nAuthorization: Bearer " + key.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{}"
        )
        head = conn.recv(4096).split(b"\r\n", 1)[0]
    assert head == b"HTTP/1.1 413 Request Entity Too Large"


def test_each_key_is_rate_limited_on_its_own(
    start_server: Callable[..., Server], local_app: App
) -> None:
    server = start_server(api_rate_per_second="0.2", api_rate_burst="3")
    admin = admin_of(_tenant())
    busy, calm = (
        create_key(local_app, admin, "TenantAdmin"),
        create_key(local_app, admin, "TenantAdmin"),
    )
    with server.client(busy) as http:
        answers = [http.post("/v1/queries/list-field-definitions", json={}) for _ in range(4)]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    problem_of(answers[3], 429, "rate_limited")
    assert 1 <= int(answers[3].headers["retry-after"]) <= 5
    with server.client(calm) as http:
        assert http.post("/v1/queries/list-field-definitions", json={}).status_code == 200


def test_with_redis_a_key_budget_holds_across_serving_processes(
    start_server: Callable[..., Server], local_app: App
) -> None:
    shared = {"api_rate_per_second": "0.2", "api_rate_burst": "2", "redis_url": REDIS_URL}
    one, two = start_server(**shared), start_server(**shared)
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    answers = []
    for server in (one, two, one, two):
        with server.client(key) as http:
            answers.append(http.post("/v1/queries/list-field-definitions", json={}))
    assert [a.status_code for a in answers[:2]] == [200, 200]
    for answer in answers[2:]:  # each process alone would still have had a token
        problem_of(answer, 429, "rate_limited")


def test_the_openapi_document_is_valid_and_names_every_use_case(server: Server) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    validate(document)  # OpenAPI 3.1, by the maintained validator
    assert document["openapi"] == "3.1.0"
    paths = set(document["paths"])
    assert {f"/v1/commands/{name}" for name in WRITES} <= paths
    assert {f"/v1/queries/{name}" for name in QUERIES} <= paths
    connect = document["components"]["schemas"]["connect-mail-account"]
    assert {"displayName", "imap", "secret"} <= set(connect["properties"])
    assert connect["additionalProperties"] is False


def test_list_messages_filters_by_unread_and_flagged_over_http(
    server: Server, local_app: App
) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    listing = document["components"]["schemas"]["list-messages"]["properties"]
    for name in ("unread", "flagged"):
        assert {"type": "boolean"} in listing[name].get("anyOf", [listing[name]])
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    with server.client(key) as http:
        answer = http.post("/v1/queries/list-messages", json={"unread": True, "flagged": False})
        assert answer.status_code == 200
        assert answer.json()["items"] == []
        refused = http.post("/v1/queries/list-messages", json={"unread": "yes please"})
        assert refused.status_code == 400


def test_the_openapi_document_has_the_folder_fields(server: Server) -> None:
    schemas = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]
    assert "folders" in schemas["connect-mail-account"]["properties"]
    assert "folders" in schemas["update-mail-account"]["properties"]
    listing = schemas["list-messages"]["properties"]
    assert {"folder", "direction"} <= set(listing)
    assert "outbound" in str(listing["direction"])


def test_operations_endpoints(server: Server, local_app: App) -> None:
    assert httpx.get(f"{server.url}/healthz").json() == {"ok": True}
    assert httpx.get(f"{server.url}/readyz").status_code == 200
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    with server.client(key) as http:
        http.post("/v1/queries/list-field-definitions", json={})
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'tidings_http_requests_total{kind="queries",status="200"}' in metrics


def test_system_admin_keys_come_only_from_the_system_tenant(server: Server, local_app: App) -> None:
    operator = User(id="op", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    key = create_key(local_app, operator, "SystemAdmin")
    with server.client(key) as http:
        defined = http.post(
            "/v1/commands/define-system-field",
            json={
                "entityName": "contact",
                "fieldKey": "vip-" + uuid.uuid4().hex[:6],
                "field": {"type": "boolean"},
            },
        )
    assert defined.status_code == 200, defined.text


def _feed_writer(local_app: App, admin: User) -> None:
    define = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}
    assert local_app.write("define-tenant-field", define, admin).is_success
    local_app.projections.catch_up()


def test_a_long_poll_returns_as_soon_as_an_item_arrives(server: Server, local_app: App) -> None:
    admin = admin_of(_tenant())
    key = create_key(local_app, admin, "TenantAdmin")
    with server.client(key) as http:
        empty = http.get("/v1/events", params={"after": 0, "wait": 0})
        assert empty.json() == {"items": [], "nextAfter": 0}
        writer = threading.Timer(1.0, _feed_writer, (local_app, admin))
        writer.start()
        started = time.monotonic()
        answer = http.get("/v1/events", params={"after": 0, "wait": 20}, timeout=30)
        waited = time.monotonic() - started
        writer.join()
    assert answer.status_code == 200
    assert [i["type"] for i in answer.json()["items"]] == ["custom_field.defined"]
    assert answer.json()["nextAfter"] == 1
    assert 0.9 <= waited < 10


@pytest.mark.parametrize(
    "params", [{"after": "-1"}, {"limit": "0"}, {"wait": "31"}, {"after": "1e9"}, {"after": "x"}]
)
def test_feed_parameters_out_of_range_are_400(
    server: Server, local_app: App, params: dict[str, str]
) -> None:
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    with server.client(key) as http:
        problem_of(http.get("/v1/events", params=params), 400, "invalid_payload")


def test_the_feed_streams_as_server_sent_events_and_resumes(server: Server, local_app: App) -> None:
    admin = admin_of(_tenant())
    key = create_key(local_app, admin, "TenantAdmin")
    _feed_writer(local_app, admin)
    value = {"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "v"}
    assert local_app.write("set-custom-field", value, admin).is_success
    local_app.projections.catch_up()

    def first_events(headers: dict[str, str], count: int) -> list[tuple[str, str, str]]:
        events: list[tuple[str, str, str]] = []
        with (
            server.client(key) as http,
            http.stream("GET", "/v1/events/stream", headers=headers, timeout=20) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            fields: dict[str, str] = {}
            for line in response.iter_lines():
                if not line:
                    events.append((fields["id"], fields["event"], fields["data"]))
                    fields = {}
                    if len(events) == count:
                        break
                elif not line.startswith(":"):
                    name, _, text = line.partition(": ")
                    fields[name] = text
        return events

    events = first_events({}, 2)
    assert [(i, kind) for i, kind, _ in events] == [
        ("1", "custom_field.defined"),
        ("2", "custom_field_value.set"),
    ]
    assert orjson.loads(events[1][2])["data"]["value"] == "v"
    resumed = first_events({"Last-Event-ID": "1"}, 1)
    assert [(i, kind) for i, kind, _ in resumed] == [("2", "custom_field_value.set")]


def test_mail_retention_over_http_with_its_bounds(server: Server, local_app: App) -> None:
    tenant = _tenant()
    admin_key = create_key(local_app, admin_of(tenant), "TenantAdmin")
    both = User(
        id="a-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin", "TenantMember"})
    )
    member_key = create_key(local_app, both, "TenantMember")
    policy = {"bodiesFor": "1y", "messagesFor": "10y"}
    with server.client(admin_key) as http:
        stored = http.post("/v1/commands/set-mail-retention", json={"mailRetention": policy})
        assert stored.status_code == 200, stored.text
        assert stored.json()["mailRetention"] == policy and stored.json()["source"] == "tenant"
        past = {"bodiesFor": "29d", "messagesFor": None}
        problem_of(
            http.post("/v1/commands/set-mail-retention", json={"mailRetention": past}),
            400,
            "invalid_payload",
        )
    with server.client(member_key) as http:
        read = http.post("/v1/queries/get-mail-retention", json={})
        assert read.status_code == 200 and read.json()["mailRetention"] == policy
        problem_of(
            http.post("/v1/commands/set-mail-retention", json={"mailRetention": None}),
            403,
            "forbidden",
        )
    document = httpx.get(f"{server.url}/openapi.json").json()
    assert "/v1/commands/set-mail-retention" in document["paths"]
    assert "/v1/queries/get-mail-retention" in document["paths"]


def test_list_messages_filters_deleted_mail_over_http(server: Server, local_app: App) -> None:
    schemas = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]
    assert "deleted" in str(schemas["list-messages"]["properties"]["state"])
    key = create_key(local_app, admin_of(_tenant()), "TenantAdmin")
    with server.client(key) as http:
        answer = http.post(
            "/v1/queries/list-messages", json={"state": "deleted", "folder": 'a", "b'}
        )
        assert answer.status_code == 200 and answer.json()["items"] == []
        refused = http.post("/v1/queries/list-messages", json={"state": "gone"})
        assert refused.status_code == 400
