import pytest

from application.errors import ApplicationError
from application.mail.ports import (
    Credentials,
    FetchedMessage,
    ImapEndpoint,
    MailboxAuthError,
    MailboxCursorInvalid,
    MailboxThrottled,
    MailboxTransientError,
    MailboxUnreachable,
    MailProviderError,
    MessageRef,
)

REF = MessageRef(uid=1, provider_message_id="fp:x", size=10, internal_date=None)


def test_secrets_and_addresses_stay_out_of_repr() -> None:
    creds = Credentials(method="password", secret="hunter2")
    endpoint = ImapEndpoint("imap.example.com", 993, "tls", "alice@example.com")
    assert "hunter2" not in repr(creds) and "hunter2" not in str(creds)
    assert "alice" not in repr(endpoint) and "imap.example.com" in repr(endpoint)
    assert "secret body" not in repr(FetchedMessage(REF, raw=b"secret body"))


def test_fetched_message_states() -> None:
    assert FetchedMessage(REF, raw=b"x").state == "inline"
    assert FetchedMessage(REF, blob_ref="sha256:" + "0" * 64).state == "blob"
    assert FetchedMessage(REF).state == "too_large"
    with pytest.raises(ValueError):
        FetchedMessage(REF, raw=b"x", blob_ref="sha256:" + "0" * 64)


def test_error_hierarchy() -> None:
    assert issubclass(MailProviderError, ApplicationError)
    assert issubclass(MailboxUnreachable, MailboxTransientError)
    for cls in (MailboxAuthError, MailboxThrottled, MailboxCursorInvalid, MailboxTransientError):
        assert issubclass(cls, MailProviderError)
    assert MailboxThrottled("slow down", retry_after=30).retry_after == 30
    err = MailboxCursorInvalid("changed", expected=1, actual=2)
    assert (err.expected, err.actual) == (1, 2)
