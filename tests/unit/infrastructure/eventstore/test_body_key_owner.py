"""An imported event's tokens under a body's own key (``pii2:b.<name>@<account>@<tenant>``)
and its ``pack3:``/``body1:`` refs must name the event's own tenant and account."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from domain.message import MessageIngested
from infrastructure.eventstore.validation import InvalidEvent, check_owner

# Fixed ids: the parametrized cases are named after them (the same in every test process).
TENANT, ACCOUNT, OTHER = (
    "t1",
    "e2a60419-08fd-4323-a1e7-f84dc8bbd590",
    "d11849af-d65c-4cc1-be0b-fb55ba67b774",
)
NAME = "0123456789abcdef0123456789abcdef"
PACK = "fedcba9876543210fedcba9876543210"


def _event(snippet: str, body_ref: str | None = None) -> MessageIngested:
    return MessageIngested(
        originator_id=uuid.uuid4(),
        originator_version=1,
        timestamp=datetime(2024, 1, 1, tzinfo=UTC),
        tenant_id=TENANT,
        account_id=ACCOUNT,
        provider_message_id="p1",
        thread_key="k",
        message_id_header="",
        references="[]",
        sender="[]",
        to="[]",
        cc="[]",
        subject="",
        snippet=snippet,
        received_at="2024-01-01T00:00:00Z",
        body_ref=body_ref,
        size_bytes=10,
        folder="INBOX",
        state="ok",
        defects=[],
        extra={},
    )


def test_a_body_key_token_and_ref_of_the_events_own_account_pass() -> None:
    ref = f"pack3:dDE:{ACCOUNT}:{NAME}:{PACK}:0:10"
    check_owner(_event(f"pii2:b.{NAME}@{ACCOUNT}@{TENANT}:AAAA", ref))
    check_owner(_event("", f"body1:dDE:{ACCOUNT}:{NAME}"))


@pytest.mark.parametrize(
    "snippet",
    [
        f"pii2:b.{NAME}@{OTHER}@{TENANT}:AAAA",  # another account's body
        f"pii2:b.{NAME}@{ACCOUNT}@t2:AAAA",  # another tenant's
        f"pii2:b.{NAME}@{ACCOUNT}:AAAA",  # no tenant at all
    ],
)
def test_a_body_key_token_of_anyone_else_is_refused(snippet: str) -> None:
    with pytest.raises(InvalidEvent, match="another tenant or account"):
        check_owner(_event(snippet))


@pytest.mark.parametrize(
    "ref", [f"body1:dDE:{OTHER}:{NAME}", f"pack3:dDI:{ACCOUNT}:{NAME}:{PACK}:0:10"]
)
def test_a_keyed_ref_of_anyone_else_is_refused(ref: str) -> None:
    with pytest.raises(InvalidEvent, match="blob ref of another"):
        check_owner(dataclasses.replace(_event(""), body_ref=ref))
