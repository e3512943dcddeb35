"""The helper every benchmark calls, the shared options, and the run's bookkeeping.

Each benchmark times its function with the ``bench`` fixture, saying what it is::

    bench(fn, op="vecdot", case="500x500", backend="torch", device="cpu",
          kind="default", name="portops", rounds=20, bytes=...)

``kind``: ``default`` (portops' default), ``native`` (a call of the same library),
``baseline`` (a seed's loop, a peer's code, another implementation) or ``copy`` (a copy of
the bytes). They and any other keyword go to ``extra_info``, for ``benchmarks/report.py``.
``--bench-budget SECONDS`` shares the time left among the benchmarks left, each running the
rounds that fit its share, so that a short run still covers every operation.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any

import pytest

from benchmarks.report import KINDS

NOT_SELECTED = "not selected by --bench-backends"


def pytest_addoption(parser: pytest.Parser) -> None:
    add = parser.getgroup("portops benchmarks").addoption
    add("--quick", action="store_true", help="tiny sizes and two rounds, for CI")
    add("--sweep", action="store_true", help="the whole shape sweep of every operation")
    add("--bench-backends", help="backends to run, e.g. numpy,torch,torch-cuda,cupy")
    add("--bench-require", metavar="BACKENDS", help="fail when one of these is skipped")
    add("--bench-budget", type=float, default=0.0, help="seconds to share among the benchmarks")


def targets(text: str | None) -> frozenset[tuple[str, str]] | None:
    """``"numpy,torch-cuda"`` -> ``{("numpy", "cpu"), ("torch", "cuda")}``; None for all."""
    if not text:
        return None
    pairs = (t.partition("-") for t in text.lower().replace(" ", "").split(",") if t)
    return frozenset((b, d or ("cuda" if b == "cupy" else "cpu")) for b, _, d in pairs)


def label(target: tuple[str, str]) -> str:
    """``("torch", "cuda")`` -> ``"torch CUDA"``; CuPy is named without its device."""
    return target[0] if target[0] == "cupy" else f"{target[0]} {target[1].upper()}"


class State:
    """A plugin: the selection, the budget, the progress, what ran and what was skipped."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.selection = config, targets(config.getoption("bench_backends"))
        self.required = targets(config.getoption("bench_require")) or frozenset()
        self.start, budget = time.monotonic(), config.getoption("bench_budget")
        self.deadline = self.start + budget if budget > 0 else None
        self.total = self.done = 0
        self.ran: set[tuple[str, str]] = set()
        self.skips: Counter[tuple[str, str]] = Counter()  # (file, reason) -> count

    def time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        elapsed, budget = time.monotonic() - self.start, self.time_left()
        left = elapsed / self.done * (self.total - self.done) if self.done else budget
        left = left if budget is None or left is None else min(left, budget)
        eta = "estimating" if left is None else f"about {left:.0f} s left"
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[{self.done + 1}/{self.total}, {eta}] {nodeid}")

    def pytest_runtest_logfinish(self) -> None:
        self.done += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ").strip()
            if not reason.startswith(NOT_SELECTED):
                self.skips[(report.nodeid.partition("::")[0], reason)] += 1

    def status(self) -> dict[str, Any]:
        """Whether the run was quick, and its skips (``unavailable``), for the JSON."""
        skipped = [{"file": f, "reason": r, "count": n} for (f, r), n in self.skips.items()]
        return {
            "quick": os.environ.get("PORTOPS_BENCH_QUICK") == "1",
            "unavailable": sorted(skipped, key=lambda u: (u["file"], u["reason"])),
        }

    def failed_required(self) -> list[str]:
        return [label(t) for t in sorted(self.required) if t not in self.ran]


STATE = pytest.StashKey[State]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    options = {"quick": "PORTOPS_BENCH_QUICK", "sweep": "PORTOPS_BENCH_SWEEP"}
    options["benchmark_disable_gc"] = "PORTOPS_BENCH_NO_GC"  # the sweep's own timings too
    for option, variable in options.items():
        if config.getoption(option, False):
            os.environ[variable] = "1"
    config.stash[STATE] = State(config)
    config.pluginmanager.register(config.stash[STATE], "portops-bench-state")


@pytest.fixture
def bench(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """The helper every benchmark calls (see the module docstring); it returns the fixture."""
    state = request.config.stash[STATE]

    def run(fn: Any, *, rounds: int = 10, iterations: int = 1, warmup: int = 1, **info: Any) -> Any:
        setup, target = info.pop("setup", None), (info.get("backend"), info.get("device"))
        needed = {"op", "case", "backend", "device", "name"}
        if needed - info.keys() or info.get("kind") not in KINDS:
            raise ValueError(
                f"bench() needs op, case, backend, device, name and kind in {(*KINDS,)}"
            )
        if state.selection is not None and target not in state.selection:
            pytest.skip(f"{NOT_SELECTED}: {label(target)}")
        benchmark.group = "{op} {case} {backend} {device}".format(**info)
        benchmark.extra_info.update(info)
        if os.environ.get("PORTOPS_BENCH_QUICK") == "1":
            rounds, warmup = min(rounds, 2), min(warmup, 1)
        if state.deadline is not None and rounds > 1:  # one untimed round: how many fit
            share, t0 = state.time_left() / max(1, state.total - state.done), time.perf_counter()
            for _ in range(iterations if share > 0 else 0):  # none left: one round, no more
                setup() if setup is not None else None
                fn()
            rounds = max(1, min(rounds, int(share / max(time.perf_counter() - t0, 1e-9))))
            warmup = 0  # that round warmed it up
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


def pytest_benchmark_update_json(config: pytest.Config, output_json: dict) -> None:
    output_json["portops"] = config.stash[STATE].status()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.stash[STATE].failed_required():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state, write = config.stash[STATE], terminalreporter.write_line
    terminalreporter.section("portops: benchmarks skipped")
    for u in state.status()["unavailable"]:
        write(f"{u['file']}: {u['reason']} ({u['count']} skipped)")
    for who in state.failed_required():
        write(f"FAILED: {who} is required (--bench-require) but ran no benchmark", red=True)
