"""Random bytes for nonces and ids, drawn from the OS a page at a time.

``os.urandom`` is a system call, and CPython lets go of the GIL around it. Ingesting one
message draws on it several times (a nonce per sealed field and body, ids), and in a
burst of new mail each call is a GIL hand-off among a worker's busy threads
(docs/decisions/randomness-pages.md). The bytes here are the OS's all the same, each
handed out once; every thread draws its own pages, and a forked child starts over.
"""

from __future__ import annotations

import os
import threading

PAGE = 4096
_local = threading.local()


def random_bytes(n: int) -> bytes:
    if n > PAGE:
        return os.urandom(n)
    state = _local.__dict__
    page: bytes = state.get("page", b"")
    at: int = state.get("at", 0)
    if at + n > len(page):
        page, at = os.urandom(PAGE), 0
        state["page"] = page
    state["at"] = at + n
    return page[at : at + n]


def _start_over() -> None:
    # In a forked child only the forking thread lives on: its page is the parent's too.
    _local.__dict__.clear()


os.register_at_fork(after_in_child=_start_over)
