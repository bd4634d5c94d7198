"""The timing step of :func:`graphsub.optimize.optimize`: the verified candidates against the original, in
onnxruntime, within the deadline (:func:`time_portfolio`).

With many candidates, a short screening race picks the finalists (the fastest few, and the leanest ones onnxruntime
runs with clearly fewer kernels, :func:`_lean`); the finalists and the original are timed side by side in rotating
rounds (:func:`graphsub.optimize.timing.time_candidates`): they only pick the leaders. Each leader is then measured
anew against the original in fresh session groups with an A/A control, and decided by the one decision procedure
(:func:`graphsub.optimize.decide.compare`); only a leader it declares faster may be chosen. With ``k`` leaders
each gets ``alpha / k``, so that a portfolio of candidates no faster than the original is declared faster at most
``alpha`` of the time. Every round fits in what is left before the deadline, the side-by-side rounds leave the
leader the time of its confirmation (:func:`graphsub.optimize.budget.confirm_reserve_s`), and the first leader's
extra session groups leave the second its minimum (:func:`_leaving`).

All of it is measured through one :class:`~graphsub.optimize.timing.Timers` (the ``timers`` argument): its
sessions, its confirmation sessions and its clock, which must be the deadline's clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graphsub.deadline import NO_DEADLINE, Deadline
from graphsub.frontends.ort import session_s_per_mb
from graphsub.interrupt import stop_requested
from graphsub.optimize import decide
from graphsub.optimize.budget import confirm_reserve_s
from graphsub.optimize.timing import Timers, resolve_timers, time_candidates

if TYPE_CHECKING:
    from graphsub.optimize.pipeline import _Settings
    from graphsub.optimize.target import Target

#: with more verified candidates than this, one short screening round picks the ones timed side by side
FINALISTS = 5
#: at most this many leaders are confirmed (each at ``alpha / CONFIRM``) before the original is kept
CONFIRM = 2
#: a model slower than this (ms a run) gets fewer finalists (the time to result); its second leader is confirmed only
#: where the first is not (or went first for its fewer kernels), as any model's: the side-by-side rounds of a slow
#: model are few and noisy, so its leader is often not the fastest (the 1 B decoder, 2026-11-30: onnxscript led them
#: at 1.14x and confirmed at 0.97x, while the search priced by ORT's kernels, 1.12x there and 1.29x screened alone,
#: was never confirmed)
SLOW_MS = 50.0
#: a candidate the screening leaves out still runs side by side when onnxruntime's graph of it has at most this share
#: of the original's kernels (the :data:`LEAN_PICKS` leanest such ones)
LEAN_SHARE = 0.9
LEAN_PICKS = 2
#: the per-round timing budget never shrinks below this to fit the deadline (ms)
MIN_ROUND_MS = 5.0
#: what one onnxruntime session of a model may hold, in multiples of the model's bytes (its packed copy of the
#: MatMul weights, the arena): :func:`sessions_that_fit`
SESSION_MEMORY_FACTOR = 1.5


def sessions_that_fit(models: Mapping[str, bytes | str]) -> int:
    """How many onnxruntime sessions of the largest of ``models`` fit the memory available now
    (:data:`SESSION_MEMORY_FACTOR`; at least 1)."""
    from graphsub.data import available_memory
    from graphsub.frontends.shared import model_bytes

    each = SESSION_MEMORY_FACTOR * max((model_bytes(m) for m in models.values()), default=0)
    return max(1, int(available_memory() // each)) if each > 0 else len(models)


def _round_ms(budget_ms: float, left_s: float, n_timed: int) -> float:
    """The per-round timing budget (ms) that lets the timing fit in ``left_s`` seconds: ``budget_ms``, or less (at
    least :data:`MIN_ROUND_MS`). Counted: the screening race, five side-by-side rounds, two leaders confirmed in
    :data:`~graphsub.optimize.decide.GROUPS` session groups of three blocks a round (half again for warm-ups and
    session creation)."""
    n = min(n_timed, FINALISTS + LEAN_PICKS) + 1  # the finalists, the lean ones (_lean) and the original
    confirm = CONFIRM * decide.GROUPS * decide.ROUNDS_PER_GROUP * 3
    units = 5 * n + confirm + (1.5 * (n_timed + 1) if n_timed > FINALISTS else 0.0)
    return max(MIN_ROUND_MS, min(budget_ms, left_s * 1000.0 / (1.5 * units)))


def load_order(timed: list[Any]) -> list[Any]:
    """``timed`` in the order their sessions are made, which is what a short budget times first: the graphs with
    the fewest ops first (those that removed the most work; a candidate without a graph of graphsub's, a peer's
    file, counts as many ops as the most of those that have one), in their own order among equals. On the 100 M
    decoder at its default budget, the clean-up's and the spelling pass's candidates (789 and 814 ops) took the
    sessions the budget had, and the search priced by onnxruntime's kernels (173 ops, GroupQueryAttention) was not
    timed (2026-11-29)."""
    ops = [c.graph.num_ops if getattr(c, "graph", None) is not None else None for c in timed]
    most = max((n for n in ops if n is not None), default=0)
    return [c for _, c in sorted(zip((most if n is None else n for n in ops), timed, strict=True),
                                 key=lambda pair: pair[0])]


def time_portfolio(port: Any, timed: list[Any], source: bytes | str, feeds: dict[str, Any], st: _Settings,
                   deadline: Deadline = NO_DEADLINE, timers: Timers | None = None) -> bool:
    """Time the verified candidates ``timed`` against the original (a screening race first when there are many),
    then confirm the leaders with :mod:`graphsub.optimize.decide` (fresh session groups, an A/A control); in
    ``port``. Every round fits in what is left before ``deadline`` (shorter rounds when little is left, none after
    it or a stop request); returns whether the deadline cut the timing short. A confirmation cut to fewer than
    :data:`~graphsub.optimize.decide.MIN_GROUPS` session groups decides nothing, so an unconfirmed candidate is
    never chosen (without ``keep_slower``). ``timers`` (None: the current ones) time every round; their clock is
    the one ``deadline`` reads."""
    from graphsub.optimize import portfolio as pf

    tm = resolve_timers(timers)

    def stop(need_s: float = 0.0) -> bool:  # no time left, or not for a round like the last one
        return deadline.expired() or deadline.remaining() < need_s

    timed = load_order(timed)
    budget_ms = _round_ms(st.budget_ms, deadline.remaining(), len(timed))
    sessions: dict[str, Any] = {}  # created once: screening and the side-by-side rounds share them
    twins: dict[str, str] = {}  # candidates onnxruntime runs exactly as the original or an earlier candidate
    models = {pf.ORIGINAL: source, **{c.name: c.data for c in timed}}
    slow = False
    biggest = max((c.data for c in timed), key=len, default=b"")
    run_s = 0.0  # one run of the original, once the screening measured it

    def keeping(n_models: int, sessions: bool = False) -> Callable[[float], bool]:
        """Rounds of ``n_models`` (their sessions first, ``sessions``) keep the time of the leader's confirmation, its
        blocks as long as the last round's share of a model (before a session: the timing budget, or one run when
        that is longer), its sessions at the rate this process measured (:func:`session_s_per_mb`). Before a
        session, ``need_s`` is twice the last session's time, not a round's: as a block's length it had made the
        100 M decoder's reserve 135 s of the 93 s left, and no candidate's session was made (2026-11-30). One
        confirmation is kept, not :data:`CONFIRM`: kept for two, the default's side-by-side rounds stopped after one
        or two on the six held-out transformers with 15-22 candidates, and on OPT no candidate led that one round
        and nothing was confirmed with 14 s left (``heldout_two_reserves.md``, 2026-12-01); the second leader's
        time comes from the first's extra groups (:func:`_leaving`)."""
        def check(need_s: float) -> bool:
            if need_s <= 0:
                return stop(0.0)
            side_s = max(run_s if sessions else need_s / n_models, budget_ms / 1000.0)
            return stop(need_s + confirm_reserve_s(source, biggest, side_s, decide.MIN_GROUPS, session_s_per_mb()))

        return check

    fit = sessions_that_fit(models)
    if fit < len(models):  # a large model: its sessions do not all fit in memory at once
        alone = _screen_alone(port, timed, models, feeds, st, budget_ms, tm, stop, fit)
        if alone is None:
            return _cut(port, st)
        timed = alone
    elif len(timed) > FINALISTS:  # race: three short rounds for all, then the fastest few side by side
        screen = time_candidates(models, feeds, threads=st.threads, budget_ms=budget_ms / 2, rounds=3,
                                 provider=st.provider, sessions=sessions, stop=keeping(len(models)), twins=twins,
                                 timers=tm, session_stop=keeping(len(models), sessions=True))
        if not screen.get(pf.ORIGINAL):
            return _cut(port, st)
        timed = _untwin(port, timed, twins)
        left_out = [c.name for c in timed if not screen.get(c.name)]
        if left_out:
            port.notes.append(f"timing: {len(left_out)} candidate(s) not timed, the budget left no time to load them "
                              f"({', '.join(left_out)})")
        timed = [c for c in timed if screen.get(c.name)]
        for c in timed:  # the best of three short rounds: robust to a transient disturbance
            c.screen_ratio = min(screen[pf.ORIGINAL]) / min(screen[c.name])
        slow = statistics.median(screen[pf.ORIGINAL]) > SLOW_MS
        run_s = statistics.median(screen[pf.ORIGINAL]) / 1000.0
        ranked = sorted(timed, key=lambda c: -(c.screen_ratio or 0.0))
        timed = ranked[:3 if slow else FINALISTS] + _lean(ranked[3 if slow else FINALISTS:], sessions)
        for name in set(sessions) - {pf.ORIGINAL, *(c.name for c in timed)}:
            del sessions[name]  # the memory of the sessions that are out of the race
    finalists = {pf.ORIGINAL: source, **{c.name: c.data for c in timed}}
    rounds = time_candidates(finalists, feeds, threads=st.threads, budget_ms=budget_ms, provider=st.provider,
                             sessions=sessions, stop=keeping(len(finalists)), twins=twins, timers=tm,
                             session_stop=keeping(len(finalists), sessions=True))
    loaded = set(sessions)
    for c in timed:  # what onnxruntime runs for each: leaders() confirms a lean one first when the rounds tie
        c.kernels = getattr(sessions.get(c.name), "kernels", 0)
    sessions.clear()
    timed = _untwin(port, timed, twins)
    if rounds.get(pf.ORIGINAL) and not timed:
        return False  # every candidate runs as the original: nothing to time against it
    if loaded == {pf.ORIGINAL} and timed and not deadline.expired() and not stop_requested():
        need = confirm_reserve_s(source, biggest, budget_ms / 1000.0, decide.MIN_GROUPS, session_s_per_mb())
        port.notes.append(f"timing: skipped: {deadline.remaining():.0f} s were left, too few to load a candidate "
                          f"and confirm it (about {need:.0f} s)")
        return True
    if not rounds.get(pf.ORIGINAL) or len(rounds) < 2:
        return _cut(port, st)
    if len(rounds) < len(timed) + 1:
        port.notes.append("timing: " + ", ".join(c.name for c in timed if c.name not in rounds)
                          + ": not timed, the budget left no time to load them")
    pf.record_timing(port, rounds)
    if st.keep_slower:
        return len(rounds[pf.ORIGINAL]) < 5
    cut = len(rounds[pf.ORIGINAL]) < 5
    leaders = pf.leaders(port, CONFIRM, LEAN_SHARE)
    side_s = max(run_s, budget_ms / 1000.0)
    for i, c in enumerate(leaders):  # fresh session groups with an A/A control: the pick's luck does not count
        original, candidate = decide.session_makers(source, c.data, feeds, threads=st.threads, provider=st.provider,
                                                    timers=tm)
        later_s = sum(confirm_reserve_s(source, d.data, side_s, decide.MIN_GROUPS, session_s_per_mb())
                      for d in leaders[i + 1:])
        v = decide.confirm(original, candidate, budget_ms=budget_ms, min_speedup=st.min_speedup,
                           alpha=decide.ALPHA / len(leaders), clock=tm.clock, stop=_leaving(stop, later_s),
                           second=_second_look(stop, source, c.data, side_s, later_s))
        rounds_ = v.measured
        pf.record_confirmation(port, c, v)
        if v.look == 2:
            port.notes.append(f"{c.name}: looked at again after {decide.GROUPS} more session groups ({v.reason})")
        if rounds_.groups < decide.GROUPS:  # the deadline cut it (a group starts only while one fits)
            cut = True
            if rounds_.groups < decide.MIN_GROUPS:
                port.notes.append(f"{c.name}: confirmation cut to {rounds_.groups} session group(s) by the budget; "
                                  "not confirmed")
            if not v.faster and (later_s == 0.0 or stop(later_s)):  # no time for the next leader's
                break
        if v.faster and st.guard is not None and _slower_elsewhere(port, c, source, st, budget_ms, tm, stop):
            continue
        if v.faster and not _faster_later(c, leaders[i + 1:]):
            break  # else a lean leader went first: the fastest is confirmed too, and choose() takes the better
    return cut


def _leaving(stop: Callable[[float], bool], later_s: float) -> Callable[[float], bool]:
    """``stop`` for a confirmation's session groups that, once :data:`~graphsub.optimize.decide.MIN_GROUPS` of them
    are done, starts another only while ``later_s`` more seconds are left (the later leaders' confirmations at
    their minimum): the first leader's extra groups do not take the time the second needs to decide anything. When
    ``later_s`` is not left anyway, nothing is kept for it (ConvBERT's default, 2026-12-01: its first leader stopped
    at three groups and the second was not confirmed).

    >>> check = _leaving(lambda need_s: need_s > 6.0, 4.0)  # 6 s left (the deadline does not move here)
    >>> [check(3.0) for _ in range(4)]  # groups 0-2: 3 s each; group 3: 3 + 4 s
    [False, False, False, True]
    >>> check = _leaving(lambda need_s: need_s > 6.0, 7.0)  # the later leader's 7 s are not left: group 3 runs
    >>> [check(3.0) for _ in range(4)]
    [False, False, False, False]
    """
    calls = 0

    def check(need_s: float) -> bool:
        nonlocal calls
        calls += 1  # the k-th call comes before group k - 1
        keep = calls > decide.MIN_GROUPS and later_s > 0.0 and not stop(later_s)
        return stop(need_s + (later_s if keep else 0.0))

    return check


def _second_look(stop: Callable[[float], bool], source: bytes | str, leader: bytes | str, side_s: float,
                 later_s: float) -> Callable[[float], bool] | None:
    """The ``stop`` of a leader's second look (:func:`graphsub.optimize.decide.confirm`), or None when the time left
    now does not hold the first look's :data:`~graphsub.optimize.decide.GROUPS` session groups,
    :data:`~graphsub.optimize.decide.MIN_GROUPS` more and the later leaders' minimum (``later_s``): the plan is made
    before anything is measured, so that the first look is decided at its full ``alpha`` where no second can follow.
    Its groups leave ``later_s`` too."""
    both_s = confirm_reserve_s(source, leader, side_s, decide.GROUPS + decide.MIN_GROUPS, session_s_per_mb())
    if stop(both_s + later_s):
        return None
    return lambda need_s: stop(need_s + later_s)


def _faster_later(c: Any, later: Sequence[Any]) -> bool:
    """Whether a leader after ``c`` led the side-by-side rounds ahead of it (``c`` went first for its fewer kernels:
    :func:`graphsub.optimize.portfolio.leaders`)."""
    return any((d.speedup or 0.0) > (c.speedup or 0.0) for d in later)


def _screen_alone(port: Any, timed: list[Any], models: Mapping[str, bytes | str], feeds: dict[str, Any],
                  st: _Settings, budget_ms: float, tm: Timers, stop: Callable[[float], bool], fit: int
                  ) -> list[Any] | None:
    """The screening of a model whose sessions do not all fit in memory (``fit`` of them do): each model timed on its
    own, one session alive at a time (three short rounds, the best kept: sessions differ by a few percent, so this
    only ranks), and the fastest ``fit - 1`` candidates returned for the side-by-side rounds (None: the original
    could not be timed)."""
    from graphsub.optimize import portfolio as pf

    best: dict[str, float] = {}
    seen: dict[str, str] = {}  # onnxruntime's graph (its signature) -> the first model it was seen for
    twins: dict[str, str] = {}
    for name, data in models.items():
        session: dict[str, Any] = {}  # this model's only: gone before the next one's is made
        alone = time_candidates({name: data}, feeds, threads=st.threads, budget_ms=budget_ms / 2, rounds=3,
                                provider=st.provider, sessions=session, stop=stop, twins={}, timers=tm)
        sig = getattr(session.get(name), "signature", "")
        session.clear()
        if sig and sig in seen:
            twins[name] = seen[sig]  # a tie by construction: not ranked, not timed
            continue
        if sig:
            seen[sig] = name
        if alone.get(name):
            best[name] = min(alone[name])
        elif name == pf.ORIGINAL:
            return None
    timed = _untwin(port, timed, twins)
    for c in timed:
        c.screen_ratio = best[pf.ORIGINAL] / best[c.name] if c.name in best else None
    ranked = sorted((c for c in timed if c.name in best), key=lambda c: -(c.screen_ratio or 0.0))
    keep = ranked[:max(1, fit - 1)]
    port.notes.append(f"timing: {fit} session(s) of this model fit in memory: the {len(models)} models were screened "
                      f"one at a time, and {', '.join(c.name for c in keep) or 'none'} timed against the original")
    return keep


def _slower_elsewhere(port: Any, c: Any, source: bytes | str, st: _Settings, budget_ms: float, tm: Timers,
                      stop: Callable[[float], bool]) -> bool:
    """Whether confirmed candidate ``c`` is slower than the original on ``st.guard``'s inputs (a decoder's step on a
    long cache), measured and decided as a confirmation is; then its confirmation becomes that verdict (it is not
    kept) and a note says so."""
    from graphsub.optimize import portfolio as pf

    assert st.guard is not None
    feeds, where = st.guard
    original, candidate = decide.session_makers(source, c.data, feeds, threads=st.threads, provider=st.provider,
                                                timers=tm)
    m = decide.measure(original, candidate, budget_ms=budget_ms, clock=tm.clock, stop=stop)
    v = decide.verdict(m, min_speedup=st.min_speedup)
    if not v.slower:
        return False
    port.notes.append(f"{c.name}: faster at the timed sizes but slower {where} ({v.reason}): not kept")
    pf.record_confirmation(port, c, v)
    return True


def confirm_each(port: Any, timed: list[Any], target: Target, st: _Settings, deadline: Deadline = NO_DEADLINE,
                 timers: Timers | None = None) -> bool:
    """The timing step for a target that times candidates its own way (:attr:`~graphsub.optimize.target.Target.
    own_timing`: a PyTorch module's SGD steps, where no cheap side-by-side race in ONNX Runtime says what runs faster
    there): the first :data:`CONFIRM` verified candidates ``timed``, in the portfolio's order (the main search's result
    first), are each measured against the original in the target's session groups with an A/A control
    (:func:`graphsub.optimize.decide.measure` on :meth:`~graphsub.optimize.target.Target.makers`) and decided at
    ``alpha / k`` (``k`` candidates: the portfolio is declared faster at most ``alpha`` of the time when none is).
    No group starts after ``deadline``; returns whether it cut a measurement short (one cut below
    :data:`~graphsub.optimize.decide.MIN_GROUPS` groups decides nothing)."""
    from graphsub.optimize import portfolio as pf

    tm = resolve_timers(timers)
    chosen = timed[:CONFIRM]
    cut = False
    for c in chosen:
        original, candidate = target.makers(c)
        m = decide.measure(original, candidate, budget_ms=target.budget_ms, groups=target.groups,
                           rounds_per_group=target.rounds, clock=tm.clock,
                           stop=lambda need: deadline.expired() or deadline.remaining() < need)
        v = decide.verdict(m, min_speedup=st.min_speedup, alpha=target.alpha / len(chosen))
        c.speedup = v.speedup
        pf.record_confirmation(port, c, v)
        if m.groups < target.groups:
            cut = True
            port.notes.append(f"{c.name}: measured in {m.groups} of {target.groups} session group(s), the budget "
                              "left no time for more")
    if len(timed) > len(chosen):
        port.notes.append("timing: " + ", ".join(c.name for c in timed[len(chosen):]) + f": not timed (the first "
                          f"{CONFIRM} verified candidates are)")
    return cut


def _lean(out: list[Any], sessions: Mapping[str, Any]) -> list[Any]:
    """Of the candidates the screening left ``out``, the :data:`LEAN_PICKS` whose graphs onnxruntime runs with the
    fewest kernels, when those are at most :data:`LEAN_SHARE` of the original's: finalists the screening's noise
    cannot drop.  (Measured: in suite26_cnn the screening ranked ConvNeXt-T's channels-first candidate, 1.20x faster
    in longer A/B runs and 269 -> 171 kernels, fourth of seven at 1.02x, behind three candidates no faster than the
    original.  In suite29_tf it dropped distilbert.dynamo's onnxscript+spelling, 43 kernels against the original's
    ~150, at 1.07x against leaders at 1.17-1.27x; its twin on bert.dynamo was kept there and confirmed at 1.29x,
    while onnxscript alone -- the one lean place then -- took the place; both suite runs of 2026-11-27 are in git
    history.)"""
    from graphsub.optimize import portfolio as pf

    base = getattr(sessions.get(pf.ORIGINAL), "kernels", 0)
    counts = {c.name: getattr(sessions.get(c.name), "kernels", 0) for c in out}
    lean = [c for c in out if base and 0 < counts[c.name] <= LEAN_SHARE * base]
    return sorted(lean, key=lambda c: counts[c.name])[:LEAN_PICKS]


def _untwin(port: Any, timed: list[Any], twins: Mapping[str, str]) -> list[Any]:
    """``timed`` without the candidates onnxruntime runs exactly as the original or an earlier candidate (their
    ``runs_as`` set, a note each, once): a tie by construction is not timed, so noise cannot pass it off as a gain."""
    for c in timed:
        if c.name in twins and not c.runs_as:
            c.runs_as = twins[c.name]
            port.notes.append(f"timing: {c.name} not timed: onnxruntime runs it exactly as {c.runs_as} (the same "
                              "graph after its own optimizations)")
    return [c for c in timed if not c.runs_as]


def _cut(port: Any, st: _Settings) -> bool:
    """The deadline left no time for a single round: nothing is chosen but the original (or with keep_slower, the
    fastest timed candidate, of which there is none)."""
    port.notes.append("timing: skipped: no time left in the budget" if not stop_requested()
                      else "timing: skipped: interrupted")
    return True


__all__ = ["CONFIRM", "FINALISTS", "LEAN_PICKS", "LEAN_SHARE", "MIN_ROUND_MS", "SESSION_MEMORY_FACTOR", "SLOW_MS",
           "confirm_each", "load_order", "sessions_that_fit", "time_portfolio"]
