"""The message-content port: a message's text, sanitized HTML and attachments, read from
its raw MIME as a stream.

Content is never stored on its own: it is derived on read from the sealed raw MIME
(docs/decisions/content-on-read.md), so it is sealed at rest and shredded with it.
An attachment id is bound to its message (a digest of the message id and the part's
place in the tree): an id from another message names nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol


@dataclass(frozen=True, slots=True)
class Attachment:
    attachment_id: str
    filename: str
    content_type: str
    size: int  # decoded bytes
    content_id: str | None
    inline: bool

    def view(self) -> dict[str, object]:
        return {
            "attachmentId": self.attachment_id,
            "filename": self.filename,
            "contentType": self.content_type,
            "size": self.size,
            "contentId": self.content_id,
            "inline": self.inline,
        }


@dataclass(frozen=True, slots=True)
class MessageContent:
    text: str | None = None
    html: str | None = None  # sanitized for display
    attachments: tuple[Attachment, ...] = ()
    truncated: bool = False  # text or html was cut at the reader's cap
    defects: tuple[str, ...] = field(default=())


class ContentReader(Protocol):
    def read(self, stream: BinaryIO, *, message_id: str) -> MessageContent:
        """Text, sanitized HTML and the attachment index, in one bounded pass."""
        ...

    def chunks(self, stream: BinaryIO, attachment_id: str, *, message_id: str) -> Iterator[bytes]:
        """The attachment's decoded bytes, in chunks, read from the stream while iterated
        (nothing when the message has no such attachment)."""
        ...
