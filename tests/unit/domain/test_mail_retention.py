"""A tenant's mail retention: the bounds of each keepFor, the order of the two, and the
stream's last-write-wins state (the operator's default when it holds nothing)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from domain.mail_retention import MailRetention, MailRetentionSet, TenantMailRetention
from domain.retention import InvalidRetention

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("bodies", "messages"),
    [
        ("30d", "30d"),
        ("30d", "1m"),
        ("3650d", "10y"),
        ("5w", "521w"),
        (None, "30d"),
        ("10y", None),
        (None, None),
        ("12m", "1y"),
    ],
)
def test_policies_within_the_bounds(bodies: str | None, messages: str | None) -> None:
    policy = MailRetention(bodies_for=bodies, messages_for=messages)
    assert MailRetention.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    ("bodies", "messages", "message"),
    [
        ("29d", None, "bodiesFor: keepFor must lie within 30d..3650d"),
        (None, "3651d", "messagesFor: keepFor must lie within 30d..3650d"),
        ("11y", None, "bodiesFor: keepFor must lie within 1y..10y"),
        ("4w", None, "within 5w..521w"),
        ("0m", None, "count and a unit"),
        ("121m", None, "within 1m..120m"),
        ("1y", "11m", "messagesFor must not be shorter than bodiesFor"),
        ("31d", "30d", "messagesFor must not be shorter than bodiesFor"),
        ("30 d", None, "count and a unit"),
        ("", None, "count and a unit"),
        ("99999d", None, "count and a unit"),
    ],
)
def test_policies_at_and_past_the_bounds_are_refused(
    bodies: str | None, messages: str | None, message: str
) -> None:
    with pytest.raises(InvalidRetention, match=message):
        MailRetention(bodies_for=bodies, messages_for=messages)


def test_the_stream_keeps_the_last_policy_and_records_only_changes() -> None:
    stream = TenantMailRetention(uuid4())
    assert stream.policy is None  # the operator's default
    year = MailRetention(bodies_for="1y", messages_for="2y")
    assert stream.set(tenant_id="t", policy=year, by="u", now=NOW)
    assert not stream.set(tenant_id="t", policy=year, by="u", now=NOW)
    assert stream.set(tenant_id="t", policy=None, by="u", now=NOW)
    events = stream.collect()
    assert [type(e) for e in events] == [MailRetentionSet, MailRetentionSet]
    assert [e.policy for e in events if isinstance(e, MailRetentionSet)] == [year.to_json(), None]
    replayed = TenantMailRetention.replay(stream.id, events)
    assert replayed.policy is None and replayed.version == 2


def test_a_stored_policy_of_the_wrong_shape_does_not_replay() -> None:
    with pytest.raises(InvalidRetention):
        MailRetention.from_json({"bodiesFor": "1y"})
