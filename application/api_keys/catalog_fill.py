"""Keys created before tenants had key catalogs go into them, once per store.

``list-api-keys``, the per-tenant cap and revoking what a key minted read the tenant's
catalog; a key created before it existed is only in its own stream. On the first start
after the upgrade the log's key events are read once (only their topics decoded) and
every active key missing from its tenant's catalog is listed with its creator. A
``CatalogFill`` stream records that it is done, so later starts cost one existence check.
Two processes filling at once conflict on the catalogs or on that stream; the loser
reloads and finds the keys listed (``add`` is idempotent) or the fill done.
"""

from __future__ import annotations

import logging
from datetime import datetime
from uuid import UUID

from application.errors import ConcurrencyConflict
from application.ports import EventLog, EventStore, Recorded
from application.streams import commit, load
from domain.api_key import ApiKeyCatalog, ApiKeyCreated, ApiKeyRevoked, CatalogFill

PAGE = 5000
TOPICS = frozenset({ApiKeyCreated.TOPIC, ApiKeyRevoked.TOPIC})
ATTEMPTS = 5
log = logging.getLogger("tidings.api_keys")


def fill_catalogs(store: EventStore, events: EventLog, now: datetime) -> int | None:
    """List the keys missing from their tenants' catalogs; the number listed, or None
    when this store was filled before."""
    fill_id = CatalogFill.id_for()
    if store.existing([fill_id]):
        return None
    for _ in range(ATTEMPTS):
        try:
            return _fill(store, events, fill_id, now)
        except ConcurrencyConflict:
            continue
    raise ConcurrencyConflict("the key catalogs changed while they were being filled")


def _fill(store: EventStore, events: EventLog, fill_id: UUID, now: datetime) -> int | None:
    active = _active_keys(events)
    listed = 0
    for tenant_id, keys in active.items():
        catalog = load(store, ApiKeyCatalog, ApiKeyCatalog.id_for(tenant_id))
        for key_id, created_by in keys.items():
            if key_id not in catalog.active:
                catalog.add(key_id, created_by=created_by, now=now)
                listed += 1
        commit(store, catalog)
    fill = load(store, CatalogFill, fill_id)
    if fill.done:
        return None
    fill.finish(keys_listed=listed, now=now)
    commit(store, fill)
    if listed:
        log.info("api_keys.catalogs_filled keys=%d tenants=%d", listed, len(active))
    return listed


def _active_keys(events: EventLog) -> dict[str, dict[str, str]]:
    """Per tenant, the keys created and not revoked: key id -> its creator."""
    created: dict[str, tuple[str, str]] = {}
    revoked: set[str] = set()
    after = 0
    while True:
        page = events.page(after, PAGE, TOPICS)
        for entry in page.entries:
            if not isinstance(entry, Recorded):
                continue  # unreadable: quarantined elsewhere, never a key of ours
            event, key_id = entry.event, str(entry.event.originator_id)
            if isinstance(event, ApiKeyCreated):
                created[key_id] = (event.tenant_id, event.created_by)
            elif isinstance(event, ApiKeyRevoked):
                revoked.add(key_id)
        if page.count == 0:
            break
        after = page.last
    active: dict[str, dict[str, str]] = {}
    for key_id, (tenant_id, created_by) in created.items():
        if key_id not in revoked:
            active.setdefault(tenant_id, {})[key_id] = created_by
    return active
