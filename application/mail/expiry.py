"""The retention sweep of mail (a ``RetentionSweep`` per stage): bodies erased past a
tenant's ``bodiesFor``, messages expired past its ``messagesFor``
(``domain.mail_retention``; the tenant's own policy, else the operator's default).

A batch: the tenants with mail (one small read) and their policies (one ``load_many``
of their retention streams, once per run: a run has one ``now``), walked one after the
other in order, each from its oldest due message; one statement over the read model
finds the current tenant's next due messages; one ``load_many`` of their streams; each
message records its erasure or expiry only if its own stream still says it is due
(``MessageLife``), and all of them go in one append. The bodies' keys and blobs are
destroyed before the append, so a sweep killed in between finds the messages due again
and records them then (destroying a missing key or blob again is harmless); a conflict
(another writer, a racing sweeper) reloads and decides again, so each erasure and expiry
is recorded once. A blob another live message of the account still holds
(content-addressed) is kept, and so is one whose ref names anyone but the message's own
account (a ref is data).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.expiry_ports import DueMessage, ErasesBlobs, ExpiringMail, Stage
from application.mail.message_event import utc_iso
from application.mail.ports import BlobOwner
from application.retention.ports import SweepBatch
from application.streams import ATTEMPTS, commit, replay
from application.tenants.mail_retention import effective
from domain.mail_retention import MailRetention, TenantMailRetention
from domain.message_retention import MessageLife
from domain.retention import keep_for_cutoff


class MailSweep:
    def __init__(self, ctx: Context, mail: ExpiringMail, blobs: ErasesBlobs, stage: Stage) -> None:
        self.ctx = ctx
        self.mail = mail
        self.blobs = blobs
        self.stage: Stage = stage
        self._policies: tuple[datetime, dict[str, MailRetention]] | None = None

    @property
    def kind(self) -> str:
        return f"mail_{self.stage}"

    def _keep_for(self, policy: MailRetention) -> str | None:
        return policy.bodies_for if self.stage == "bodies" else policy.messages_for

    def _kept(self, now: datetime) -> dict[str, str]:
        """Tenant -> its ``keepFor`` for this stage (tenants that keep for ever left
        out), read once per run."""
        if self._policies is None or self._policies[0] != now:
            tenants = self.mail.tenants()
            streams = {t: TenantMailRetention.id_for(t) for t in tenants}
            loaded = self.ctx.store.load_many(set(streams.values()))
            policies = {
                t: effective(replay(TenantMailRetention, s, loaded[s]).policy, self.ctx)
                for t, s in streams.items()
            }
            self._policies = (now, policies)
        kept = {t: self._keep_for(p) for t, p in self._policies[1].items()}
        return {t: k for t, k in sorted(kept.items()) if k is not None}

    def batch(self, now: datetime, after: Any, limit: int, dry_run: bool) -> SweepBatch:
        """``after``: (tenant, position in its walk or None); tenants in order."""
        kept = self._kept(now)
        current, position = after if after is not None else (None, None)
        tenants = [t for t in kept if current is None or t >= current]
        if not tenants:
            return SweepBatch()
        tenant = tenants[0]
        if tenant != current:
            position = None
        keep_for = kept[tenant]
        cutoff = utc_iso(keep_for_cutoff(keep_for, now))
        due = self.mail.due(tenant, self.stage, cutoff, position, limit)
        batch = SweepBatch(found=len(due))
        if len(due) == limit:
            batch.next = (tenant, due[-1].position)
        elif len(tenants) > 1:
            batch.next = (tenants[1], None)
        action = "erase_body" if self.stage == "bodies" else "expire"
        for message in due:
            batch.counts[tenant, f"mail.{message.account_id}", action] += 1
        if due and not dry_run:
            batch.recorded = self._record(due, cutoff, keep_for, now)
        return batch

    def _record(self, due: list[DueMessage], cutoff: str, keep_for: str, now: datetime) -> int:
        ids = [m.message_id for m in due]
        for _ in range(ATTEMPTS):
            loaded = self.ctx.store.load_many({UUID(i) for i in ids})
            lives = [replay(MessageLife, UUID(i), loaded[UUID(i)]) for i in ids]
            refs: list[tuple[BlobOwner, str]] = []
            recorded = 0
            for life in lives:
                if self.stage == "bodies":
                    ref = life.erase_body(cutoff=cutoff, keep_for=keep_for, now=now)
                    recorded += ref is not None
                else:
                    ref = life.body_ref if not life.body_erased else None
                    if not life.expire(cutoff=cutoff, keep_for=keep_for, now=now):
                        ref = None
                    else:
                        recorded += 1
                if ref is not None:  # only the message's own blob: a ref is data
                    refs.append((BlobOwner(life.tenant_id, life.account_id), ref))
            self._destroy(refs, ids)
            try:
                commit(self.ctx.store, *lives)
            except ConcurrencyConflict:
                continue
            return recorded
        raise ConcurrencyConflict("retention: the messages' streams kept moving")

    def _destroy(self, refs: list[tuple[BlobOwner, str]], message_ids: list[str]) -> None:
        if not refs:
            return
        shared = self.mail.refs_held_elsewhere([ref for _, ref in refs], message_ids)
        self.blobs.delete_many([(owner, ref) for owner, ref in refs if ref not in shared])
