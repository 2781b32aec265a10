"""ApiKeyCatalog, given events / when command / then events: a tenant's active keys
with who minted each, and the keys a key minted, transitively."""

from __future__ import annotations

from domain.api_key import ApiKeyCatalog, ApiKeyListed, ApiKeyUnlisted
from tests.unit.domain.scenario import NOW, given, history, shape, when

STREAM = ApiKeyCatalog.id_for("t1")


def listed(*pairs: tuple[str, str]) -> list[ApiKeyListed]:
    events = history(
        ApiKeyCatalog,
        STREAM,
        *(lambda c, k=k, b=b: c.add(k, created_by=b, now=NOW) for k, b in pairs),
    )
    assert all(isinstance(event, ApiKeyListed) for event in events)
    return [e for e in events if isinstance(e, ApiKeyListed)]


def test_each_tenant_has_its_own_catalog_stream() -> None:
    assert ApiKeyCatalog.id_for("t1") == STREAM
    assert ApiKeyCatalog.id_for("t2") != STREAM


def test_adding_twice_lists_once_and_unlisting_an_unknown_key_raises_nothing() -> None:
    catalog = given(ApiKeyCatalog, STREAM, listed(("k1", "u1")))
    assert when(catalog, lambda c: c.add("k1", created_by="u1", now=NOW)) == []
    assert when(catalog, lambda c: c.unlist("nope", now=NOW)) == []
    [event] = when(catalog, lambda c: c.unlist("k1", now=NOW))
    assert shape(event) == ("ApiKeyUnlisted", 2, {"key_id": "k1"})
    assert isinstance(event, ApiKeyUnlisted) and catalog.active == {}


def test_minted_by_follows_keys_that_minted_keys() -> None:
    catalog = given(
        ApiKeyCatalog,
        STREAM,
        listed(
            ("k1", "admin"),
            ("k2", "api-key:k1"),
            ("k3", "api-key:k2"),
            ("k4", "admin"),
            ("k5", "api-key:k4"),
        ),
    )
    assert catalog.minted_by("k1") == ["k2", "k3"]
    assert catalog.minted_by("k4") == ["k5"]
    assert catalog.minted_by("k3") == []
