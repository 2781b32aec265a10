"""``random_bytes``: the OS's random bytes a page at a time, each handed out once, per
thread, and never the parent's in a forked child."""

from __future__ import annotations

import os
import threading
from unittest import mock

from infrastructure.crypto import randomness
from infrastructure.crypto.randomness import PAGE, random_bytes


def test_draws_are_the_os_bytes_in_order_each_once() -> None:
    pages = [bytes([i]) * PAGE for i in range(1, 4)]
    randomness._start_over()  # this thread's page: none yet
    with mock.patch.object(os, "urandom", side_effect=pages) as urandom:
        drawn = b"".join(random_bytes(12) for _ in range(PAGE // 12 + 1))
        assert urandom.call_count == 2  # a page, then the next when 12 more did not fit
        assert drawn[: PAGE // 12 * 12] == pages[0][: PAGE // 12 * 12]
        assert drawn[-12:] == pages[1][:12]  # the first page's tail is never used
    randomness._start_over()


def test_more_than_a_page_comes_straight_from_the_os() -> None:
    with mock.patch.object(os, "urandom", return_value=b"x" * (PAGE + 1)) as urandom:
        assert len(random_bytes(PAGE + 1)) == PAGE + 1
    urandom.assert_called_once_with(PAGE + 1)


def test_nonces_do_not_repeat_across_threads() -> None:
    seen: list[bytes] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [random_bytes(12) for _ in range(2000)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == len(seen) == 8000


def test_a_forked_child_does_not_reuse_its_parents_page() -> None:
    random_bytes(12)  # the parent holds a page with bytes left
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next draw, to the parent
        os.write(write, random_bytes(12))
        os._exit(0)
    os.close(write)
    child = os.read(read, 12)
    os.close(read)
    os.waitpid(pid, 0)
    assert child != random_bytes(12)  # the parent's next bytes were not the child's
