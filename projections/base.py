"""The ``Projection`` protocol: the public extension point for read models.

Built-in read models and the host application's own (``bootstrap(projections=[...])``)
implement it alike, and the runner (``projections.runner``) promises every one of them:

- **Log order, in batches.** ``apply`` receives consecutive events of the log in the
  order they were committed; a projection never sees an event twice nor skips one.
- **One transaction per batch, with the position.** The batch's writes (made through
  the cursor it is given) and the projection's new tracking position commit together or
  not at all: exactly once, whatever crashes. A projection never commits, rolls back or
  opens a connection of its own.
- **Quarantine.** An exception raised by ``apply`` (other than a database outage) sets
  the failing event aside in the quarantine table under the projection's name; the
  others of the batch still apply. A rebuild offers the quarantined events again.
- **Rebuilds.** A projection that owns its tables names them in ``tables`` and answers
  ``shadow()``: the same projection writing to the shadow names (``shadow_tables``) and
  tracked as ``name + SHADOW_SUFFIX``. A rebuild fills the shadow from position 0 while
  the serving tables answer, then swaps it in. A projection that writes into tables it
  does not own (the host's) cannot be built beside itself: it also implements
  ``RebuildsInPlace`` and is rebuilt in place instead, in one transaction (``reset``,
  then a replay of the whole log), so readers see the old state until it commits.

Names are lower-case identifiers, unique in the app; a host projection may not take a
built-in name (``custom_fields``, ``mail``, ``feed``, ``mail_outbound``) nor end in
``SHADOW_SUFFIX``, and its tables may not be another projection's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable
from uuid import uuid4

from application.ports import Dialect, Recorded, SqlCursor
from application.privacy import PiiCipher

SHADOW_SUFFIX = "__next"

# One plain SQL identifier: nothing to quote, nothing to inject. 63 is PostgreSQL's limit.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


class Projection(Protocol):
    """A read model the runner keeps in step with the event log."""

    @property
    def name(self) -> str:
        """The tracking name: its position, quarantine and status are kept under it."""
        ...

    @property
    def tables(self) -> Mapping[str, str]:
        """Role -> actual table name, for the tables this projection owns."""
        ...

    def shadow(self) -> Projection:
        """The same projection writing to shadow tables (for rebuilds)."""
        ...

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        """Create the owned tables; called once, when the projection is first tracked."""
        ...

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        """Apply the batch in order; events of no interest are simply passed over."""
        ...


@runtime_checkable
class RebuildsInPlace(Protocol):
    """A projection rebuilt in place (its ``shadow()`` is never called)."""

    def reset(self, cur: SqlCursor, dialect: Dialect) -> None:
        """Return every row it keeps to the state before the first event, set-based."""
        ...


@runtime_checkable
class ConsumesTopics(Protocol):
    """A projection that applies events of these topics only: the runner hands it nothing
    else (its position still moves past every event) and, when every projection says
    what it consumes, decodes no event that none of them wants. An event the codec cannot
    decode still reaches every projection, to be quarantined."""

    @property
    def topics(self) -> frozenset[str]: ...


@runtime_checkable
class OpensSealedValues(Protocol):
    """A projection that needs the tenants' keys to write plaintext (custom-field values
    are sealed in events); ``bootstrap`` hands it the app's cipher before it runs."""

    def use_cipher(self, cipher: PiiCipher) -> None: ...


class InvalidProjection(ValueError):
    """A projection refused at registration: bad or taken name, or a bad table name."""


def identifier(value: str, what: str) -> str:
    """``value`` if it is one plain SQL identifier, else ``InvalidProjection``."""
    if not isinstance(value, str) or _IDENTIFIER.fullmatch(value) is None:
        raise InvalidProjection(
            f"{what} must be a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63"
            f" characters), got {value!r}"
        )
    return value


def check_name(name: str) -> str:
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidProjection(
            f"projection name must match [a-z][a-z0-9_]* (at most 63), got {name!r}"
        )
    if name.endswith(SHADOW_SUFFIX):
        raise InvalidProjection(f"projection name may not end in {SHADOW_SUFFIX!r}: {name!r}")
    return name


def shadow_tables(tables: Mapping[str, str]) -> dict[str, str]:
    return {role: name + SHADOW_SUFFIX for role, name in tables.items()}


def index_name(table: str, purpose: str) -> str:
    # Unique per creation: a renamed shadow table keeps its index names, so a fixed
    # name would collide with the next rebuild's shadow index.
    return f"ix_{table}_{purpose}_{uuid4().hex[:8]}"
