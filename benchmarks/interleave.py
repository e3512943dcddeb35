"""Interleaved rounds: the candidates of one comparison take turns within each round.

A round gives every candidate one turn, in an order shuffled from round to round (the
same shuffles in every run, from the comparison's seed). A turn is one untimed call,
then ``BATCHES`` batches of ``calls`` timed calls back to back (``calls``: enough for
``batch_s`` of work), and the turn's time per call is its fastest batch's: the untimed
call pays for the state the last candidate left (caches, torch's threads asleep after
NumPy's), which is no property of this one, and of three batches at least one is
usually clear of a burst of other work on a busy machine. A call slower than ``SLOW_S``
is timed once per turn, without an untimed call: its share of that state is small, and
a longer turn would starve the others of rounds.

The ratio of two candidates' times *in the same round* cancels whatever drifts slower
than a round on a shared machine; the median of those ratios over the rounds, with its
95% interval (``ratios.summarize``), is the result. Rounds are added until the interval of
every ratio waited on (each baseline's, the best native call's) lies within ±10% of its
median, or the comparison's time is spent. Those added rounds time portops, the copies and
the candidates still waited on: not a ratio already tight, nor a slow candidate's (a call
of ``SLOW_S`` or more) whose interval lies wholly beyond 2x (``ratios.DECIDED``: which is
faster is settled, and a seed method that takes seconds per call would spend the budget
on a digit). Their times are None in the rounds they sat out.

A headline comparison is visited again after every benchmark of the run has run
(``revisit``, called by the conftest): a few more rounds, later, so that its rounds span
the run and a state of the machine that lasts a minute (another program's burst, memory
the system is reclaiming) widens its interval instead of moving its median unseen; a
ratio still noisy then gets its further rounds in further visits, not all at once.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.ratios import Ratio, median, per_round

BATCH_S = 1e-3  # timed work per batch, at least: calls of 20 µs run 50 times
BATCHES = 3  # per turn; the fastest counts
SLOW_S = 0.1  # a call at least this long is timed once per turn, without an untimed one
MAX_CALLS = 10_000
MAX_ROUNDS = 400
KINDS = ("default", "native", "baseline", "copy")  # portops' default first


@dataclass
class Candidate:
    """One way to compute the comparison's result (or, ``kind="copy"``, a copy of bytes).

    kind: ``default`` (portops' default call, exactly one per comparison), ``native`` (a
    call of the same library), ``baseline`` (a seed's method, a peer's loop, another
    implementation) or ``copy`` (``nbytes`` read and written: the bandwidth behind the
    hardware limit).
    """

    name: str
    kind: str
    fn: Callable[[], Any]
    nbytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")


class Inputs:
    """A comparison's inputs: the dict of arrays `build` returns, read by the candidates
    as ``inputs["x"]`` at each call. ``renew`` builds them again (new memory, the same
    values) for a later visit, and ``release`` drops them in between: where the allocator
    puts them (which cache sets their lines share) changes a method's time by up to 1.4x
    from one allocation to the next, so the visits sample it instead of one allocation
    deciding the run."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self.build = build
        self.data: dict[str, Any] | None = build()

    def __getitem__(self, name: str) -> Any:
        data = self.data
        if data is None:
            raise RuntimeError("inputs released: renew() them first")
        return data[name]

    def renew(self) -> None:
        self.data = None  # the old arrays go first: their memory may be reused
        self.data = self.build()

    def release(self) -> None:
        self.data = None


@dataclass
class Interleaved:
    """The rounds of one comparison; ``run`` adds rounds, the properties read them."""

    candidates: Sequence[Candidate]
    seed: str
    batch_s: float = BATCH_S
    times: dict[str, list[float | None]] = field(default_factory=dict)  # per call, per round
    calls: dict[str, int] = field(default_factory=dict)
    single: dict[str, float] = field(default_factory=dict)  # one call, at calibration
    seconds: float = 0.0  # wall time of the rounds and the calibration
    visits: list[int] = field(default_factory=list)  # the first round of each visit

    def __post_init__(self) -> None:
        names = [c.name for c in self.candidates]
        defaults = [c.name for c in self.candidates if c.kind == "default"]
        if len(set(names)) != len(names) or len(defaults) != 1:
            raise ValueError(f"needs unique names and one default candidate, got {names}")
        self.portops = defaults[0]
        self.times = {n: [] for n in names}
        self._order = list(names)
        self._shuffle = random.Random(self.seed).shuffle  # the same orders in every run
        self._by_name = {c.name: c for c in self.candidates}

    @property
    def rounds(self) -> int:
        return len(self.times[self.portops])

    def calibrate(self) -> None:
        """A first, untimed call of each (imports, plans, caches, page faults), then a
        timed second call sets its calls per turn: a first call slowed by set-up alone
        must not make a fast call count as slow (timed once per turn, cold)."""
        start = time.perf_counter()
        for c in self.candidates:
            c.fn()
            t = _timed(c.fn, 1)
            self.single[c.name] = t
            self.calls[c.name] = max(1, min(MAX_CALLS, math.ceil(self.batch_s / max(t, 1e-9))))
        self.seconds += time.perf_counter() - start

    def run_round(self, names: Iterable[str] | None = None) -> None:
        """A round of every candidate, or of `names` (the others get None)."""
        start, timed = time.perf_counter(), set(self.times if names is None else names)
        self._shuffle(self._order)
        for name in self._order:
            fn, calls, slow = self._by_name[name].fn, self.calls[name], self.single[name] >= SLOW_S
            self.times[name].append(_turn(fn, calls, slow=slow) if name in timed else None)
        self.seconds += time.perf_counter() - start

    def run(self, min_rounds: int, seconds: float, max_rounds: int = MAX_ROUNDS) -> None:
        """Rounds until `min_rounds` have run and every ratio is tight, or `seconds` of
        rounds (after the first `min_rounds`) are spent, or `max_rounds` have run."""
        if not self.calls:
            self.calibrate()
            self.visits.append(0)
        while self.rounds < min_rounds:
            self.run_round()
        deadline = time.perf_counter() + seconds
        while self.rounds < max_rounds and time.perf_counter() < deadline:
            waiting = self.waiting()
            if not waiting:
                break
            self.run_round(self._refining(waiting))

    def waiting(self) -> list[str]:
        """The compared candidates whose ratio is still noisy, but for a slow one settled."""
        return [n for n in self.noisy() if not self._settled(n)]

    def _refining(self, waiting: list[str]) -> list[str]:
        """A refining round's candidates: portops, the copies and the ratios `waiting`."""
        copies = [c.name for c in self.candidates if c.kind == "copy"]
        return [self.portops, *copies, *waiting]

    def revisit(self, rounds: int, *, waiting_only: bool = False) -> None:
        """A later visit: `rounds` rounds, the first of every candidate, the others of all
        but a slow one settled (``_settled``: one round a visit keeps it sampled); or with
        `waiting_only` of those a refining round times. The ratios are then read over
        every visit's rounds."""
        self.visits.append(self.rounds)
        unsettled = [n for n in self.times if n == self.portops or not self._settled(n)]
        for i in range(rounds):
            if waiting_only:
                self.run_round(self._refining(self.waiting()))
            else:
                self.run_round(None if i == 0 else unsettled)

    def _settled(self, name: str) -> bool:
        """A slow candidate's ratio decided beyond ``DECIDED``: more rounds would only
        spend the budget on a digit (a fast one's are cheap: they go on to a tight ratio)."""
        return self.single[name] >= SLOW_S and self.speedup(name).decided

    def speedup(self, name: str) -> Ratio:
        """`name`'s time over portops' in each round: above 1, portops is faster."""
        return per_round(self.times[name], self.times[self.portops])

    def compared(self) -> list[str]:
        """The ratios that are results: every baseline and the best native call (the
        native with the lowest median so far); other natives are reported, not waited on."""
        natives = [c.name for c in self.candidates if c.kind == "native"]
        best = [min(natives, key=self.median)] if natives else []
        return [c.name for c in self.candidates if c.kind == "baseline"] + best

    def noisy(self, names: Iterable[str] | None = None) -> list[str]:
        """The compared candidates whose speedup's interval is still wider than ±10%."""
        return [n for n in (names or self.compared()) if self.speedup(n).noisy]

    def median(self, name: str) -> float:
        return median(self.times[name])


def _timed(fn: Callable[[], Any], calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls, without the garbage collector
    (a collection in one candidate's turn would be charged to it alone)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls
    finally:
        if enabled:
            gc.enable()


def _turn(fn: Callable[[], Any], calls: int, *, slow: bool) -> float:
    """A turn's seconds per call (see the module docstring)."""
    if slow:
        return _timed(fn, calls)
    fn()
    return min(_timed(fn, calls) for _ in range(BATCHES))
