"""``EmailMimeParser``: the ``application.mail.parsing.MimeParser`` port on ``mime``.

Small messages are parsed from bytes; stored ones from the blob store, reading
only the head of the file (``mime.parse_message_file``). Authentication-Results
travel as their header values and are parsed only for a DMARC verdict (most accounts
trust no server, so most messages never need them parsed).
"""

from __future__ import annotations

from application.mail import parsing
from application.mail.ports import BlobStore
from infrastructure.mime import reader as mime
from infrastructure.mime.authresults import dmarc_verdict, parse_authentication_results


class EmailMimeParser:
    def __init__(self, blob_store: BlobStore, *, head_bytes: int = mime.HEAD_BYTES) -> None:
        self._blobs = blob_store
        self._head_bytes = head_bytes

    def parse_bytes(self, raw: bytes) -> parsing.ParsedMessage:
        return mime.parse_message(raw)

    def parse_blob(self, ref: str) -> parsing.ParsedMessage:
        with self._blobs.open(ref) as f:
            return mime.parse_message_file(f, head_bytes=self._head_bytes)

    def dmarc_failed(self, parsed: parsing.ParsedMessage, authserv_id: str) -> bool:
        headers = (parse_authentication_results(v) for v in parsed.authentication_results)
        return dmarc_verdict((h for h in headers if h is not None), authserv_id) == "fail"
