"""Developer commands: ``nox -s tests``, ``nox -s bench``, ``nox -s lint``.

On a machine without a package registry, run ``nox --no-venv -s <session>``: the
sessions then use what is installed instead of creating virtual environments.
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

CPU_BACKENDS = "numpy,numpy_readonly,array_api_strict,torch,jax,dask"
HAS_NVIDIA_GPU = shutil.which("nvidia-smi") is not None


def _installs_packages(session: nox.Session) -> bool:
    return not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv)


def _install(session: nox.Session, extras: str) -> None:
    """Install portops with `extras`; CPU-only machines pin the CPU torch build."""
    if not _installs_packages(session):
        return
    constraints = [] if HAS_NVIDIA_GPU else ["-c", "constraints-cpu.txt"]
    session.install(*constraints, "-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite on every CPU backend (and CUDA ones where a GPU is present)."""
    _install(session, "test,torch,jax,dask")
    backends = os.environ.get("PORTOPS_TEST_BACKENDS", CPU_BACKENDS)
    session.env["PORTOPS_TEST_BACKENDS"] = backends
    session.run("python", "-m", "pytest", "tests", "-q", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    if _installs_packages(session):
        session.install("ruff", "mypy", "numpy", "array-api-compat")
    session.run("ruff", "check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "portops", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks on every backend this machine can run, then the summary tables."""
    _install(session, "bench,torch")
    session.run("python", "-m", "pytest", "benchmarks", "-q", *session.posargs)
