"""One process of the OAuth2 refresh race: ``python -m tests.support.oauth_race DB REDIS
BLOB_DIR MASTER_KEY ACCOUNT_ID THREADS READY_FILE``. It bootstraps an app on the shared
database and Redis, creates ``READY_FILE``, reads the start time (unix time, one line)
from stdin and waits for it, then ``THREADS`` threads each log in to the account's
mailbox at once (``AccountSync.open_session``: the worker's own path, refresh included)
and select INBOX. Prints one line: ``ok=N failed=M``."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.runtime.settings import Settings


def main(argv: list[str]) -> int:
    database_url, redis_url, blob_dir, master_key, account_id, threads, ready = argv
    settings = Settings(
        database_url=database_url,
        redis_url=redis_url,
        blob_dir=blob_dir,
        master_key=master_key,
        allow_private_hosts=True,
        project_inline=False,
    )
    app = bootstrap(settings)
    syncer = build_syncer(app, settings)
    account = syncer.syncable(account_id)
    assert account is not None, "the account is active"
    results: list[str] = []
    lock = threading.Lock()

    def login() -> None:
        try:
            with syncer.open_session(account) as session:
                session.select_inbox()
            outcome = "ok"
        except Exception as error:
            outcome = type(error).__name__
        with lock:
            results.append(outcome)

    workers = [threading.Thread(target=login) for _ in range(int(threads))]
    Path(ready).touch()
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    app.close()
    failed = [r for r in results if r != "ok"]
    print(f"ok={len(results) - len(failed)} failed={len(failed)} errors={','.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
