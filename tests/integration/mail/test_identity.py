"""Message identity where the server has no OBJECTID (Dovecot 2.3), against the real
Dovecot on both backends: the fingerprint includes a digest of the message's bytes, so
two different messages without Message-ID and Date and of the same size stay two; the
same bytes after a UIDVALIDITY reset stay one; and messages stored under the earlier
fingerprint version keep their ids and are never ingested again, checked with one
existence query per page."""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

import pytest

from application import User
from application.mail import ingestion
from domain.message import content_fingerprint
from infrastructure.imap.identity import fingerprint, header_values
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser

INGESTED = "tidings.mail.MessageIngested"


def bare(word: str) -> bytes:
    """A message with neither Message-ID nor Date; every ``word`` of one length gives
    messages of one size."""
    return (
        f"From: someone@example.org\r\nSubject: note {word}\r\n\r\nThe body says {word}.\r\n"
    ).encode()


def provider_ids(mail: MailApp) -> list[str]:
    store: Any = mail.app.ctx.store
    ids = []
    for n in store.read_raw(0, 1000):
        if n.topic == INGESTED:
            event = store.codec.decode(n.originator_id, n.originator_version, n.topic, n.state)
            ids.append(event.provider_message_id)
    return ids


def test_two_different_messages_alike_in_id_date_and_size_stay_two(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    one, two = bare("aaaa"), bare("bbbb")
    assert one != two and len(one) == len(two)
    # What the earlier fingerprint saw: the same id for both (one would have been lost).
    assert fingerprint(*header_values(one), len(one)) == fingerprint(*header_values(two), len(two))
    dovecot.deliver(mailbox, [one, two])
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 2
    assert count_events(mail.app, INGESTED) == 2
    assert len(messages(mail.app, admin)) == 2
    ids = provider_ids(mail)
    assert len(set(ids)) == 2 and all(i.startswith("fp2:") for i in ids)


def test_the_same_bytes_after_a_uidvalidity_reset_stay_one(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(mailbox, [bare("aaaa"), bare("bbbb"), raw_mail(1)])
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 3
    before = mail.app.ctx.mail.state.cursor(account_id)
    assert before is not None
    dovecot.set_uidvalidity(mailbox, before.uidvalidity + 55)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 3, None)
    assert count_events(mail.app, INGESTED) == 3


def test_messages_stored_under_the_old_fingerprint_are_not_ingested_again(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raws = [raw_mail(i) for i in range(6)] + [bare("aaaa")]
    dovecot.deliver(mailbox, raws)
    account_id = connect(mail.app, admin, dovecot, mailbox)
    # A store written before version 2: every message under its version-1 fingerprint.
    with monkeypatch.context() as old:
        old.setattr(ingestion, "content_fingerprint", lambda v1, raw: v1)
        assert mail.outcome(account_id, mail.poll()).ingested == 7
    old_ids = provider_ids(mail)
    assert all(i.startswith("fp:") for i in old_ids)

    store: Any = mail.app.ctx.store
    queries: list[int] = []
    existing = store.existing

    def counted(ids: Any) -> set[UUID]:
        wanted = list(ids)
        queries.append(len(wanted))
        found: set[UUID] = existing(wanted)
        return found

    monkeypatch.setattr(store, "existing", counted)
    before = mail.app.ctx.mail.state.cursor(account_id)
    assert before is not None
    dovecot.set_uidvalidity(mailbox, before.uidvalidity + 99)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 7, None)
    assert count_events(mail.app, INGESTED) == 7
    assert provider_ids(mail) == old_ids  # the old messages keep their ids
    assert queries == [7]  # one existence query for the whole page, not one a message

    # New mail after that is stored under version 2, beside the old.
    dovecot.deliver(mailbox, [raw_mail(50)])
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    assert provider_ids(mail)[-1].startswith("fp2:")
    assert len(messages(mail.app, admin)) == 8


def large_bare(word: str) -> bytes:
    """A message above the streaming threshold with neither Message-ID nor Date."""
    return bare(word) + b"x" * (1024 * 1024 + 512) + b"\r\n"


def test_streamed_bodies_get_the_content_fingerprint_too(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(stream_parse_mb=1)  # both bodies go to the blob store in chunks
    one, two = large_bare("aaaa"), large_bare("bbbb")
    assert len(one) == len(two) and len(one) > 1024 * 1024
    dovecot.deliver(mailbox, [one, two])
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).ingested == 2
    ids = provider_ids(mail)
    assert len(set(ids)) == 2 and all(i.startswith("fp2:") for i in ids)
    # The same bytes after a reset stay one, and the id is the one an inline read gives.
    before = mail.app.ctx.mail.state.cursor(account_id)
    assert before is not None
    dovecot.set_uidvalidity(mailbox, before.uidvalidity + 7)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 2, None)
    v1 = fingerprint(*header_values(one), len(one))
    assert content_fingerprint(v1, hashlib.sha256(one).digest()) in ids
