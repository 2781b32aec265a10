"""The mail retention sweep's ports: the read model's messages due under a tenant's
policy (``ExpiringMail``) and the blob store's erasure of one body (``ErasesBlobs``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from application.mail.ports import BlobOwner

Stage = Literal["bodies", "messages"]
# (received_at, message id): where a tenant's walk stands
MailPosition = tuple[str, str]


@dataclass(frozen=True)
class DueMessage:
    message_id: str
    account_id: str
    received_at: str

    @property
    def position(self) -> MailPosition:
        return (self.received_at, self.message_id)


class ExpiringMail(Protocol):
    def tenants(self) -> list[str]:
        """Every tenant with messages in the read model, in order."""
        ...

    def due(
        self, tenant_id: str, stage: Stage, cutoff: str, after: MailPosition | None, limit: int
    ) -> list[DueMessage]:
        """The tenant's next ``limit`` messages received at or before ``cutoff`` (UTC ISO
        text) after ``after``, in (received_at, id) order, that ``stage`` still has to
        do: a body to erase, or a message to expire."""
        ...

    def refs_held_elsewhere(self, refs: Sequence[str], message_ids: Sequence[str]) -> set[str]:
        """Which of ``refs`` a live message other than ``message_ids`` still holds (one
        content-addressed blob may serve two messages of an account)."""
        ...


class ErasesBlobs(Protocol):
    def delete_many(self, items: Sequence[tuple[BlobOwner, str]]) -> None:
        """Destroy the bytes of each ref that names its owner, durably (idempotent: a
        missing blob is no error; a ref naming anyone else is left alone)."""
        ...
