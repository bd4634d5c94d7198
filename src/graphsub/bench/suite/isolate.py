"""Run a function in a process of its own, so that its crash, hang or exception is a result, not the end of the run.

:func:`run_isolated` starts a ``spawn`` process (a clean interpreter: no state shared with the caller), calls
``fn(*args)`` there and returns ``(status, error, value)``: ``("ok", "", value)``, or ``("failed", why, None)`` for an
exception (its type and message), a crash (the signal or exit code) or a timeout (the process is killed).  ``fn``
must be importable by name (a module-level function) and its value picklable.

>>> run_isolated(divmod, (7, 2))
('ok', '', (3, 1))
>>> status, error, _ = run_isolated(divmod, (1, 0))
>>> status, error
('failed', 'ZeroDivisionError: integer division or modulo by zero')
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Callable, Sequence
from typing import Any


def _child(conn: Any, fn: Callable[..., Any], args: Sequence[Any]) -> None:
    try:
        value = fn(*args)
        conn.send(("ok", "", value))
    except BaseException as e:  # report everything, MemoryError and KeyboardInterrupt included
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        conn.send(("failed", f"{type(e).__name__}: {first}"[:500], traceback.format_exc(limit=6)))
    finally:
        conn.close()


def run_isolated(fn: Callable[..., Any], args: Sequence[Any] = (), *, timeout_s: float = 600.0
                 ) -> tuple[str, str, Any]:
    """``fn(*args)`` in a spawned process: ``(status, error, value)`` (see the module docstring)."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, tuple(args)), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout_s):
            try:
                status, error, value = recv.recv()
            except EOFError:
                status, error, value = "failed", "", None
            if status == "failed":
                value = None
            if status == "ok" or error:
                return status, error, value
        else:
            return "failed", f"timed out after {timeout_s:g}s", None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=30)
        recv.close()
    code = proc.exitcode
    why = f"crashed (signal {-code})" if code is not None and code < 0 else f"exited with code {code} without a result"
    return "failed", why, None


__all__ = ["run_isolated"]
