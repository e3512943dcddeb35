"""The optional compiled part of portops; everything else is configured in pyproject.toml.

The shift_sum forward's CPU row loop (portops/_kernels/shift_rows.c) is plain C that
portops loads with ctypes. It is built where a C compiler is found; where the build fails
the install goes on without it, and portops runs NumPy's and torch's own kernels instead.
"""

import sys

from setuptools import Extension, setup

# -O3: GCC vectorises the row adds at -O3 (an interpreter built with -O2 would not).
# -ffp-contract=off: a product and its add rounded apart, as NumPy's and torch's are
# (GCC would fuse them where the target has FMA, as on ARM).
flags = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]
setup(
    ext_modules=[
        Extension(
            "portops._kernels._shift_rows",
            ["portops/_kernels/shift_rows.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
