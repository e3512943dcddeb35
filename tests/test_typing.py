"""Downstream type checking: a package that calls portops on NumPy arrays and torch
tensors passes ``mypy --strict``, and a wrong call is reported."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import portops

GOOD = """
import numpy as np
import numpy.typing as npt
import torch

import portops


def measure(cube: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    y = portops.shift_sum(cube, 2, mask=np.ones(cube.shape[-2:], np.float32))
    return portops.shift_sum_adjoint(y, 2, channels=cube.shape[-3])


def rebuild(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return portops.shift_sum_pinv(y, [0, 1, 2], channels=3)


def tilt(x: torch.Tensor) -> torch.Tensor:
    return portops.unshear(portops.shear(x, 1), 1)


def gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return portops.einsum("bij,bkj->bik", a, b) + portops.vecdot(a, b)[..., None]


def products(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return portops.einsum(a, [0, 1], a, [1, 2], [0, 2])
"""

BAD = """
import numpy as np
import portops

portops.einsum(3, np.ones(3))
portops.shift_sum("x", 2)
"""


def _mypy(tmp_path: pathlib.Path, source: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy")
    pytest.importorskip("torch")
    (tmp_path / "downstream.py").write_text(source)
    # portops as an installed, typed package: its own modules are read, not reported on
    # (an editable install's import hook is invisible to mypy, hence the explicit path).
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\n[mypy-portops.*]\nfollow_imports = silent\n"
        "[mypy-triton.*]\nignore_missing_imports = True\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "downstream.py"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(pathlib.Path(portops.__file__).parent.parent)},
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_downstream_strict_typing_passes(tmp_path: pathlib.Path) -> None:
    out = _mypy(tmp_path, GOOD)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_wrong_calls_are_reported(tmp_path: pathlib.Path) -> None:
    out = _mypy(tmp_path, BAD)
    assert out.returncode == 1 and out.stdout.count("error:") >= 2, out.stdout
