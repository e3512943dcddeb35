"""Developer commands: ``nox -s tests``, ``nox -s bench``, ``nox -s lint``, ``nox -s docs``.

``tests`` runs the suite, then the docstring examples as doctests (``doctests`` runs
those alone); ``lint`` runs ruff and ``mypy --strict`` over the package;
``triton_interpret`` runs the Triton kernels of the CUDA path on the CPU, under Triton's
interpreter (the only CPU session that installs Triton).

Benchmarks: ``nox -s bench`` runs the headline comparisons (each source's own methods at
its own shapes, the native calls beside them) and a sample of the shape sweep, in
interleaved rounds, then writes the report and the chart; ``bench_numpy``,
``bench_torch``, ``bench_torch_cuda`` and ``bench_cupy`` run one backend each,
``bench_quick`` is the CI-sized check. Options after ``--`` go to pytest: ``--full``
(every comparison), ``--sweep`` (the whole shape sweep), ``--quick`` (tiny sizes),
``--bench-budget SECONDS`` (0: none), ``--benchmark-compare`` (pytest-benchmark's
comparison with a saved run). Results land in ``bench-results/``: ``<session>.json``
(pytest-benchmark), ``<session>.txt`` (the report) and ``<session>.png`` (the chart).
Without a GPU, ``nox -s bench`` gives its comparisons ``BENCH_BUDGET_S`` seconds in all,
so that it keeps to five minutes on two cores, the install included; ``--sweep`` and
``--full`` lift the budget.

What each session downloads into a new virtual environment (CPU-only Linux, Python 3.11,
wheels; nox reuses the environment afterwards): ``bench`` about 250 MB (torch's CPU
wheel 190 MB, NumPy, matplotlib, Dask), ``bench_quick`` about 300 MB, ``tests`` about
390 MB (adds JAX, SciPy, scikit-image), ``docs`` about 300 MB, ``triton_interpret``
about 580 MB (Triton's wheel alone is 286 MB, 1 GB installed); with a GPU, torch's CUDA
build and its nvidia-* wheels add several GB. Installed, the environments take about
1.1 GB (``bench``), 1.3 GB (``bench_quick``), 1.4 GB (``docs``) and 2.3 GB
(``triton_interpret``).

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
TEST_EXTRAS = "test,torch,jax,dask" + (",cupy,triton" if HAS_NVIDIA_GPU else "")
TRITON_MODULES = [
    "portops/_backends/torch/_triton_launch.py",
    "portops/_backends/torch/_triton_shift_sum.py",
    "portops/_backends/torch/_triton_vecdot.py",
]


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
    _log_download(session)
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
    _install(session, TEST_EXTRAS)
    default = CPU_BACKENDS + (f",{GPU_BACKENDS}" if HAS_NVIDIA_GPU else "")
    backends = os.environ.get("PORTOPS_TEST_BACKENDS", default)
    session.env["PORTOPS_TEST_BACKENDS"] = backends
    session.env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # JAX's workers share a GPU
    # One worker per core (pytest-xdist) unless the caller chose: `-- -n 0` runs serially.
    workers = [] if any(a.startswith("-n") for a in session.posargs) else ["-n", "auto"]
    session.run("python", "-m", "pytest", "tests", "-q", *workers, *session.posargs)
    _run_doctests(session)


def _run_doctests(session: nox.Session) -> None:
    """Every docstring example of the package, run as a doctest (pyproject.toml sets
    the option flags). The CuPy and Triton modules import their library, installed on GPU
    machines only: skipped elsewhere (they hold no examples)."""
    gpu_only = ["portops/_backends/cupy", *TRITON_MODULES]
    ignore = [] if HAS_NVIDIA_GPU else [f"--ignore={path}" for path in gpu_only]
    session.run(
        *("python", "-m", "pytest", "--doctest-modules", "portops", "-q"),
        *("-p", "no:cacheprovider", *ignore),
    )


@nox.session
def triton_interpret(session: nox.Session) -> None:
    """The Triton kernels of the torch CUDA path on CPU tensors, under Triton's
    interpreter (tests/test_triton_interpret.py); fails, rather than skips, without Triton."""
    _install(session, "test,torch,triton")
    session.env["PORTOPS_REQUIRE_TRITON"] = "1"
    session.run("python", "-m", "pytest", "tests/test_triton_interpret.py", "-q", *session.posargs)


@nox.session
def doctests(session: nox.Session) -> None:
    """The docstring examples alone (``nox -s tests`` runs them after the suite)."""
    _install(session, TEST_EXTRAS)
    _run_doctests(session)


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
    """ruff (lint and format) and mypy in strict mode over the package."""
    if _installs_packages(session):
        session.install("ruff", "mypy")
    # mypy reads the array libraries' own annotations: without them every torch type is
    # Any, and strict mode reports each subclass of one.
    _install(session, "torch,dask")
    session.run("ruff", "check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")


# --------------------------------------------------------------------------- benchmarks

BENCH_DIR = Path("bench-results")
BENCH_OPTIONS = ["--benchmark-disable-gc", "--benchmark-quiet", "-p", "no:cacheprovider"]
# `nox -s bench` aims at five minutes on a 2-core machine: a fresh install takes one to
# two, so the benchmarks get BENCH_BUDGET_S seconds, set-up included. Each comparison runs
# at least five rounds; the budget decides how many more (`conftest.State.share`). Not
# applied where there is a GPU, nor under --full or --sweep.
BENCH_BUDGET_S = 140
NO_GPU = "no NVIDIA GPU on this machine (nvidia-smi not found)"
DOWNLOADS = {  # session -> what its new virtual environment downloads (see the docstring)
    "tests": "about 390 MB",
    "docs": "about 300 MB",
    "bench": "about 250 MB",
    "bench_numpy": "about 240 MB",
    "bench_torch": "about 240 MB",
    "bench_quick": "about 300 MB",
    "triton_interpret": "about 580 MB",
}


def _bench(session: nox.Session, extras: str, backends: str | None = None) -> None:
    """Install, run the benchmarks (of `backends`, default all), then print the report."""
    _install(session, extras)
    _run_bench(session, backends, budget=None if HAS_NVIDIA_GPU else BENCH_BUDGET_S)


def _log_download(session: nox.Session) -> None:
    if _installs_packages(session) and session.name in DOWNLOADS and not HAS_NVIDIA_GPU:
        session.log(f"a new environment for this session downloads {DOWNLOADS[session.name]}")


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
    the time in seconds the benchmarks share, each running the rounds that fit.
    """
    pytest_args = list(session.posargs)
    if budget and not {"--sweep", "--full"} & set(pytest_args):
        pytest_args.insert(0, f"--bench-budget={budget:g}")
    if quick and "--quick" not in pytest_args:
        pytest_args.append("--quick")
    if require:
        pytest_args += ["--bench-require", require]
    BENCH_DIR.mkdir(exist_ok=True)
    results = BENCH_DIR / f"{session.name}.json"
    selection = ["--bench-backends", backends] if backends else []
    failure = None
    try:
        session.run(
            *("python", "-m", "pytest", "benchmarks", "-q", f"--benchmark-json={results}"),
            *selection,
            *BENCH_OPTIONS,
            *pytest_args,
        )
    except nox.command.CommandFailed as exc:
        failure = exc
    out = ("--text", str(results.with_suffix(".txt")), "--png", str(results.with_suffix(".png")))
    session.run("python", "-m", "benchmarks.report", str(results), *out)
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
