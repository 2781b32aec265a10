"""Turn a presented API key into the User it acts as, or None (answered 401).

A key answers 401 once revoked and once its tenant is shredded. A use is recorded
(``KeyUsage``) for ``list-api-keys``' ``lastUsedAt``.
"""

from __future__ import annotations

from application.api_keys import keys
from application.context import Context
from application.streams import load
from application.users import User
from domain.api_key import ApiKey


def authenticate(ctx: Context, presented: str) -> User | None:
    parts = keys.split(presented)
    if parts is None:
        return None
    key_id, secret = parts
    api_key = load(ctx.store, ApiKey, key_id)
    if not api_key.active or not keys.matches(secret, api_key.secret_digest):
        return None
    if ctx.cipher.tenant_shredded(api_key.tenant_id):
        return None
    if ctx.key_usage is not None:
        ctx.key_usage.touch(str(key_id), ctx.clock.now())
    return User(id=f"api-key:{key_id}", tenant_id=api_key.tenant_id, roles=api_key.roles)
