"""Ports for personal data and secrets.

Personal data is encrypted under a per-account key (wrapped by a per-tenant key,
itself wrapped by the master key) before it enters an event or a read model; queries
decrypt for callers allowed to see it. Shredding a key makes everything under it
unreadable at once — ``reveal`` then answers ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from application.errors import ApplicationError

ERASED = "[erased]"


class KeyErased(ApplicationError):
    """Sealing under a key that was shredded: its account (or tenant) was erased."""


class PiiCipher(Protocol):
    """Tokens are bound to their owner and purpose: ``reveal`` answers None for a token
    sealed for another tenant, account or purpose, as for one whose key was shredded."""

    def seal(
        self, tenant_id: str, account_id: str | None, plaintext: str, purpose: str = "pii"
    ) -> str:
        """An opaque token naming its key; never contains the plaintext.

        Raises ``KeyErased`` once the account's or tenant's key was shredded."""
        ...

    def sealer(
        self, tenant_id: str, account_id: str | None, purpose: str = "pii"
    ) -> Callable[[str], str]:
        """``seal`` with the key looked up once: for the many fields of a batch of events.

        Raises ``KeyErased`` once the account's or tenant's key was shredded."""
        ...

    def body_sealer(
        self, tenant_id: str, account_id: str, body_ref: str | None, purpose: str = "pii"
    ) -> Callable[[str], str]:
        """``sealer`` for what a message's body says (its snippet): under the key of the
        body ``body_ref`` names, so erasing the body makes it unreadable everywhere; under
        the account's key for a ref of another kind, of another owner, or none.

        Raises ``KeyErased`` once the account's or tenant's key was shredded."""
        ...

    def reveal(
        self,
        token: str,
        tenant_id: str,
        account_id: str | None,
        purpose: str = "pii",
        *,
        sealing: bool = False,
    ) -> str | None:
        """The plaintext, or None when its key was shredded or the token was sealed for
        another owner or purpose.

        ``sealing``: the value is read only to decide how the owner's new data is sealed
        (never shown, never stored in clear), so the key may be taken as ``sealer``
        holds it: a shred then shows within the sealer's cache time, as for the
        sealing itself."""
        ...

    def digest(self, tenant_id: str, purpose: str, text: str) -> str:
        """A keyed digest under the tenant's key, for equality over sealed values.

        Raises ``KeyErased`` once the tenant's key was shredded (or never existed)."""
        ...

    def digester(self, tenant_id: str, purpose: str) -> Callable[[str], str]:
        """``digest`` with the key looked up once (created when missing), for writes."""
        ...

    def shred_account(self, tenant_id: str, account_id: str) -> None: ...

    def shred_tenant(self, tenant_id: str) -> None: ...

    def tenant_shredded(self, tenant_id: str) -> bool:
        """True once the tenant was shredded (here, or in another process: seen within
        seconds)."""
        ...


class SecretStore(Protocol):
    """Mailbox passwords and tokens: encrypted at rest, never in an event or a log."""

    def put(self, tenant_id: str, account_id: str, secret: str) -> None: ...

    def get(self, account_id: str) -> str | None: ...

    def get_many(self, account_ids: Collection[str]) -> dict[str, str]:
        """``get`` of several accounts in one read; an account without a usable secret
        is absent."""
        ...

    def delete(self, account_id: str) -> None: ...
