"""The mail fixtures (a private Dovecot, fresh mailboxes, mail apps) for worker tests."""

from tests.integration.mail.conftest import (  # noqa: F401 (fixtures)
    dovecot,
    mailbox,
    make_mail_app,
    new_mailbox,
)
