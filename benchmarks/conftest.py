"""The helper every benchmark calls, the shared options, and the run's bookkeeping.

Every benchmark times its function with the ``bench`` fixture, saying what it is::

    bench(fn, op="vecdot", case="500x500", backend="torch", device="cpu",
          kind="default", name="portops", rounds=20, bytes=...)

``kind``: ``default`` (portops' default), ``native`` (a call of the same library),
``baseline`` (a seed's loop, a peer's code, another implementation) or ``copy`` (a copy of
the bytes). They and any other keyword go to ``extra_info``, for ``benchmarks/report.py``.

Options: ``--quick`` (tiny sizes, two rounds), ``--sweep`` (the whole shape sweep),
``--bench-backends numpy,torch-cuda``, ``--bench-budget SECONDS`` (the time left is shared
among the benchmarks left, each running the rounds that fit its share, at least one: a
short run still covers every operation), ``--bench-require numpy,torch`` (fail when one of
those had a skip or ran nothing). A line per benchmark names it with an estimate of the
time left. Skips go to the JSON's ``portops`` key, the GPU and versions to its
``machine_info``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any

import pytest

from benchmarks.report import count_text

KINDS = ("default", "native", "baseline", "copy")
BACKENDS = ("cupy", "torch", "jax", "dask", "array_api_strict", "numpy")
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
    if not text or text.strip().lower() == "all":
        return None
    pairs = (t.partition("-") for t in text.lower().replace(" ", "").split(",") if t)
    return frozenset((b, d or ("cuda" if b == "cupy" else "cpu")) for b, _, d in pairs)


def label(target: tuple[str, str]) -> str:
    """``("torch", "cuda")`` -> ``"torch CUDA"``; CuPy is named without its device."""
    return target[0] if target[0] == "cupy" else f"{target[0]} {target[1].upper()}"


def skip_target(nodeid: str, reason: str) -> tuple[str, str] | None:
    """The backend a skip is about: the first named in its parameters, its id, its reason."""
    params, reason = nodeid.partition("[")[2].lower(), reason.lower()
    found = (b for text in (params, nodeid.lower(), reason) for b in BACKENDS if b in text)
    backend = next(found, None)
    gpu = backend == "cupy" or "cuda" in params + reason or "gpu" in params + reason
    return None if backend is None else (backend, "cuda" if gpu else "cpu")


class State:
    """A plugin: the selection, the budget, the progress, what ran and what was skipped."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.selection = config, targets(config.getoption("bench_backends"))
        self.required = targets(config.getoption("bench_require")) or frozenset()
        self.start, budget = time.monotonic(), config.getoption("bench_budget")
        self.deadline = self.start + budget if budget > 0 else None
        self.total = self.done = 0
        self.ran: set[tuple[str, str]] = set()
        self.skips: Counter[tuple[str, str]] = Counter()  # (backend label, reason) -> count

    def selected(self, target: tuple[str, str] | None) -> bool:
        return self.selection is None or target is None or target in self.selection

    def time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Deselect the tests whose ``backend`` parameter names a backend not selected."""

        def wanted(item: Any) -> bool:
            backend = getattr(item, "callspec", None) and item.callspec.params.get("backend")
            name, _, device = str(backend).replace("_cuda", "-cuda").partition("-")
            devices = {d for b, d in self.selection or () if b == name}
            return name not in BACKENDS or device in devices or (not device and bool(devices))

        keep = [item for item in items if self.selection is None or wanted(item)]
        self.config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

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
            target = skip_target(report.nodeid, reason)
            if not reason.startswith(NOT_SELECTED) and self.selected(target):
                self.skips[(label(target) if target else report.nodeid, reason)] += 1

    def status(self) -> dict[str, Any]:
        """The skips and the required backends that ran nothing, for the JSON and report."""
        skipped = [{"backend": b, "reason": r, "count": n} for (b, r), n in self.skips.items()]
        named = {u["backend"] for u in skipped}
        missing = sorted(label(t) for t in self.required - self.ran if label(t) not in named)
        skipped += [{"backend": m, "reason": "no benchmark ran", "count": 0} for m in missing]
        return {
            "quick": os.environ.get("PORTOPS_BENCH_QUICK") == "1",
            "selected": self.selection and sorted(map("-".join, self.selection)),
            "ran": sorted(map(label, self.ran)),
            "unavailable": sorted(skipped, key=lambda u: (u["backend"], u["reason"])),
        }

    def failed_required(self) -> list[str]:
        skipped = {b for b, _ in self.skips}
        return [label(t) for t in sorted(self.required) if t not in self.ran or label(t) in skipped]


STATE = pytest.StashKey[State]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for option, variable in (("quick", "PORTOPS_BENCH_QUICK"), ("sweep", "PORTOPS_BENCH_SWEEP")):
        if config.getoption(option):
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
            raise ValueError(f"bench() needs op, case, backend, device, name and kind in {KINDS}")
        if not state.selected(target):
            pytest.skip(f"{NOT_SELECTED}: {label(target)}")
        benchmark.group = "{op} {case} {backend} {device}".format(**info)
        benchmark.extra_info.update(info)
        if os.environ.get("PORTOPS_BENCH_QUICK") == "1":
            rounds, warmup = min(rounds, 2), min(warmup, 1)
        if state.deadline is not None and rounds > 1:  # an untimed round: how many fit
            share = state.time_left() / max(1, state.total - state.done)
            t0 = time.perf_counter()
            setup() if setup is not None else None
            for _ in range(iterations):
                fn()
            rounds = max(1, min(rounds, int(share / max(time.perf_counter() - t0, 1e-9))))
            warmup = min(warmup, 1) if rounds > 1 else 0
        benchmark.pedantic(
            fn, setup=setup, rounds=rounds, iterations=iterations, warmup_rounds=warmup
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
    terminalreporter.section("portops: backends that could not run")
    for u in state.status()["unavailable"]:
        write(f"{u['backend']}: {u['reason']} ({count_text(u['count'])})")
    for who in state.failed_required():
        write(f"FAILED: {who} is required (--bench-require) but did not run fully", red=True)
