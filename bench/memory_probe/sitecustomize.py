"""A diagnostic for ``bench/watch.py`` (docs/decisions/worker-memory.md), not product code.

With this directory on ``PYTHONPATH`` and ``MEMDIAG_DIR`` set, a ``tidings worker`` child
(the bench passes its environment on) starts ``tracemalloc`` with ``MEMDIAG_FRAMES``
frames (12; 0: no tracing) and waits for ``$MEMDIAG_DIR/go``. Then it writes
``worker-<pid>.txt`` (RSS, threads, frozen objects), dumps ``worker-<pid>.snap`` when
tracing, thaws and collects every generation and calls ``malloc_trim(0)``, writing RSS
after each. Touch ``go`` when the bench prints "start-up polls ended"::

    MEMDIAG_DIR=/tmp/m PYTHONPATH=bench/memory_probe python bench/watch.py --only hot &
    until grep -q "start-up polls ended" log; do sleep 0.5; done; touch /tmp/m/go
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def _status() -> list[str]:
    lines = Path("/proc/self/status").read_text().splitlines()
    return [line for line in lines if line.startswith(("VmRSS", "Threads"))]


def _probe(out_dir: Path, frames: int) -> None:
    import ctypes  # noqa: PLC0415 - only once the probe runs
    import gc  # noqa: PLC0415 - as above

    while not (out_dir / "go").exists():
        time.sleep(0.5)
    with open(out_dir / f"worker-{os.getpid()}.txt", "w") as out:
        out.write(f"at trigger {_status()} modules {len(sys.modules)}\n")
        out.write(f"threads {sorted(t.name for t in threading.enumerate())}\n")
        out.write(f"gc frozen {gc.get_freeze_count()}\n")
        if frames:
            traced, _ = tracemalloc.get_traced_memory()
            out.write(f"traced {traced / 2**20:.1f} MiB\n")
            tracemalloc.take_snapshot().dump(str(out_dir / f"worker-{os.getpid()}.snap"))
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        out.write(f"thaw+collect freed {freed} objects {_status()}\n")
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out.write(f"after malloc_trim {_status()}\n")


def _install() -> None:
    out_dir = os.environ.get("MEMDIAG_DIR")
    if not out_dir or "worker" not in sys.orig_argv or "infrastructure.cli" not in sys.orig_argv:
        return
    frames = int(os.environ.get("MEMDIAG_FRAMES", "12"))
    if frames:
        tracemalloc.start(frames)
    threading.Thread(target=_probe, args=(Path(out_dir), frames), daemon=True).start()


_install()
