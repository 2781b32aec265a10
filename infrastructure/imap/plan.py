"""How a page of messages is fetched: pure planning over sizes and UIDs.

``plan_page`` takes the page's metadata in UID order and decides, per message:
too large (metadata only), streamed in chunks to the blob store, or fetched
inline — and cuts the page once inline bytes pass ``max_batch_bytes`` (always
keeping at least one message, so a page never comes back empty by its own
choice). Inline UIDs are grouped into FETCH commands of about
``fetch_group_bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from application.mail.ports import MessageRef
from infrastructure.imap.settings import ImapAdapterSettings


@dataclass(slots=True)
class PagePlan:
    included: list[MessageRef] = field(default_factory=list)
    inline_groups: list[list[int]] = field(default_factory=list)
    streamed: list[int] = field(default_factory=list)
    too_large: list[int] = field(default_factory=list)
    cut: bool = False
    """The page stopped before the end of ``refs`` (byte budget reached)."""


def plan_page(refs: Sequence[MessageRef], settings: ImapAdapterSettings) -> PagePlan:
    plan = PagePlan()
    inline_total = 0
    group: list[int] = []
    group_bytes = 0
    for ref in refs:
        if ref.size > settings.max_message_bytes:
            plan.too_large.append(ref.uid)
        elif ref.size > settings.stream_threshold_bytes:
            plan.streamed.append(ref.uid)
        else:
            if plan.included and inline_total + ref.size > settings.max_batch_bytes:
                plan.cut = True
                break
            inline_total += ref.size
            if group and group_bytes + ref.size > settings.fetch_group_bytes:
                plan.inline_groups.append(group)
                group, group_bytes = [], 0
            group.append(ref.uid)
            group_bytes += ref.size
        plan.included.append(ref)
    if group:
        plan.inline_groups.append(group)
    return plan


def uid_windows(lo: int, uidnext: int | None, span: int) -> list[tuple[int, int | None]]:
    """UID ranges to search after ``lo - 1``: bounded windows, the last open (``None`` = ``*``).

    With UIDNEXT known, nothing at or above it exists yet, so an empty list
    means no new messages without a round trip.
    """
    if uidnext is None:
        return [(lo, None)]
    windows: list[tuple[int, int | None]] = []
    while lo < uidnext:
        hi = lo + span - 1
        if hi >= uidnext - 1:
            windows.append((lo, None))
            break
        windows.append((lo, hi))
        lo = hi + 1
    return windows
