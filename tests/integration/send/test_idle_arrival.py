"""A sent message reaches the recipient's account by IDLE (both backends): the recipient's
session idles, Postfix delivers into its INBOX by LMTP, the server's EXISTS wakes it, and
the watch path's page (``WatchIngest``) stores the message."""

from __future__ import annotations

import select
import time
from concurrent.futures import Future

from application.mail.sync_outcome import SyncOutcome
from tests.integration.mail.helpers import messages
from tests.integration.send.conftest import ADMIN, Sender
from tests.integration.send.test_send import _address
from workers.metrics import WorkerMetrics
from workers.news import News
from workers.watch_ingest import WatchIngest, watch_committer


def _outcome(answer: Future[SyncOutcome]) -> SyncOutcome:
    return answer.result(timeout=60)


def test_a_sent_message_is_ingested_by_the_recipients_idle(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id, bob_id = sender.account(alice), sender.account(bob)
    told: list[News] = []
    syncer = sender.mail.syncer
    ingest = WatchIngest(syncer, watch_committer(syncer), WorkerMetrics(), told.append)
    session = ingest.open_session(bob_id)
    try:
        assert _outcome(ingest.sync(bob_id, session)).ingested == 0
        session.idle_start()
        queued = sender.send(alice_id, to=[_address(bob)], subject="Pushed by IDLE")
        assert sender.delivery.run(queued["outboundId"]) == "sent"
        deadline = time.monotonic() + 15
        exists = False
        while not exists and time.monotonic() < deadline:
            ready, _, _ = select.select([session.idle_fileno()], [], [], 1.0)
            if ready:
                news = session.idle_read()
                assert not news.closed
                exists = news.exists
        assert exists, "the server told the idling session of the new message"
        assert _outcome(ingest.sync(bob_id, session)).ingested == 1
    finally:
        session.close()
        ingest.close()
    [received] = messages(sender.app, ADMIN, accountId=bob_id)
    assert (received["subject"], received["direction"]) == ("Pushed by IDLE", "inbound")
