"""The tolerance policy: :class:`Tolerance` and :func:`compare_arrays`, the one rule every check of graphsub applies.

An output element passes when ``|a - b| <= atol + rtol * max(|b|, rms(b))``: the usual allclose test, except that an
element is never held to a tighter bound than ``rtol`` times the output's RMS. Rounding errors of an element computed
from sums of O(rms) terms are O(eps * rms) whatever the element's own magnitude, so plain allclose fails correct
rewrites of deep networks on elements that happen to be near zero; a wrong rewrite still changes elements by O(rms)
and fails. A reference output containing NaN or inf makes the check vacuous: it fails as "inconclusive", never
passes.

>>> d, excess = Tolerance().compare("y", np.array([1.0, 2.0]), np.array([1.0, 2.00001]))
>>> d.ok, excess < 0, Tolerance(1e-4, 1e-5).float64() == Tolerance(1e-4 * FLOAT64_FACTOR, 1e-5 * FLOAT64_FACTOR)
(True, True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsub.errors import VerificationError

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
#: outputs larger than this many elements are compared a chunk of this size at a time
CHUNK = 1 << 20
#: the float64 re-check's tolerance is the float32 one times this: float64's epsilon is ~2e-9 of float32's, so an
#: exact rewrite passes with a margin of ~5000 and any real difference above 1e-5 of the float32 tolerance fails
FLOAT64_FACTOR = 1e-5



@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs_diff: float
    max_rel_diff: float
    max_abs_ref: float
    ok: bool
    reason: str = ""


#: the least ``rtol`` of an output in a 16-bit float format: this many units in its last place. Every float16 op
#: rounds to 11 significant bits, so an exact rewrite that sums in another order moves an element by several units of
#: the output's RMS (float32's default rtol is ~840 of its own units); a wrong rewrite still moves it by O(RMS)
HALF_ULPS = 16


def format_rtol(dtype: Any) -> float:
    """The least ``rtol`` an output of ``dtype`` is compared at: :data:`HALF_ULPS` units in the last place for the
    16-bit float formats (float16, bfloat16), else 0 (the tolerance as given).

    >>> format_rtol(np.float16) == 16 * 2.0 ** -10, format_rtol(np.float32)
    (True, 0.0)
    """
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":  # ml_dtypes' (numpy's finfo does not know it)
        return HALF_ULPS * 2.0 ** -7
    return HALF_ULPS * float(np.finfo(dt).eps) if dt.kind == "f" and dt.itemsize == 2 else 0.0


def compare_arrays(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[OutputDiff, float]:
    """Compare ``a`` (candidate) to ``b`` (reference); returns the diff and the worst excess. A reference in a 16-bit
    float format is held to at least :func:`format_rtol` (its own rounding), whatever ``rtol`` says."""
    inf = float("inf")
    a, b = np.asarray(a), np.asarray(b)
    rtol = max(rtol, format_rtol(b.dtype))
    if a.shape != b.shape:
        return OutputDiff(name, inf, inf, 0.0, False, f"shape {a.shape} != {b.shape}"), inf
    if a.size == 0:
        return OutputDiff(name, 0.0, 0.0, 0.0, True), -1.0
    if a.size > CHUNK:
        return _compare_chunked(name, a.reshape(-1), b.reshape(-1), rtol, atol)
    af = a.astype(np.float64)
    bf = b.astype(np.float64)
    if not np.isfinite(bf).all():
        bad = int((~np.isfinite(bf)).sum())
        return OutputDiff(name, inf, inf, 0.0, False,
                          f"inconclusive: the reference output has {bad} NaN/inf value(s)"), inf
    if not np.isfinite(af).all():
        return OutputDiff(name, inf, inf, float(np.abs(bf).max()), False, "candidate output has NaN/inf"), inf
    diff = np.abs(af - bf)
    ref = np.abs(bf)
    rms = float(np.sqrt(np.mean(np.square(bf))))
    excess = diff - (atol + rtol * np.maximum(ref, rms))
    worst = float(excess.max())
    max_abs = float(diff.max())
    with np.errstate(over="ignore", divide="ignore"):
        max_rel = float((diff / np.maximum(ref, np.finfo(np.float64).tiny)).max()) if max_abs > 0 else 0.0
    ok = worst <= 0
    return OutputDiff(name, max_abs, max_rel, float(ref.max()), ok, "" if ok else "outside tolerance"), worst


def _compare_chunked(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[OutputDiff, float]:
    """:func:`compare_arrays` of two flat arrays, :data:`CHUNK` elements at a time (float64 temporaries of a chunk,
    not of the whole output: a 1 GB output would otherwise need ~10 GB)."""
    inf = float("inf")
    n = a.size
    spans = [(i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]
    bad_ref = bad_cand = 0
    sumsq = max_ref = 0.0
    for lo, hi in spans:
        bf = b[lo:hi].astype(np.float64)
        fin = np.isfinite(bf)
        bad_ref += int(bf.size - np.count_nonzero(fin))
        if not bad_ref:
            sumsq += float(np.dot(bf, bf))
            max_ref = max(max_ref, float(np.abs(bf).max()))
            bad_cand += int(hi - lo - np.count_nonzero(np.isfinite(a[lo:hi].astype(np.float64))))
    if bad_ref:
        return OutputDiff(name, inf, inf, 0.0, False,
                          f"inconclusive: the reference output has {bad_ref} NaN/inf value(s)"), inf
    if bad_cand:
        return OutputDiff(name, inf, inf, max_ref, False, "candidate output has NaN/inf"), inf
    rms = math.sqrt(sumsq / n)
    worst, max_abs, max_rel = -inf, 0.0, 0.0
    tiny = np.finfo(np.float64).tiny
    for lo, hi in spans:
        bf = b[lo:hi].astype(np.float64)
        diff = np.abs(a[lo:hi].astype(np.float64) - bf)
        ref = np.abs(bf)
        worst = max(worst, float((diff - (atol + rtol * np.maximum(ref, rms))).max()))
        max_abs = max(max_abs, float(diff.max()))
        with np.errstate(over="ignore", divide="ignore"):
            max_rel = max(max_rel, float((diff / np.maximum(ref, tiny)).max()))
    ok = worst <= 0
    return OutputDiff(name, max_abs, max_rel if max_abs > 0 else 0.0, max_ref, ok,
                      "" if ok else "outside tolerance"), worst


@dataclass(frozen=True)
class Tolerance:
    """The tolerance policy (module docstring) with its two numbers; VerificationError for a negative or non-finite
    one. :meth:`float64` is the tolerance of the float64 re-check."""

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL

    def __post_init__(self) -> None:
        for what, tol in (("rtol", self.rtol), ("atol", self.atol)):
            if not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
                raise VerificationError(f"{what} must be a finite number >= 0, got {tol}")

    def compare(self, name: str, got: Any, want: Any) -> tuple[OutputDiff, float]:
        """``got`` (candidate) against ``want`` (reference): :func:`compare_arrays` -- the diff and the worst excess
        over the tolerance (<= 0: within)."""
        return compare_arrays(name, np.asarray(got), np.asarray(want), self.rtol, self.atol)

    def float64(self) -> Tolerance:
        return Tolerance(self.rtol * FLOAT64_FACTOR, self.atol * FLOAT64_FACTOR)


#: the default tolerance of graphsub's checks (``rtol`` 1e-4, ``atol`` 1e-5)
DEFAULT_TOLERANCE = Tolerance()


def one_line(text: object, limit: int = 300) -> str:
    """The first non-blank line of ``text``, at most ``limit`` characters: an error as a report shows it."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


__all__ = ["CHUNK", "DEFAULT_ATOL", "DEFAULT_RTOL", "DEFAULT_TOLERANCE", "FLOAT64_FACTOR", "HALF_ULPS", "OutputDiff",
           "Tolerance", "compare_arrays", "format_rtol", "one_line"]
