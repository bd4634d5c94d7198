"""Cooperative stopping: Ctrl-C asks long work to finish early with what it has; a second Ctrl-C aborts.

Long loops (the searches, equality saturation, the optimizer's portfolio and timing) call :func:`stop_requested`
where they already check their budgets, and treat a request like an exhausted budget (``stopped_by ==
"interrupt"``): the caller then reports, verifies and writes the best result found so far, exactly as when time
runs out. Nothing here touches the clock or the result; it is one process-wide flag.

:func:`graceful` is what the command line wraps its work in:

* the first SIGINT (Ctrl-C) sets the flag and says so on stderr; the work finishes early;
* a second SIGINT raises :class:`KeyboardInterrupt` at once (the command then exits 130 with nothing written);
* SIGTERM raises :class:`Terminated` (a ``SystemExit`` with code 143), so every ``finally`` and context manager
  runs: temporary files and directories are removed, no half-written output is left.

>>> clear(); stop_requested()
False
>>> request_stop(); stop_requested()
True
>>> clear()
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: exit status of a command stopped by Ctrl-C (128 + SIGINT), the shells' convention
EXIT_INTERRUPTED = 130
#: exit status of a command stopped by SIGTERM (128 + SIGTERM)
EXIT_TERMINATED = 143

_stop = threading.Event()


class Terminated(SystemExit):
    """Raised by the SIGTERM handler of :func:`graceful`: unwinds the stack (cleanup runs), exits 143."""

    def __init__(self) -> None:
        super().__init__(EXIT_TERMINATED)


def request_stop() -> None:
    """Ask long work to finish early with the best result it has (what the first Ctrl-C does)."""
    _stop.set()


def stop_requested() -> bool:
    """Whether a stop was requested since the last :func:`clear`."""
    return _stop.is_set()


def clear() -> None:
    """Forget a stop request (at the start of a command)."""
    _stop.clear()


@contextmanager
def graceful(notify: Callable[[str], None] = lambda message: None) -> Iterator[None]:
    """Within the block, Ctrl-C requests a stop (:func:`request_stop`; ``notify`` is told once) and a second Ctrl-C
    raises KeyboardInterrupt; SIGTERM raises :class:`Terminated`. The previous handlers come back on exit. Outside
    the main thread (where Python allows no signal handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_int(signum: int, frame: FrameType | None) -> None:
        if _stop.is_set():
            raise KeyboardInterrupt
        _stop.set()
        notify("interrupted: finishing with the best result so far (Ctrl-C again to abort)")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    clear()
    old: list[tuple[int, Any]] = [(signal.SIGINT, signal.signal(signal.SIGINT, on_int)),
                                  (signal.SIGTERM, signal.signal(signal.SIGTERM, on_term))]
    try:
        yield
    finally:
        for sig, handler in old:
            signal.signal(sig, handler)


__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "Terminated", "clear", "graceful", "request_stop",
           "stop_requested"]
