"""The operator's mail retention: unset is kept for ever; each keepFor within its
bounds, from the environment too; past them the settings refuse to load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from domain.mail_retention import MailRetention
from infrastructure.runtime.settings import Settings


def test_unset_keeps_mail_for_ever() -> None:
    assert Settings().mail_retention_default() == MailRetention()


def test_the_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_MAIL_RETENTION_BODIES_FOR", "1y")
    monkeypatch.setenv("TIDINGS_MAIL_RETENTION_MESSAGES_FOR", "10y")
    assert Settings().mail_retention_default() == MailRetention("1y", "10y")


@pytest.mark.parametrize(
    ("bodies", "messages"), [("29d", None), (None, "11y"), ("2y", "1y"), ("1 y", None)]
)
def test_a_default_past_its_bounds_is_refused(bodies: str | None, messages: str | None) -> None:
    with pytest.raises(ValidationError, match="mail retention"):
        Settings(mail_retention_bodies_for=bodies, mail_retention_messages_for=messages)
