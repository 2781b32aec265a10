"""Turn a presented API key into the User it acts as, or None (answered 401)."""

from __future__ import annotations

from application.api_keys import keys
from application.ports import EventStore
from application.streams import load
from application.users import User
from domain.api_key import ApiKey


def authenticate(store: EventStore, presented: str) -> User | None:
    parts = keys.split(presented)
    if parts is None:
        return None
    key_id, secret = parts
    api_key = load(store, ApiKey, key_id)
    if not api_key.active or not keys.matches(secret, api_key.secret_digest):
        return None
    return User(id=f"api-key:{key_id}", tenant_id=api_key.tenant_id, roles=api_key.roles)
