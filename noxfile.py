"""Developer commands: ``nox -s tests``, ``nox -s bench``, ``nox -s lint``, ``nox -s docs``.

Benchmarks: ``nox -s bench`` runs every backend this machine can run and prints a table per
operation; ``bench_numpy``, ``bench_torch``, ``bench_torch_cuda`` and ``bench_cupy`` run one
backend each, ``bench_quick`` is the CI-sized check. Options after ``--`` go to pytest:
``--quick`` (tiny sizes), ``--sweep`` (the whole shape sweep of every operation; the
default run has a slice of it), ``--benchmark-compare`` (pytest-benchmark's comparison
with a saved run). Results land in ``bench-results/``: ``<session>.json``
(pytest-benchmark), ``<session>.txt`` (the tables) and ``<session>.png`` (the chart).
Without a GPU, ``nox -s bench`` shares 210 s among the benchmarks, shortening their
rounds to fit, so that it keeps to five minutes on two cores; ``-- --bench-budget 0``
lifts that, and ``--sweep`` runs without it.

On a machine without a package registry, run ``nox --no-venv -s <session>``: the
sessions then use what is installed instead of creating virtual environments.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

# The test backends are the entries of tests/backends.py (SPECS): "all-cpu" and "all-gpu"
# name its CPU and CUDA ones, so a backend added there is tested here without an edit.
CPU_BACKENDS = "all-cpu"
GPU_BACKENDS = "all-gpu"
HAS_NVIDIA_GPU = shutil.which("nvidia-smi") is not None


def _installs_packages(session: nox.Session) -> bool:
    return not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv)


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_CONSTRAINTS = "constraints-cpu.txt"


def _install(session: nox.Session, extras: str) -> None:
    """Install portops with `extras`; CPU-only machines get the CPU build of torch.

    Without an NVIDIA GPU, torch is installed first and alone from PyTorch's CPU wheel
    index (pinned to the CPU build by ``constraints-cpu.txt``), so pip never resolves the
    public index's CUDA build and its nvidia-* wheels. That step keeps to one retry: a
    machine that cannot reach the CPU index but has the wheel locally (a wheelhouse in
    ``find-links``) goes on quickly. The project's own install then finds torch
    installed, and the same constraints keep it.
    """
    if not _installs_packages(session):
        return
    if HAS_NVIDIA_GPU:
        session.install("-e", f".[{extras}]")
        return
    if {"torch", "deepinv"} & set(extras.split(",")):
        session.install(
            *("--retries", "1", "--extra-index-url", TORCH_CPU_INDEX),
            *("-c", CPU_CONSTRAINTS, "torch"),
        )
    session.install("-c", CPU_CONSTRAINTS, "-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite on every CPU backend (and CUDA ones where a GPU is present)."""
    _install(session, "test,torch,jax,dask" + (",cupy" if HAS_NVIDIA_GPU else ""))
    default = CPU_BACKENDS + (f",{GPU_BACKENDS}" if HAS_NVIDIA_GPU else "")
    backends = os.environ.get("PORTOPS_TEST_BACKENDS", default)
    session.env["PORTOPS_TEST_BACKENDS"] = backends
    session.env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # JAX's workers share a GPU
    # One worker per core (pytest-xdist) unless the caller chose: `-- -n 0` runs serially.
    workers = [] if any(a.startswith("-n") for a in session.posargs) else ["-n", "auto"]
    session.run("python", "-m", "pytest", "tests", "-q", *workers, *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site in docs/_build/html, warnings as errors; runs the gallery.

    Options after ``--`` go to sphinx-build (for example ``-D
    sphinx_gallery_conf.plot_gallery=0`` to skip running the examples).
    """
    _install(session, "docs,torch")
    shutil.rmtree("docs/_build", ignore_errors=True)
    # The examples are small: one torch/BLAS thread each is faster than threads that
    # spin on a shared two-core CI machine.
    if "OMP_NUM_THREADS" not in os.environ:
        session.env["OMP_NUM_THREADS"] = "1"
    session.run(
        *("python", "-m", "sphinx", "-W", "--keep-going", "-b", "html"),
        *("docs", "docs/_build/html", *session.posargs),
    )
    session.log("open docs/_build/html/index.html")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    if _installs_packages(session):
        session.install("ruff", "mypy", "numpy", "array-api-compat")
    session.run("ruff", "check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")


# --------------------------------------------------------------------------- benchmarks

BENCH_DIR = Path("bench-results")
# Each benchmark file is budgeted about a minute: a few short rounds per benchmark, no GC.
BENCH_OPTIONS = [
    "--benchmark-disable-gc",
    "--benchmark-min-rounds=3",
    "--benchmark-max-time=0.25",
    "--benchmark-warmup=on",
    "--benchmark-warmup-iterations=1",
    "--benchmark-quiet",
    "-p",
    "no:cacheprovider",
]
ALL_BENCH_BACKENDS = "numpy,torch,torch-cuda,cupy"
# `nox -s bench` keeps to 5 minutes on a 2-core machine: the install and the report take
# about a minute, so the benchmarks share the rest (each runs the rounds that fit).
# Pass `-- --bench-budget 0` to lift the limit (it is not applied where there is a GPU).
BENCH_BUDGET_S = 210
NO_GPU = "no NVIDIA GPU on this machine (nvidia-smi not found)"


def _bench(session: nox.Session, extras: str, backends: str | None = None) -> None:
    """Install, run the benchmarks (of `backends`, default all), then print the report."""
    _install(session, extras)
    _run_bench(session, backends, budget=None if HAS_NVIDIA_GPU else BENCH_BUDGET_S)


def _run_bench(
    session: nox.Session,
    backends: str | None = None,
    *,
    quick: bool = False,
    require: str | None = None,
    budget: float | None = None,
) -> None:
    """Run the benchmarks (of `backends`, default all) and print the report; fail after it.

    `require` names backends whose benchmarks must not be skipped (for CI); `budget` is
    the time in seconds after which the benchmarks left are skipped and named.
    """
    pytest_args = list(session.posargs)
    if budget and "--sweep" not in pytest_args:
        pytest_args.insert(0, f"--bench-budget={budget:g}")
    if quick and "--quick" not in pytest_args:
        pytest_args.append("--quick")
    if require:
        pytest_args += ["--bench-require", require]
    BENCH_DIR.mkdir(exist_ok=True)
    results = BENCH_DIR / f"{session.name}.json"
    status = BENCH_DIR / f"{session.name}.status.json"
    selection = ["--bench-backends", backends] if backends else []
    selection += ["--bench-expect", backends or ALL_BENCH_BACKENDS]
    failure = None
    try:
        session.run(
            *("python", "-m", "pytest", "benchmarks", "-q"),
            *(f"--benchmark-json={results}", f"--bench-status={status}"),
            *selection,
            *BENCH_OPTIONS,
            *pytest_args,
        )
    except nox.command.CommandFailed as exc:
        failure = exc
    report = ["python", "-m", "benchmarks.report", str(results), "--status", str(status)]
    report += [
        "--text",
        str(results.with_suffix(".txt")),
        "--png",
        str(results.with_suffix(".png")),
    ]
    session.run(*report)
    if failure is not None:
        session.error(f"some benchmarks failed: {failure.reason}")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks of every backend this machine can run, then the tables and chart."""
    if HAS_NVIDIA_GPU:
        _bench(session, "bench,torch,cupy,dask")
        # Per-call GPU times by CUDA events, host time per call, the copy-bandwidth limit.
        session.run(
            *("python", "-m", "benchmarks.gpu_timing"),
            *("--text", str(BENCH_DIR / "gpu.txt"), "--json", str(BENCH_DIR / "gpu.json")),
        )
    else:
        session.log(f"torch CUDA and CuPy benchmarks will be skipped: {NO_GPU}")
        _bench(session, "bench,torch,dask")


@nox.session
def bench_numpy(session: nox.Session) -> None:
    """Benchmarks of the NumPy (CPU) groups."""
    _bench(session, "bench,torch", "numpy")


@nox.session
def bench_torch(session: nox.Session) -> None:
    """Benchmarks of the torch CPU groups."""
    _bench(session, "bench,torch", "torch")


@nox.session
def bench_torch_cuda(session: nox.Session) -> None:
    """Benchmarks of the torch CUDA groups (skipped without an NVIDIA GPU)."""
    if not HAS_NVIDIA_GPU:
        session.skip(f"torch CUDA: {NO_GPU}")
    _bench(session, "bench,torch", "torch-cuda")


@nox.session
def bench_cupy(session: nox.Session) -> None:
    """Benchmarks of the CuPy groups (skipped without an NVIDIA GPU)."""
    if not HAS_NVIDIA_GPU:
        session.skip(f"cupy: {NO_GPU}")
    _bench(session, "bench,torch,cupy", "cupy")


@nox.session
def bench_quick(session: nox.Session) -> None:
    """CI: the report's tests, then every benchmark once at tiny sizes; fails if any breaks."""
    _install(session, "test,bench,torch")
    session.run("python", "-m", "pytest", "tests/test_bench_report.py", "-q")
    _run_bench(session, quick=True, require="numpy,torch")
    results = BENCH_DIR / f"{session.name}.json"
    if not results.is_file() or results.stat().st_size == 0:
        session.error(f"no benchmark ran: {results} is missing or empty")
