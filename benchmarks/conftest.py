"""Options and bookkeeping shared by every benchmark file.

- ``--quick`` sets ``PORTOPS_BENCH_QUICK=1`` (read by the benchmark files: tiny sizes) and
  shortens pytest-benchmark's rounds; the ``quick`` fixture says whether it is on.
- ``--bench-backends numpy,torch,torch-cuda,cupy`` runs only the groups of those backends
  (``torch`` means torch on the CPU, ``<backend>-cuda`` on a CUDA device). A group is named
  ``"<op> <case> <backend> <device>"``; the benchmarks of other backends are deselected
  where their parameters say which backend they are, and skipped before timing otherwise.
- ``--bench-budget SECONDS`` shares the time left equally among the benchmarks left:
  each runs as many of its rounds as fit in its share (at least one), so a short run
  still covers every operation. A line per benchmark names it, with an estimate of
  the time left.
- Every benchmark that was skipped for another reason (a backend not installed, no CUDA
  device) is named with its reason at the end of the run, in the pytest-benchmark JSON
  (key ``portops``) and, with ``--bench-status FILE``, in a JSON file that
  ``benchmarks/report.py`` reads even when no benchmark could run at all.
- Each benchmark must set ``benchmark.group`` and ``benchmark.extra_info`` (``op``, ``kind``,
  ``backend``, ``device``, ``name``); one that does not fails at teardown.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.report import cpu_model, gpu_model

QUICK_ENV = "PORTOPS_BENCH_QUICK"
SWEEP_ENV = "PORTOPS_BENCH_SWEEP"
KINDS = ("portops", "baseline", "roofline")
REQUIRED_EXTRA = ("op", "kind", "backend", "device", "name")
KNOWN_BACKENDS = ("cupy", "torch", "jax", "dask", "array_api_strict", "numpy")
DEVICES = ("cpu", "cuda")
DEFAULT_DEVICE = {"cupy": "cuda"}
NOT_SELECTED = "not selected by --bench-backends"
VERSIONED_MODULES = ("numpy", "torch", "cupy", "jax", "dask", "opt_einsum", "portops")

# Benchmark options in quick mode: enough to show that every benchmark runs.
QUICK_OPTIONS = {"benchmark_min_rounds": 2, "benchmark_max_time": 0.001, "benchmark_warmup": False}

SELECTION = pytest.StashKey[frozenset[tuple[str, str]] | None]()
RECORDER = pytest.StashKey["RunRecorder"]()
DEADLINE = pytest.StashKey[float | None]()


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("portops benchmarks")
    group.addoption(
        "--quick",
        action="store_true",
        help=f"tiny sizes and 1-2 rounds, for CI (sets {QUICK_ENV}=1)",
    )
    group.addoption(
        "--sweep",
        action="store_true",
        help=f"the whole shape sweep of every operation (sets {SWEEP_ENV}=1)",
    )
    group.addoption(
        "--bench-backends",
        default=None,
        help="comma-separated backends to run, e.g. numpy,torch,torch-cuda,cupy (default: all)",
    )
    group.addoption(
        "--bench-require",
        default=None,
        metavar="BACKENDS",
        help="fail the run when a benchmark of these backends (e.g. numpy,torch) is skipped",
    )
    group.addoption(
        "--bench-expect",
        default=None,
        metavar="BACKENDS",
        help="backends this run should cover: each that runs no benchmark is named with why",
    )
    group.addoption(
        "--bench-budget",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="share this many seconds among the benchmarks, shortening their rounds to fit",
    )
    group.addoption(
        "--bench-status",
        default=None,
        metavar="FILE",
        help="write the backends that could not run, and the machine, to this JSON file",
    )


def parse_selection(text: str | None) -> frozenset[tuple[str, str]] | None:
    """``"numpy,torch-cuda"`` -> ``{("numpy", "cpu"), ("torch", "cuda")}``; None for all."""
    if not text or text.strip().lower() in ("", "all"):
        return None
    selected = set()
    for token in text.lower().replace(" ", "").split(","):
        if not token:
            continue
        backend, _, device = token.partition("-")
        selected.add((backend, device or DEFAULT_DEVICE.get(backend, "cpu")))
    return frozenset(selected)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("quick"):
        os.environ[QUICK_ENV] = "1"
        for name, value in QUICK_OPTIONS.items():
            if hasattr(config.option, name):
                setattr(config.option, name, value)
    if config.getoption("sweep"):
        os.environ[SWEEP_ENV] = "1"
    config.stash[SELECTION] = parse_selection(config.getoption("bench_backends"))
    budget = config.getoption("bench_budget")
    config.stash[DEADLINE] = time.monotonic() + budget if budget and budget > 0 else None
    config.stash[RECORDER] = RunRecorder(config.stash[DEADLINE])
    config.pluginmanager.register(config.stash[RECORDER], "portops-bench-recorder")


@pytest.fixture(scope="session")
def quick() -> bool:
    """Whether the benchmarks run in quick mode (tiny sizes)."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


# --------------------------------------------------------------------------- selection


def group_target(group: str | None) -> tuple[str, str] | None:
    """(backend, device) of a group named ``"<op> <case> <backend> <device>[ <more>]"``.

    The device is the last ``cpu``/``cuda`` word, the backend the word before it.
    """
    parts = (group or "").lower().split()
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in DEVICES:
            return (parts[i - 1], parts[i])
    return None


def benchmark_target(group: str | None, extra_info: dict[str, Any]) -> tuple[str, str] | None:
    """(backend, device) of a benchmark: from its group, else from its extra_info."""
    target = group_target(group)
    backend, device = extra_info.get("backend"), extra_info.get("device")
    if target is None and isinstance(backend, str) and isinstance(device, str):
        target = (backend.lower(), device.lower())
    return target


def target_label(target: tuple[str, str]) -> str:
    """``("torch", "cuda")`` -> ``"torch CUDA"``; CuPy is named without its device."""
    backend, device = target
    if DEFAULT_DEVICE.get(backend) == device:
        return backend
    return f"{backend} {device.upper()}"


def is_selected(target: tuple[str, str], selection: frozenset[tuple[str, str]] | None) -> bool:
    """Whether a group on `target` (backend, device) runs under `selection`."""
    return selection is None or target in selection


def item_target(item: pytest.Item) -> tuple[str | None, str | None]:
    """(backend, device) from a test's ``backend``/``device`` parameters, where it has them.

    A ``backend`` parameter such as ``"torch-cuda"`` or ``"torch_cuda"`` gives both; one
    that is not a known backend name gives None (the test is then judged when it runs).
    """
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend = _param_text(params.get("backend"))
    device = _param_text(params.get("device"))
    if backend is not None:
        for sep in ("-", ":", "_", " "):
            head, _, tail = backend.rpartition(sep)
            if head and tail in DEVICES:
                backend, device = head, device or tail
                break
    if backend not in KNOWN_BACKENDS or (device is not None and device not in DEVICES):
        return None, None
    return backend, device


def _param_text(value: Any) -> str | None:
    value = getattr(value, "name", value)
    return value.lower() if isinstance(value, str) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection = config.stash[SELECTION]
    if selection is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        backend, device = item_target(item)
        if backend is None:
            keep.append(item)  # decided when it runs, from benchmark.group
            continue
        devices = {d for b, d in selection if b == backend}
        wanted = bool(devices) and (device is None or device in devices)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class SelectiveBenchmark(BenchmarkFixture):
    """pytest-benchmark's fixture; skips, before timing, unselected groups and those over budget."""

    _portops_selection: frozenset[tuple[str, str]] | None = None
    _portops_share: Callable[[], float | None] = staticmethod(lambda: None)
    _portops_targets: dict[str, tuple[str, str]] | None = None

    def _before_timing(self) -> None:
        """Note the test's backend; skip it if unselected."""
        target = benchmark_target(self.group, self.extra_info)
        if target is not None and self._portops_targets is not None:
            self._portops_targets[self.fullname] = target
        if target is not None and not is_selected(target, self._portops_selection):
            pytest.skip(f"{NOT_SELECTED}: {' '.join(target)}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._before_timing()
        share = self._portops_share()
        if share is not None:  # calibrated rounds: stop once the share is spent
            self._max_time = max(1e-3, min(self._max_time, share))
            self._min_rounds = 1
        parent: Any = super()
        return parent.__call__(*args, **kwargs)

    def pedantic(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> Any:
        """`BenchmarkFixture.pedantic`, after the selection check, with the rounds that
        fit this benchmark's share of the budget (one untimed round measures them)."""
        self._before_timing()
        share = self._portops_share()
        if share is not None:
            t0 = time.perf_counter()
            if setup is not None:
                setup()
            for _ in range(iterations):
                target(*args, **(kwargs or {}))
            per_round = time.perf_counter() - t0
            rounds = max(1, min(rounds, int(share / max(per_round, 1e-9))))
            warmup_rounds = min(warmup_rounds, 1) if rounds > 1 else 0
        parent: Any = super()
        return parent.pedantic(
            target,
            args,
            kwargs,
            setup=setup,
            rounds=rounds,
            warmup_rounds=warmup_rounds,
            iterations=iterations,
        )


@pytest.fixture
def benchmark(benchmark: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """pytest-benchmark's fixture, with backend selection and the naming convention checked."""
    recorder = request.config.stash[RECORDER]
    benchmark.__class__ = SelectiveBenchmark
    benchmark._portops_selection = request.config.stash[SELECTION]
    benchmark._portops_share = recorder.share
    benchmark._portops_targets = recorder.targets
    yield benchmark
    if getattr(benchmark, "stats", None) is not None:
        target = benchmark_target(benchmark.group, benchmark.extra_info)
        if target is not None:
            request.config.stash[RECORDER].ran.add(target)
        problems = convention_problems(benchmark.group, benchmark.extra_info)
        if problems:
            pytest.fail(f"{request.node.nodeid}: " + "; ".join(problems), pytrace=False)


def convention_problems(group: str | None, extra_info: dict[str, Any]) -> list[str]:
    """How a benchmark's group and extra_info break the shared naming convention."""
    problems = []
    if not group or len(group.split()) < 4:
        problems.append(f'benchmark.group must be "<op> <case> <backend> <device>", got {group!r}')
    missing = [k for k in REQUIRED_EXTRA if not extra_info.get(k)]
    if missing:
        problems.append(f"benchmark.extra_info lacks {', '.join(missing)}")
    if extra_info.get("kind") and extra_info["kind"] not in KINDS:
        problems.append(f"extra_info kind must be one of {KINDS}, got {extra_info['kind']!r}")
    return problems


# --------------------------------------------------------------------------- skips


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


class RunRecorder:
    """A plugin that keeps every skip (of a test or a whole module) with its reason.

    `ran` holds the (backend, device) of every benchmark that ran, and `targets` that of
    every test that reached the benchmark call, by node id; both filled by the fixture.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self.skips: list[tuple[str, str]] = []
        self.ran: set[tuple[str, str]] = set()
        self.targets: dict[str, tuple[str, str]] = {}
        self.deadline = deadline
        self.start = time.monotonic()
        self.total = 0
        self.done = 0

    def share(self) -> float | None:
        """Seconds the running benchmark may take: the budget left over those left."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic()) / max(1, self.total - self.done)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else None
        if self.deadline is not None:
            budget_left = max(0.0, self.deadline - time.monotonic())
            left = budget_left if left is None else min(left, budget_left)
        eta = f"about {left:.0f} s left" if left is not None else "estimating"
        reporter = self._reporter
        if reporter is not None:
            reporter.write_line(f"[{self.done + 1}/{self.total}, {eta}] {nodeid}")

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.done += 1

    _reporter: Any = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def _record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        reason = _skip_reason(report)
        if not reason.startswith(NOT_SELECTED):
            self.skips.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)


def skip_label(nodeid: str, reason: str) -> str:
    """Which backend a skip is about, e.g. ``torch CUDA`` or ``cupy``.

    Looked for in the test's parameters, then its name, then the reason, then its file.
    """
    path, _, rest = nodeid.partition("::")
    name, _, params = rest.lower().partition("[")
    backend = None
    for text in (params, name, reason.lower(), path.lower()):
        backend = next((b for b in KNOWN_BACKENDS if b in text), None)
        if backend is not None:
            break
    if backend is None:
        return nodeid.partition("[")[0]
    cuda = backend == "cupy" or any(w in f"{reason} {params}".lower() for w in ("cuda", "gpu"))
    return target_label((backend, "cuda" if cuda else "cpu"))


def summarise_skips(
    skips: list[tuple[str, str]],
    selection: frozenset[tuple[str, str]] | None = None,
    targets: dict[str, tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Skips counted per (backend label, reason); those of unselected backends left out.

    A test's backend is its benchmark group's where it got that far (`targets`),
    otherwise it is inferred by `skip_label`.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for nodeid, reason in skips:
        target = (targets or {}).get(nodeid)
        label = target_label(target) if target else skip_label(nodeid, reason)
        if selection is not None and not _label_in(label, selection, unknown=True):
            continue
        counts[(label, reason)] += 1
    return [{"backend": b, "reason": r, "count": n} for (b, r), n in sorted(counts.items())]


def _label_in(label: str, selection: frozenset[tuple[str, str]], *, unknown: bool) -> bool:
    """Whether a skip label is about a backend in `selection`; `unknown` if about none."""
    words = label.lower().split()
    if not words or words[0] not in KNOWN_BACKENDS:
        return unknown
    device = words[1] if len(words) > 1 else DEFAULT_DEVICE.get(words[0], "cpu")
    return (words[0], device) in selection


# --------------------------------------------------------------------------- status


def probe_reason(target: tuple[str, str]) -> str:
    """Why no benchmark of `target` (backend, device) could have run on this machine."""
    backend, device = target
    try:
        module: Any = importlib.import_module(backend)
    except Exception as exc:  # not installed, or broken (e.g. CUDA libraries missing)
        return f"{backend} is not installed or fails to import ({type(exc).__name__}: {exc})"
    if device == "cuda" and backend == "torch" and not module.cuda.is_available():
        build = module.version.cuda or "none, a CPU-only build"
        return f"no CUDA device (torch {module.__version__}, CUDA {build})"
    if device == "cuda" and backend == "cupy":
        try:
            module.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return f"no CUDA device ({type(exc).__name__}: {exc})"
    return "no benchmark of this backend ran"


def missing_expected(
    expected: frozenset[tuple[str, str]] | None,
    ran: set[tuple[str, str]],
    unavailable: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """An entry, with the reason, for each expected backend that no benchmark ran on."""
    named = {u["backend"] for u in unavailable}
    missing = [t for t in sorted(expected or ()) if t not in ran and target_label(t) not in named]
    return [{"backend": target_label(t), "reason": probe_reason(t), "count": 0} for t in missing]


def _expected(config: pytest.Config) -> frozenset[tuple[str, str]] | None:
    expect = parse_selection(config.getoption("bench_expect")) or frozenset()
    require = parse_selection(config.getoption("bench_require")) or frozenset()
    return (expect | require) or None


def status(config: pytest.Config) -> dict[str, Any]:
    """What the report needs besides the timings: mode, machine, versions, skips."""
    selection = config.stash[SELECTION]
    recorder = config.stash[RECORDER]
    unavailable = summarise_skips(recorder.skips, selection, recorder.targets)
    unavailable += missing_expected(_expected(config), recorder.ran, unavailable)
    return {
        "quick": os.environ.get(QUICK_ENV, "") not in ("", "0"),
        "selected": None if selection is None else sorted("-".join(t) for t in selection),
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "gpu": gpu_model()},
        "versions": _versions(),
        "ran": sorted(target_label(t) for t in recorder.ran),
        "unavailable": unavailable,
    }


def _versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for name in VERSIONED_MODULES:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version:
            versions[name] = str(version)
    return versions


def _cached_status(config: pytest.Config) -> dict[str, Any]:
    key = "_portops_bench_status"
    cached: dict[str, Any] | None = getattr(config, key, None)
    if cached is None:
        cached = status(config)
        setattr(config, key, cached)
    return cached


def pytest_benchmark_update_json(
    config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]
) -> None:
    output_json["portops"] = _cached_status(config)


def required_skips(
    unavailable: list[dict[str, Any]], required: frozenset[tuple[str, str]] | None
) -> list[dict[str, Any]]:
    """The entries of `unavailable` about a backend that `--bench-require` says must run."""
    if not required:
        return []
    return [u for u in unavailable if _label_in(u["backend"], required, unknown=False)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    path = config.getoption("bench_status")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(_cached_status(config), indent=2) + "\n")
    required = parse_selection(config.getoption("bench_require"))
    if required_skips(_cached_status(config)["unavailable"], required):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    write: Callable[..., None] = terminalreporter.write_line
    unavailable = _cached_status(config)["unavailable"]
    terminalreporter.section("portops: backends that could not run")
    if not unavailable:
        write("none: every selected backend ran")
    for item in unavailable:
        write(f"{item['backend']}: {item['reason']} ({count_text(item['count'])})")
    required = parse_selection(config.getoption("bench_require"))
    for item in required_skips(unavailable, required):
        write(f"FAILED: {item['backend']} is required (--bench-require) but did not run", red=True)


def count_text(count: int) -> str:
    """``"3 benchmarks"``, ``"1 benchmark"`` or, for 0, ``"no benchmark ran"``."""
    if count == 0:
        return "no benchmark ran"
    return f"{count} benchmark{'s' if count != 1 else ''}"
