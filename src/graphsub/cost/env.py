"""Where cost data lives and which machine it describes.

* :func:`cache_dir`: ``$XDG_CACHE_HOME/graphsub`` or ``~/.cache/graphsub`` (created on demand);
* :func:`default_cache_path`: the SQLite op-time cache, ``$GRAPHSUB_CACHE`` if set (a file, or a
  directory that then holds ``op_times.sqlite``), else ``cache_dir()/op_times.sqlite``;
* :func:`cpu_model`: the ``model name`` of ``/proc/cpuinfo`` (falls back to ``platform``), which
  with the core count keys every measurement, so caches never mix machines.

>>> import os
>>> os.environ.get("GRAPHSUB_CACHE") is None or default_cache_path().name.endswith(".sqlite")
True
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

CACHE_ENV = "GRAPHSUB_CACHE"
CACHE_FILE = "op_times.sqlite"


def cache_dir() -> Path:
    """The user cache directory for graphsub (not created here)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphsub"


def default_cache_path() -> Path:
    """The op-time cache file: ``$GRAPHSUB_CACHE`` (file or directory) or ``cache_dir()/op_times.sqlite``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        p = Path(env).expanduser()
        return p / CACHE_FILE if p.is_dir() or env.endswith(("/", os.sep)) else p
    return cache_dir() / CACHE_FILE


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """CPU model name, e.g. ``"AMD EPYC"`` (from /proc/cpuinfo where available)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


@functools.lru_cache(maxsize=1)
def llc_bytes() -> int:
    """Size of the last-level CPU cache (from sysfs; 32 MiB if unknown)."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((d / "level").read_text())
            size = (d / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        try:
            n = int(size.rstrip("KMG")) * mult
        except ValueError:
            continue
        if level >= 2 and n > best:
            best = n
    return best or 32 << 20


def machine_key() -> str:
    """``"<cpu model> x<logical cores>"``: what a CPU measurement is valid for."""
    return f"{cpu_model()} x{os.cpu_count() or 1}"




def all_cores() -> int:
    """The number of cores this process may run on: ONNX Runtime's default intra-op thread count, and what "all
    cores" means in the suite."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


__all__ = ["CACHE_ENV", "CACHE_FILE", "all_cores", "cache_dir", "cpu_model", "default_cache_path", "llc_bytes",
           "machine_key"]
