"""Sending: one worker's sends per second to the private Postfix against ``smtplib``
sending the same messages in a loop in the same run, and the latency ``send-message``
adds before the server accepts a message.

- *throughput*: N messages queued with ``send-message`` (untimed), then one worker's
  outbox pool (``send_concurrency`` threads, 4) runs ``OutboundDelivery.run`` on each
  (claim, SMTP, outcome; the Sent copy's APPEND skipped: the provider entry for
  127.0.0.1 says it saves sent mail, as Gmail does): messages/s. Baseline: a plain
  ``smtplib`` loop, a new STARTTLS + AUTH connection per message, as the worker makes
  (goal: ratio >= 0.7);
- *latency*: M messages one at a time, from ``app.write("send-message")`` to the server's
  acceptance, the worker picking the message up at once (its scan interval not
  counted): p99 of that time minus the median of the baseline's own per-message time
  (goal: <= 50 ms).

    python bench/send.py                          # both backends, 500 messages, 200 timed
    python bench/send.py --backend sqlite --messages 50 --latency 20
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import smtplib
import ssl
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from email.message import EmailMessage
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application.users import User
from bench._common import (
    BACKENDS,
    Backend,
    Row,
    environment,
    percentile,
    render,
    say,
    scratch_database,
)
from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import build_outbound_delivery
from infrastructure.devkit.processes import free_port
from infrastructure.runtime.settings import Settings
from tests.support.dovecot import DovecotServer
from tests.support.postfix import DOMAIN, PostfixServer, dovecot_config

ADMIN = User(id="bench", tenant_id="bench", roles=frozenset({"TenantAdmin"}))
BODY = "A message of a few hundred bytes, as a reply in a CRM would be.\n" * 6


def baseline(postfix: PostfixServer, user: Any, to: str, count: int) -> list[float]:
    """Seconds per message of a plain smtplib loop (a connection per message)."""
    assert postfix.ca_file is not None
    context = ssl.create_default_context(cafile=str(postfix.ca_file))
    times = []
    for n in range(count):
        message = EmailMessage()
        message["From"], message["To"] = f"{user.name}@{DOMAIN}", to
        message["Subject"] = f"baseline {n}"
        message["Message-ID"] = f"<{uuid.uuid4().hex}@{DOMAIN}>"
        message.set_content(BODY)
        started = time.perf_counter()
        with smtplib.SMTP(postfix.host, postfix.submission_port, timeout=30) as client:
            client.starttls(context=context)
            client.login(user.name, user.password)
            client.send_message(message)
        times.append(time.perf_counter() - started)
    return times


def connect(app: Any, dovecot: DovecotServer, postfix: PostfixServer, user: Any) -> str:
    payload = {
        "provider": "imap",
        "displayName": "bench",
        "address": f"{user.name}@{DOMAIN}",
        "scope": "shared",
        "authMethod": "password",
        "imap": {
            "host": dovecot.host,
            "port": dovecot.port,
            "security": "none",
            "username": user.name,
        },
        "smtp": {
            "host": postfix.host,
            "port": postfix.submission_port,
            "security": "starttls",
            "username": user.name,
        },
        "secret": user.password,
    }
    result = app.write("connect-mail-account", payload, ADMIN)
    assert result.is_success, result.error
    return str(result.data["accountId"])


def queue(app: Any, account: str, to: str, n: int) -> str:
    result = app.write(
        "send-message",
        {
            "accountId": account,
            "to": [to],
            "subject": f"tidings {n}",
            "text": BODY,
            "idempotencyKey": uuid.uuid4().hex,
        },
        ADMIN,
    )
    assert result.is_success, result.error
    return str(result.data["outboundId"])


def run_backend(backend: Backend, messages: int, latency: int) -> list[Row]:
    lmtp = free_port()
    rows: list[Row] = []
    with (
        DovecotServer(extra_config=dovecot_config(lmtp)) as dovecot,
        PostfixServer(dovecot, lmtp) as postfix,
        scratch_database(backend, "send") as scratch,
    ):
        sender = dovecot.add_user("sender", secrets.token_urlsafe(9))
        dovecot.add_user("rcpt", secrets.token_urlsafe(9))
        to = f"rcpt@{DOMAIN}"
        settings = Settings(
            database_url=scratch.url,
            blob_dir=scratch.workdir / "blobs",
            master_key=base64.b64encode(os.urandom(32)).decode(),
            allow_private_hosts=True,
            project_inline=False,
            smtp_ca_file=postfix.ca_file,
            provider_limits={"127.0.0.1": {"name": "local", "saves_sent": True}},
        )
        app = bootstrap(settings)
        try:
            delivery = build_outbound_delivery(app, settings, "bench-worker")
            account = connect(app, dovecot, postfix, sender)
            say(f"{backend}: baseline, {messages} messages")
            base = baseline(postfix, sender, to, messages)
            base_rate = messages / sum(base)
            say(f"{backend}: tidings, {messages} messages queued, then sent by one worker")
            ids = [queue(app, account, to, n) for n in range(messages)]
            app.projections.catch_up()
            started = time.perf_counter()
            with ThreadPoolExecutor(settings.send_concurrency) as pool:  # the worker's pool
                states = list(pool.map(delivery.run, ids))
            elapsed = time.perf_counter() - started
            assert states == ["sent"] * messages, set(states)
            rate = messages / elapsed
            rows.append(
                Row(
                    "sends/s, one worker",
                    backend,
                    f"{rate:,.0f}/s",
                    f"{base_rate:,.0f}/s",
                    rate / base_rate,
                    ">= 0.7",
                    rate / base_rate >= 0.7,
                )
            )
            say(f"{backend}: latency, {latency} messages one at a time")
            extra = []
            per_message = statistics.median(baseline(postfix, sender, to, latency))
            for n in range(latency):
                started = time.perf_counter()
                outbound = queue(app, account, to, messages + n)
                state = delivery.run(outbound)
                assert state == "sent", state
                extra.append(time.perf_counter() - started - per_message)
            p99 = percentile(extra, 0.99) * 1000
            rows.append(
                Row(
                    "send-message -> accepted, extra p99",
                    backend,
                    f"{p99:.1f} ms",
                    f"{per_message * 1000:.1f} ms",
                    p99 / 50,
                    "<= 50 ms",
                    p99 <= 50,
                )
            )
        finally:
            app.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--latency", type=int, default=200)
    args = parser.parse_args()
    backends = [args.backend] if args.backend else list(BACKENDS)
    rows = [
        row for backend in backends for row in run_backend(backend, args.messages, args.latency)
    ]
    render(
        "Sending through a private Postfix",
        rows,
        environment(backends),
        [
            "latency: the ratio column is p99 / 50 ms;"
            " the baseline column is smtplib's own median per message",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
