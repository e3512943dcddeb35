"""Every CUDA source compiles with nvcc, for sm_90 and sm_80, with every instance used.

Runs without a GPU. Skipped only when ``nvcc`` is not on PATH (this project's CI has
it, so there the test runs). The CuPy backend compiles the same sources with NVRTC at
run time; this catches syntax and type errors before a GPU ever sees them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from portops._kernels.loader import kernel_source, shift_sum_instances

KERNELS = Path(__file__).parents[1] / "portops" / "_kernels"
SOURCES = sorted(KERNELS.glob("*.cu"))
ARCHS = ["sm_90", "sm_80"]


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    return nvcc


def test_there_are_sources():
    assert SOURCES, f"no .cu files under {KERNELS}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_source_compiles(source, arch, tmp_path):
    cmd = [_nvcc(), f"-arch={arch}", "-c", str(source), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("arch", ARCHS)
def test_shift_sum_instances_compile(arch, tmp_path):
    """Templates are only type-checked when instantiated: take every instance's address."""
    names = shift_sum_instances()
    lines = [kernel_source("shift_sum.cu"), "void* portops_instances[] = {"]
    lines += [f"    (void*)&{name}," for name in names]
    lines.append("};")
    src = tmp_path / "instances.cu"
    src.write_text("\n".join(lines))
    ptx = tmp_path / "instances.ptx"
    cmd = [_nvcc(), f"-arch={arch}", "--ptx", "-Werror", "all-warnings", str(src), "-o", str(ptx)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert ptx.read_text().count(".entry") == len(names)
