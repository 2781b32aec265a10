"""Run in a child process: read a message's content and save one attachment, streamed,
then print the process's peak RSS (KiB, before and after) and the bytes written, as
JSON.

``python -m tests.support.content_rss SETTINGS.json USER.json MESSAGE_ID ATTACHMENT_ID OUT``
(``ATTACHMENT_ID`` ``-`` = only get-message)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from application import User
from application.mail.get_attachment import Download, open_attachment
from infrastructure.bootstrap import bootstrap


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM: per address space, so unlike
    ``ru_maxrss`` it does not carry over the parent's peak across fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise LookupError("VmHWM")


def main(settings_path: str, user_path: str, message_id: str, attachment_id: str, out: str) -> None:
    settings = json.loads(Path(settings_path).read_text())
    data = json.loads(Path(user_path).read_text())
    user = User(id=data["id"], tenant_id=data["tenantId"], roles=frozenset(data["roles"]))
    app = bootstrap(None, **settings)
    try:
        baseline = peak_rss_kib()
        got = app.query("get-message", {"messageId": message_id, "includeRaw": False}, user)
        assert got.data is not None, got.error
        written = 0
        if attachment_id != "-":
            opened = open_attachment(app.ctx, user, message_id, attachment_id)
            assert isinstance(opened, Download), opened
            with open(out, "wb") as f:
                for chunk in opened.chunks:
                    f.write(chunk)
                    written += len(chunk)
        peak = peak_rss_kib()
    finally:
        app.close()
    print(json.dumps({"baselineKib": baseline, "peakKib": peak, "written": written}))


if __name__ == "__main__":
    main(*sys.argv[1:6])
