"""The benchmarks' fixtures, shared options and the run's bookkeeping.

A benchmark compares portops with the other ways to compute the same thing, in
interleaved rounds (``benchmarks/interleave.py``)::

    compare([Candidate("portops", "default", f), Candidate("bmm", "native", g), ...],
            op="vecdot", case="500x500 float32", backend="torch", label="forward",
            headline=True, nbytes=...)

It is one pytest-benchmark benchmark: its stats are portops' seconds per call, a value
per round; every candidate's times go to ``extra_info`` (``candidates``), with what the
report needs (``benchmarks/report.py``). ``bench(fn, op=..., kind=..., name=...)`` times
a single candidate on its own, for files that need no comparison.

Options: ``--quick`` (tiny sizes, two rounds: CI), ``--full`` (the benchmarks marked
``full`` besides the headline ones), ``--sweep`` (the whole shape sweep),
``--bench-threads`` (``auto``: every library runs on the cores that were not busy when
the run started, see ``choose_threads``; ``all``; or a number),
``--bench-backends`` / ``--bench-require`` (a selection; backends that must run) and
``--bench-budget SECONDS``: the time the comparisons share for rounds beyond their
first ``MIN_ROUNDS``, each taking an equal share of what is left (``recheck``: a
callable of the rounds that returns how many more to run, a sweep point's miss check).

A headline comparison is visited again once every benchmark has run: ``REVISITS`` more
visits of ``REVISIT_ROUNDS`` rounds each, in turn over the headline comparisons, so that
its rounds span the run (``Interleaved.revisit``); then, for up to ``REVISIT_S`` seconds,
further visits of the comparisons with a ratio still noisy, in turn, until it is tight.
These rounds come after the budget. ``compare(..., inputs=Inputs(build))``: the
candidates read their arrays from ``inputs``, built anew for each visit.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from benchmarks.interleave import BATCH_S, KINDS, Candidate, Inputs, Interleaved

NOT_SELECTED = "not selected by --bench-backends"
MIN_ROUNDS = 5  # per comparison, whatever the budget
EXTRA_S = 20.0  # rounds beyond the minimum, at most, per comparison without a budget
# With a budget, at least this: a cheap comparison late in a run whose budget is spent
# still gets the dozens of rounds a second gives it (an expensive one, one round more).
FLOOR_S = 1.0
REVISITS = 2  # later visits of each headline comparison, after every benchmark has run
REVISIT_ROUNDS = 2  # rounds per later visit (one under --quick)
REVISIT_S = 45.0  # for the further visits of the noisy ones (none under --quick)


def pytest_addoption(parser: pytest.Parser) -> None:
    add = parser.getgroup("portops benchmarks").addoption
    add("--quick", action="store_true", help="tiny sizes and two rounds, for CI")
    add("--full", action="store_true", help="every benchmark, not only the headline ones")
    add("--sweep", action="store_true", help="the whole shape sweep of every operation")
    add("--bench-backends", help="backends to run, e.g. numpy,torch,torch-cuda,cupy")
    add("--bench-require", metavar="BACKENDS", help="fail when one of these is skipped")
    add("--bench-budget", type=float, default=0.0, help="seconds the comparisons share")
    add(
        "--bench-threads",
        default="auto",
        help="threads of torch, the BLAS, portops and Dask: auto (the cores not busy at the "
        "start), all, or a number",
    )


def _quick() -> bool:
    """Whether this is a --quick run (tiny sizes, few rounds: CI)."""
    return os.environ.get("PORTOPS_BENCH_QUICK") == "1"


def targets(text: str | None) -> frozenset[tuple[str, str]] | None:
    """``"numpy,torch-cuda"`` -> ``{("numpy", "cpu"), ("torch", "cuda")}``; None for all."""
    if not text:
        return None
    pairs = (t.partition("-") for t in text.lower().replace(" ", "").split(",") if t)
    return frozenset((b, d or ("cuda" if b == "cupy" else "cpu")) for b, _, d in pairs)


def label(target: tuple[str, str]) -> str:
    """``("torch", "cuda")`` -> ``"torch CUDA"``; CuPy is named without its device."""
    return target[0] if target[0] == "cupy" else f"{target[0]} {target[1].upper()}"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def busy_cores(seconds: float = 1.0) -> float:
    """Cores' worth of work that others run on this machine now: the share of the CPUs'
    time not idle over `seconds` (/proc/stat; the load average where there is none)."""

    def snapshot() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]  # ... idle, iowait, ..., steal
        return sum(ticks), ticks[3] + ticks[4]

    try:
        total, idle = snapshot()
        time.sleep(seconds)
        total2, idle2 = snapshot()
    except (OSError, ValueError, IndexError):
        load = load_average()
        return load[0] if load else 0.0
    return (1 - (idle2 - idle) / max(1, total2 - total)) * (os.cpu_count() or 1)


def choose_threads(option: str) -> tuple[int, float | None]:
    """(threads, busy cores measured): ``auto`` leaves out the cores others keep busy.

    On a 2-core machine with one other CPU-bound process, a library that runs two threads
    waits at each parallel region for the one that is descheduled, a scheduler slice
    (about 12 ms) at a time: torch's (a*b).sum of two 500x500 tensors takes 24 ms instead
    of 0.13 ms. Such a run times the scheduler, not the methods; on the free cores it
    times the methods, as a quiet machine with that many cores would."""
    usable = usable_cores()
    if option == "all":
        return usable, None
    if option != "auto":
        return max(1, min(usable, int(option))), None
    busy = busy_cores()
    return max(1, min(usable, round((os.cpu_count() or 1) - busy))), round(busy, 2)


def set_threads(threads: int) -> str:
    """Every loaded library's threads to `threads`, and the variables that the BLAS read
    when they load; says how NumPy's BLAS was set. Called again before each benchmark, for
    the libraries its module loaded."""
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)
    blas = "environment" if "numpy" not in sys.modules else "unset (NumPy was loaded)"
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
        blas = "threadpoolctl"
    except ImportError:
        pass
    loaded = sys.modules.get
    if loaded("portops") is not None:
        loaded("portops").set_num_threads(threads)  # type: ignore[union-attr]
    torch = loaded("torch")
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if loaded("dask") is not None:
        loaded("dask").config.set(num_workers=threads)  # type: ignore[union-attr]
    return blas


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):  # not on Windows
        return None


class State:
    """A plugin: the selection, the budget, the progress, what ran and what was skipped."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.selection = config, targets(config.getoption("bench_backends"))
        self.required = targets(config.getoption("bench_require")) or frozenset()
        self.start, budget = time.monotonic(), config.getoption("bench_budget")
        self.deadline = self.start + budget if budget > 0 else None
        self.load_before = load_average()
        option = "all" if _quick() else None
        self.threads, self.busy = choose_threads(option or config.getoption("bench_threads"))
        self.blas_threads = set_threads(self.threads)
        self.total = self.done = 0
        self.comparisons: set[str] = set()  # node ids of the comparisons not yet run
        self.ran: set[tuple[str, str]] = set()
        self.skips: Counter[tuple[str, str]] = Counter()  # (file, reason) -> count
        # (rounds, benchmark fixture, inputs built anew for each later visit)
        self.headline: list[tuple[Interleaved, Any, Inputs | None]] = []

    def time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def share(self) -> float | None:
        """A comparison's share of the budget left; None without a budget."""
        left = self.time_left()
        return None if left is None else left / max(1, len(self.comparisons))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self.comparisons = {i.nodeid for i in session.items if "compare" in i.fixturenames}

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        elapsed, budget = time.monotonic() - self.start, self.time_left()
        left = elapsed / self.done * (self.total - self.done) if self.done else budget
        left = left if budget is None or left is None else min(left, budget)
        eta = "estimating" if left is None else f"about {left:.0f} s left"
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[{self.done + 1}/{self.total}, {eta}] {nodeid}")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.done += 1
        self.comparisons.discard(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ").strip()
            if not reason.startswith(NOT_SELECTED):
                self.skips[(report.nodeid.partition("::")[0], reason)] += 1

    def revisit(self) -> None:
        """The headline comparisons' later visits, in turn; then their records again."""
        if not self.headline:
            return
        quick = _quick()
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write("\n")  # after the progress dots
        for visit in range(REVISITS):
            if reporter is not None:
                reporter.write_line(f"[revisit {visit + 1}/{REVISITS}] headline comparisons")
            for rounds, _, inputs in self.headline:
                _visit(rounds, inputs, 1 if quick else REVISIT_ROUNDS, self.threads)
        deadline = time.monotonic() + (0.0 if quick else REVISIT_S)
        while time.monotonic() < deadline and (
            noisy := [(r, i) for r, _, i in self.headline if r.waiting()]
        ):
            if reporter is not None:
                reporter.write_line(f"[revisit] the headline comparisons still noisy: {len(noisy)}")
            for rounds, inputs in noisy:
                if time.monotonic() < deadline:
                    _visit(rounds, inputs, REVISIT_ROUNDS, self.threads, waiting_only=True)
        for rounds, benchmark, _ in self.headline:
            _record(benchmark, rounds.times[rounds.portops], benchmark.stats)
            benchmark.extra_info.update(
                rounds=rounds.rounds, visits=rounds.visits, seconds=round(rounds.seconds, 3)
            )

    def status(self) -> dict[str, Any]:
        """The run's mode, load averages, length and skips (``unavailable``), for the JSON."""
        skipped = [{"file": f, "reason": r, "count": n} for (f, r), n in self.skips.items()]
        option = self.config.getoption
        return {
            "quick": _quick(),
            "full": bool(option("full")),
            "sweep": bool(option("sweep")),
            "budget_s": option("bench_budget") or None,
            "load_before": self.load_before,
            "threads": self.threads,
            "cores_usable": usable_cores(),
            "busy_cores_at_start": self.busy,
            "blas_threads": self.blas_threads,
            "load_after": load_average(),
            "seconds": round(time.monotonic() - self.start, 1),
            "unavailable": sorted(skipped, key=lambda u: (u["file"], u["reason"])),
        }

    def failed_required(self) -> list[str]:
        return [label(t) for t in sorted(self.required) if t not in self.ran]


STATE = pytest.StashKey[State]()


def _visit(
    rounds: Interleaved, inputs: Inputs | None, count: int, threads: int, **options: Any
) -> None:
    """A later visit of `count` rounds, on inputs built anew, released after it."""
    set_threads(threads)
    if inputs is not None:
        inputs.renew()
    try:
        rounds.revisit(count, **options)
    finally:
        if inputs is not None:
            inputs.release()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    options = {"quick": "PORTOPS_BENCH_QUICK", "sweep": "PORTOPS_BENCH_SWEEP"}
    for option, variable in options.items():
        if config.getoption(option, False):
            os.environ[variable] = "1"
    config.addinivalue_line("markers", "full: runs under --full (and --quick) only")
    config.stash[STATE] = State(config)
    config.pluginmanager.register(config.stash[STATE], "portops-bench-state")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --full, the benchmarks marked ``full`` are left out (--quick runs them)."""
    if config.getoption("full") or config.getoption("quick"):
        return
    keep = [i for i in items if i.get_closest_marker("full") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def _selected(state: State, target: tuple[str | None, str | None]) -> None:
    if state.selection is not None and target not in state.selection:
        pytest.skip(f"{NOT_SELECTED}: {label(target)}")  # type: ignore[arg-type]


def _record(benchmark: Any, seconds_per_call: Sequence[float | None], metadata: Any = None) -> None:
    """Hand portops' per-call times, a value per round, to pytest-benchmark as its stats
    (its JSON, its table and ``--benchmark-compare`` then show them); `metadata`: the
    stats recorded before, filled anew. The rounds were timed by ``interleave``, so
    pytest-benchmark's own timing loop is not used."""
    if metadata is None:
        metadata = benchmark._make_stats(1)
    metadata.stats = type(metadata.stats)()  # its summaries are cached properties
    for t in seconds_per_call:
        if t is not None:
            metadata.stats.update(t)
    benchmark._mode = "interleaved rounds (benchmarks/interleave.py)"


@pytest.fixture
def compare(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """Time a comparison (see the module docstring); returns its ``Interleaved`` rounds
    (None where pytest-benchmark is disabled: each candidate then runs once)."""
    state = request.config.stash[STATE]
    quick = _quick()

    def run(
        candidates: Sequence[Candidate],
        *,
        op: str,
        case: str,
        backend: str,
        device: str = "cpu",
        label: str | None = None,
        headline: bool = False,
        nbytes: int = 0,
        min_rounds: int = MIN_ROUNDS,
        extra_s: float = EXTRA_S,
        recheck: Callable[[Interleaved], int] | None = None,
        inputs: Inputs | None = None,
        **info: Any,
    ) -> Interleaved | None:
        _selected(state, (backend, device))
        set_threads(state.threads)
        if benchmark.disabled:
            for c in candidates:
                c.fn()
            return None
        seed = f"{op} {case} {backend} {device} {label}"
        rounds = Interleaved(candidates, seed=seed, batch_s=0.0 if quick else BATCH_S)
        share = state.share()
        extra = 0.0 if quick else extra_s if share is None else min(extra_s, max(FLOOR_S, share))
        before = load_average()
        rounds.run(2 if quick else min_rounds, extra)
        more = recheck(rounds) if recheck is not None and not quick else 0
        if more:  # rounds again, all of which count (a sweep point that missed, say)
            rounds.run(rounds.rounds + more, 0.0)
            info["rechecked"] = more
        benchmark.group = f"{op} {case} {backend} {device}" + (f" {label}" if label else "")
        _record(benchmark, rounds.times[rounds.portops])  # after the group: its stats copy it
        benchmark.extra_info.update(
            op=op,
            case=case,
            label=label or case,
            backend=backend,
            device=device,
            headline=headline,
            nbytes=nbytes,  # what the operation must read and write
            portops=rounds.portops,
            rounds=rounds.rounds,
            visits=rounds.visits,
            seconds=round(rounds.seconds, 3),
            load=[before, load_average()],
            candidates={
                c.name: {
                    "kind": c.kind,
                    "calls": rounds.calls[c.name],
                    "nbytes": c.nbytes,
                    "times": rounds.times[c.name],
                }
                for c in candidates
            },
            **info,
        )
        if headline:
            state.headline.append((rounds, benchmark, inputs))
            if inputs is not None:
                inputs.release()  # until its next visit
        state.ran.add((backend, device))
        return rounds

    return run


@pytest.fixture
def bench(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """One candidate timed on its own (no comparison): ``bench(fn, op=, case=, backend=,
    device=, kind=, name=, rounds=, **extra_info)``; the report shows such entries in a
    table of their own, by group. Returns the fixture."""
    state = request.config.stash[STATE]

    def run(fn: Any, *, rounds: int = 10, iterations: int = 1, warmup: int = 1, **info: Any) -> Any:
        setup, target = info.pop("setup", None), (info.get("backend"), info.get("device"))
        needed = {"op", "case", "backend", "device", "name"}
        if needed - info.keys() or info.get("kind") not in KINDS:
            raise ValueError(f"bench() needs op, case, backend, device, name and kind in {KINDS}")
        _selected(state, target)
        benchmark.group = "{op} {case} {backend} {device}".format(**info)
        benchmark.extra_info.update(info)
        if _quick():
            rounds, warmup = min(rounds, 2), min(warmup, 1)
        benchmark.pedantic(
            fn, setup=setup, rounds=rounds, warmup_rounds=warmup, iterations=iterations
        )
        state.ran.add(target)
        return benchmark

    return run


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    torch = sys.modules.get("torch")  # imported by the benchmarks where it is installed
    gpu = torch is not None and torch.cuda.is_available() and torch.cuda.get_device_name(0)
    machine_info["gpu"] = gpu or None
    names = ("numpy", "torch", "cupy", "jax", "dask", "opt_einsum", "portops")
    versions = {n: getattr(sys.modules.get(n), "__version__", None) for n in names}
    machine_info["versions"] = {n: str(v) for n, v in versions.items() if v}
    if torch is not None:
        machine_info["torch_threads"] = torch.get_num_threads()
    if hasattr(os, "sched_getaffinity"):
        machine_info["cpus_usable"] = len(os.sched_getaffinity(0))


def pytest_benchmark_update_json(config: pytest.Config, output_json: dict) -> None:
    output_json["portops"] = config.stash[STATE].status()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """The later visits first, before pytest-benchmark (a wrapper too) writes its JSON."""
    state = session.config.stash[STATE]
    state.revisit()
    yield
    if state.failed_required():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state, write = config.stash[STATE], terminalreporter.write_line
    terminalreporter.section("portops: benchmarks skipped")
    for u in state.status()["unavailable"]:
        write(f"{u['file']}: {u['reason']} ({u['count']} skipped)")
    for who in state.failed_required():
        write(f"FAILED: {who} is required (--bench-require) but ran no benchmark", red=True)
