"""What messages say: a malformed-MIME corpus never stops a batch, a trusted
Authentication-Results rejects DMARC failures, and replies group into threads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from application import User
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import (
    RECENT,
    accounts,
    connect,
    messages,
    raw_mail,
    threads,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

CRLF = b"\r\n"


def _msg(*headers: str, body: bytes = b"body text\r\n") -> bytes:
    return CRLF.join(h.encode() for h in headers) + CRLF + CRLF + body


DATE = "Date: Mon, 01 Jan 2024 10:00:00 +0000"

CORPUS: dict[str, bytes] = {
    "garbage": bytes(range(256)) * 3 + b"\x00\xff\r\n\r\n\x80\x81 not mail at all\r\n",
    "broken boundary": _msg(
        "Message-ID: <broken-boundary@test.example>",
        DATE,
        "From: Broken <broken@origin.example>",
        "Subject: broken boundary",
        "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="declared"',
        body=b"--other\r\nContent-Type: text/plain\r\n\r\npart text\r\n--other--\r\n",
    ),
    "unknown charset": _msg(
        "Message-ID: <unknown-charset@test.example>",
        DATE,
        "From: Charset <charset@origin.example>",
        "Subject: unknown charset",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=x-klingon-9",
        body=b"plain words in an unknown charset\r\n",
    ),
    "8-bit headers": (
        b"Message-ID: <raw-8bit@test.example>\r\n"
        + DATE.encode()
        + b"\r\nFrom: Caf\xe9 Owner <cafe@origin.example>\r\n"
        b"Subject: caf\xe9 cr\xe8me\r\n\r\nbody of the 8-bit one\r\n"
    ),
    "bad base64": _msg(
        "Message-ID: <bad-base64@test.example>",
        DATE,
        "From: B64 <b64@origin.example>",
        "Subject: bad base64",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: base64",
        body=b"!!!this is (not) base64 at all===\r\nQUJD=RA\r\n",
    ),
    "missing headers": b"Subject: no sender, no date, no id\r\n\r\nlonely body\r\n",
}


def test_a_malformed_corpus_never_stops_the_batch(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    good = [raw_mail(i, subject=f"good {i}") for i in range(3)]
    corpus = list(CORPUS.values())
    # Good mail before, among and after the bad.
    dovecot.deliver(mailbox, [good[0], *corpus[:3], good[1], *corpus[3:], good[2]])
    # Without Message-ID and Date, the fingerprint identity
    # (docs/decisions/message-identity.md) tells messages apart by size alone: keep the
    # corpus' sizes distinct.
    assert len({len(raw) for raw in corpus}) == len(corpus)
    account_id = connect(app, admin, dovecot, mailbox)

    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (9, None)
    listed = messages(app, admin)
    assert len(listed) == 9 == len({m["messageId"] for m in listed})
    by_subject = {m["subject"]: m for m in listed}
    assert len(by_subject) == 9
    named = {
        "broken boundary": "broken boundary",
        "unknown charset": "unknown charset",
        "8-bit headers": "café crème",
        "bad base64": "bad base64",
        "missing headers": "no sender, no date, no id",
        "garbage": "",
    }

    def seen(name: str) -> dict[str, object]:
        return by_subject[named[name]]

    assert {name: seen(name)["state"] for name in CORPUS} == dict.fromkeys(CORPUS, "malformed")
    assert Counter(m["state"] for m in listed) == {"ok": 3, "malformed": 6}

    # Whatever could be read was recorded.
    assert seen("broken boundary")["subject"] == "broken boundary"
    assert seen("broken boundary")["from"] == [
        {"name": "Broken", "address": "broken@origin.example"}
    ]
    assert seen("unknown charset")["subject"] == "unknown charset"
    assert seen("unknown charset")["snippet"] == "plain words in an unknown charset"
    assert seen("8-bit headers")["subject"] == "café crème"
    assert seen("8-bit headers")["from"] == [
        {"name": "Café Owner", "address": "cafe@origin.example"}
    ]
    assert seen("bad base64")["subject"] == "bad base64"
    assert seen("missing headers")["subject"] == "no sender, no date, no id"
    assert seen("missing headers")["snippet"] == "lonely body"
    assert seen("garbage")["from"] == [] and seen("garbage")["bodyRef"] is not None
    assert sorted(m["subject"] for m in listed if m["state"] == "ok") == [
        "good 0",
        "good 1",
        "good 2",
    ]
    assert len(messages(app, admin, state="malformed")) == 6

    # Nothing is fetched twice, and the account stays healthy.
    assert mail.outcome(account_id, mail.poll()).ingested == 0
    assert accounts(app, admin)[account_id]["health"]["messageCount"] == 9


def _auth_results(authserv: str, verdict: str, n: int) -> bytes:
    return raw_mail(
        n,
        subject=f"{verdict} from {authserv}" + (f" #{n}" if n > 4 else ""),
        extra_headers=f"Authentication-Results: {authserv};\r\n"
        " spf=pass smtp.mailfrom=origin.example;\r\n"
        f" dmarc={verdict} header.from=origin.example\r\n",
    )


def test_a_trusted_authserv_id_rejects_dmarc_failures(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    corpus = [
        _auth_results("mx.trusted", "fail", 1),
        _auth_results("mx.untrusted", "fail", 2),
        _auth_results("mx.trusted", "pass", 3),
        raw_mail(4, subject="no authentication results"),
    ]
    trusting, plain = new_mailbox(), new_mailbox()
    for box in (trusting, plain):
        dovecot.deliver(box, corpus, internal_date=RECENT)
    trusting_id = connect(app, admin, dovecot, trusting, trustedAuthservId="mx.trusted")
    plain_id = connect(app, admin, dovecot, plain)
    mail.poll()

    def states(account_id: str) -> dict[str, str]:
        return {m["subject"]: m["state"] for m in messages(app, admin, accountId=account_id)}

    assert states(trusting_id) == {
        "fail from mx.trusted": "rejected",
        "fail from mx.untrusted": "ok",
        "pass from mx.trusted": "ok",
        "no authentication results": "ok",
    }
    assert set(states(plain_id).values()) == {"ok"}
    [rejected] = messages(app, admin, state="rejected")
    assert rejected["accountId"] == trusting_id

    # Trusting the server later applies to the mail that arrives from then on.
    ok(
        app.write(
            "update-mail-account", {"accountId": plain_id, "trustedAuthservId": "mx.trusted"}, admin
        )
    )
    dovecot.deliver(plain, [_auth_results("mx.trusted", "fail", 5)], internal_date=RECENT)
    mail.poll()
    assert Counter(states(plain_id).values()) == {"ok": 4, "rejected": 1}


def test_replies_group_into_threads(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    root = "<root.thread@test.example>"
    first_reply = "<reply.one@test.example>"
    dovecot.deliver(
        mailbox,
        [
            raw_mail(1, subject="Plan", message_id=root),
            raw_mail(
                2,
                subject="Re: Plan",
                message_id=first_reply,
                extra_headers=f"In-Reply-To: {root}\r\nReferences: {root}\r\n",
            ),
            raw_mail(3, subject="Unrelated"),
            raw_mail(
                4,
                subject="Re: Re: Plan",
                extra_headers=f"In-Reply-To: {first_reply}\r\n"
                f"References: {root}\r\n {first_reply}\r\n",
            ),
            raw_mail(
                5, subject="Re: Plan (no references)", extra_headers=f"In-Reply-To: {root}\r\n"
            ),
        ],
        internal_date=RECENT,
    )
    account_id = connect(app, admin, dovecot, mailbox)
    mail.poll()

    listed = threads(app, admin)
    assert sorted((t["subject"], t["messageCount"]) for t in listed) == [
        ("Plan", 4),
        ("Unrelated", 1),
    ]
    assert all(t["accountId"] == account_id for t in listed)
    [plan] = [t for t in listed if t["subject"] == "Plan"]
    in_thread = messages(app, admin, threadKey=plan["threadKey"])
    assert sorted(m["subject"] for m in in_thread) == [
        "Plan",
        "Re: Plan",
        "Re: Plan (no references)",
        "Re: Re: Plan",
    ]
    assert plan["lastReceivedAt"] == max(m["receivedAt"] for m in in_thread)

    # A later reply joins the thread in the next pass.
    dovecot.deliver(
        mailbox, [raw_mail(6, subject="Re: Plan again", extra_headers=f"References: {root}\r\n")]
    )
    mail.poll()
    assert {t["subject"]: t["messageCount"] for t in threads(app, admin)}["Plan"] == 5
