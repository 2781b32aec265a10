"""The demo's sending step without a private Postfix (no apt lists, no network, not
root): it says why and is skipped, and the rest of the demo goes on."""

from __future__ import annotations

import pytest
from rich.console import Console

from infrastructure.devkit import demo_send
from infrastructure.devkit.postfix import PostfixError
from infrastructure.runtime.settings import Settings


class FakeDemo:
    def __init__(self) -> None:
        self.console = Console(record=True, width=200)
        self.steps: list[str] = []

    def step(self, title: str, story: str) -> None:
        self.steps.append(title)


def test_without_postfix_the_step_says_why_and_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unavailable(lmtp_port: int) -> str:
        raise PostfixError("apt-get download postfix dovecot-lmtpd failed: no lists\nmore")

    monkeypatch.setattr(demo_send, "dovecot_config", unavailable)
    sending = demo_send.SendDemo(Settings())
    assert sending.dovecot_config() == "", "Dovecot starts without the LMTP lines"
    assert sending.smtp("sales") == {}, "the demo account gets no smtp settings"
    demo = FakeDemo()
    sending.reply(demo, "account", None, "pw")  # type: ignore[arg-type]
    said = demo.console.export_text()
    assert demo.steps == ["Reply from the app (send-message)"]
    assert "Skipped: no private Postfix" in said
    assert "apt-get download postfix dovecot-lmtpd failed: no lists" in said
    assert "apt-get update" in said
    sending.close()
