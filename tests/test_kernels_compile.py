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

from portops._kernels.loader import CTYPES, kernel_name, kernel_source, real_of

KERNELS = Path(__file__).parents[1] / "portops" / "_kernels"
SOURCES = sorted(KERNELS.glob("*.cu"))
ARCHS = ["sm_90", "sm_80"]


def shift_sum_instances() -> list[str]:
    """A representative set of instances: every element type in every role once (the
    CuPy backend instantiates whichever its arguments need through NVRTC)."""
    names = []
    for dt in CTYPES:
        acc = "float32" if dt == "float16" else dt
        for large in (False, True):
            names.append(kernel_name("shift_sum_forward", (dt, dt, acc, dt), large))
            names.append(kernel_name("shift_sum_adjoint", (dt, dt, acc, dt), large))
            for channels in (0, 28):
                forward = (dt, dt, acc, dt)
                names.append(kernel_name("shift_sum_forward_rows", forward, large, (channels,)))
                rows = (dt, dt, real_of(acc), acc, dt)
                names.append(kernel_name("shift_sum_adjoint_rows", rows, large, (channels,)))
            if "int" not in dt:
                names.append(kernel_name("shift_sum_inverse_phi_rows", (dt, real_of(dt)), large))
    for x, m, out in [
        ("float16", "float32", "float32"),
        ("float32", "complex64", "complex64"),
        ("complex64", "float32", "complex64"),
        ("complex128", "complex64", "complex128"),
        ("int64", "float64", "float64"),
        ("int32", "float32", "float64"),
    ]:
        names.append(kernel_name("shift_sum_forward", (x, m, out, out), False))
        names.append(kernel_name("shift_sum_adjoint", (x, m, out, out), False))
    for y, m in [
        ("float16", "float16"),
        ("float32", "float32"),
        ("float64", "float64"),
        ("complex64", "float32"),
        ("complex128", "complex128"),
        ("float32", "complex64"),
    ]:
        out = {"float16": "float32"}.get(y, y)
        if "complex" in m and "complex" not in out:
            out = "complex64"
        for large in (False, True):
            names.append(kernel_name("shift_sum_pinv_divide", (y, m, real_of(out), out), large))
    return names


def vecdot_instances() -> list[str]:
    """Every instance the CuPy vecdot uses: real and integer types, both index widths."""
    names = []
    for dt in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint64"):
        acc = "float" if dt == "float16" else CTYPES[dt]
        for kind in ("vecdot_thread_rows", "vecdot_block_rows"):
            for index in ("int", "long long"):
                names.append(f"portops::{kind}<{CTYPES[dt]}, {acc}, {index}>")
    return names


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
@pytest.mark.parametrize(
    ("source", "instances"),
    [("shift_sum.cu", shift_sum_instances), ("vecdot.cu", vecdot_instances)],
    ids=["shift_sum", "vecdot"],
)
def test_instances_compile(arch, source, instances, tmp_path):
    """Templates are only type-checked when instantiated: take every instance's address."""
    _compile_instances(kernel_source(source), instances(), arch, tmp_path)


def _compile_instances(code: str, names: list[str], arch: str, tmp_path: Path) -> None:
    """`code` compiles to PTX without a warning, with an entry for each instance of `names`."""
    lines = [code, "void* portops_instances[] = {", *(f"    (void*)&{n}," for n in names), "};"]
    src, ptx = tmp_path / "instances.cu", tmp_path / "instances.ptx"
    src.write_text("\n".join(lines))
    cmd = [_nvcc(), f"-arch={arch}", "--ptx", "-Werror", "all-warnings", str(src), "-o", str(ptx)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert ptx.read_text().count(".entry") == len(names)


@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_timing_probe_kernel_compiles(arch, tmp_path):
    """The forward row kernel variant that benchmarks.gpu_timing's probe compiles after
    shift_sum.cu (benchmarks/cupy_row_wide.cu), at the instances the probe takes."""
    wide = Path(__file__).parents[1] / "benchmarks" / "cupy_row_wide.cu"
    names = [
        kernel_name("shift_sum_forward_rows_wide", ("float32",) * 4, large, (28, cols))
        for large in (False, True)
        for cols in (2, 4, 8)
    ]
    code = kernel_source("shift_sum.cu") + "\n" + wide.read_text()
    _compile_instances(code, names, arch, tmp_path)
