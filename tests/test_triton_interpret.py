"""The Triton kernels of the torch CUDA path, on CPU tensors under Triton's interpreter.

The cases live in ``triton_cases.py``; they run in a subprocess because
``TRITON_INTERPRET=1`` must be set before ``import triton`` and must not leak into a
process that also runs the compiled kernels on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from backends import pythonpath

pytest.importorskip("torch")
if os.environ.get("PORTOPS_REQUIRE_TRITON") == "1":  # nox -s triton_interpret: never skip
    import triton  # noqa: F401
else:
    pytest.importorskip("triton")


def test_triton_kernels_under_the_interpreter():
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = pythonpath(str(here.parent))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(here / "triton_cases.py"),
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(cmd, env=env, cwd=here.parent, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]
