"""opt_einsum 3.4's test cases that NumPy can express, run on portops.einsum.

The equations of ``test_contract.py`` (imported from opt_einsum's own test module),
and the cases of ``test_input.py`` and ``test_edge_cases.py`` written out here, each
compared with ``numpy.einsum`` on NumPy arrays and on torch tensors, under every
``optimize`` choice. Left out, because NumPy cannot express them: interleaved labels
beyond 0-51 or of other hashable types, Greek-letter subscripts, and opt_einsum's own
``contract_expression`` / ``contract_path`` objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from backends import Backend, require

import portops

pytest.importorskip("opt_einsum")
from opt_einsum.testing import build_views
from opt_einsum.tests.test_contract import tests as CONTRACT_EQUATIONS
from opt_einsum.tests.test_input import build_views as build_input_views

LIBRARIES = ("numpy", "torch")
OPTIMIZE = ("auto", True, False, "greedy", "optimal", "dp", "branch-2")

INPUT_EQUATIONS = ["...a->...", "a...->...", "a...a->...a", "...,...", "a,b", "...a,...b"]

EDGE_CASES: list[tuple[str, list[Any]]] = [
    ("ijk,kl,jl", [(1, 5, 4), (4, 6), (5, 6)]),
    ("ijk,kl,jl,i->i", [(1, 5, 4), (4, 6), (5, 6), (10,)]),
    ("abjk,kl,jl", [(1, 1, 5, 4), (4, 6), (5, 6)]),
    ("abjk,kl,jl,ab->ab", [(1, 1, 5, 4), (4, 6), (5, 6), (7, 7)]),
    ("ajk,kbl,jl,ab->ab", [(1, 5, 4), (4, 1, 6), (5, 6), (7, 7)]),
    ("ab,bc,bd->acd", [(5, 4), (1, 5), (4, 20)]),
    ("ij,ij->j", [(10, 2), (1, 2)]),
    ("...ij,...jk->...ik", [(1, 5), (5, 5)]),
]

ASSUMED_SHAPES: list[tuple[str, tuple[Any, ...]]] = [
    (",,->", (5, 5.0, 2.0j)),
    ("ab,->", ([[5, 5], [2.0, 1]], 2.0j)),
    ("ab,bc->ac", ([[5, 5], [2.0, 1]], [[2.0, 1], [3.0, 4]])),
    ("ab,->", ([[5, 5], [2.0, 1]], True)),
]


@pytest.fixture(params=LIBRARIES)
def library(request: pytest.FixtureRequest) -> Backend:
    return require(request.param)


def _convert(backend: Backend, values: list[Any]) -> list[Any]:
    """Arrays to the backend; Python numbers stay (portops converts them itself)."""
    return [backend.asarray(v) if isinstance(v, np.ndarray) else v for v in values]


def _close(got: Any, expected: Any) -> None:
    got = np.asarray(got.detach().cpu() if hasattr(got, "detach") else got)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("optimize", OPTIMIZE, ids=str)
@pytest.mark.parametrize("equation", list(dict.fromkeys(CONTRACT_EQUATIONS)))
def test_contract_equations(library: Backend, equation: str, optimize: Any) -> None:
    views = build_views(equation)
    expected = np.einsum(equation, *views)
    _close(portops.einsum(equation, *_convert(library, views), optimize=optimize), expected)


@pytest.mark.parametrize("optimize", ["auto", False, "optimal"], ids=str)
@pytest.mark.parametrize("equation", INPUT_EQUATIONS)
def test_input_equations(library: Backend, equation: str, optimize: Any) -> None:
    views = build_input_views(equation)
    expected = np.einsum(equation, *views)
    _close(portops.einsum(equation, *_convert(library, views), optimize=optimize), expected)


@pytest.mark.parametrize(
    "equation,interleaved",
    [
        ("...a->...", lambda v: (v[0], [Ellipsis, 0], [Ellipsis])),
        ("...a", lambda v: (v[0], [Ellipsis, 0])),
        ("...a->...a", lambda v: (v[0], [Ellipsis, 0], [Ellipsis, 0])),
        ("...b,...a->...", lambda v: (v[0], [Ellipsis, 1], v[1], [Ellipsis, 0], [Ellipsis])),
    ],
)
def test_ellipsis_sublists(library: Backend, equation: str, interleaved: Any) -> None:
    views = build_input_views(equation)
    expected = np.einsum(equation, *views)
    _close(portops.einsum(*interleaved(_convert(library, views))), expected)


@pytest.mark.parametrize("optimize", [True, False], ids=str)
@pytest.mark.parametrize("equation,shapes", EDGE_CASES)
def test_edge_cases(library: Backend, equation: str, shapes: list[Any], optimize: Any) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(size=s) for s in shapes]
    expected = np.einsum(equation, *arrays)
    _close(portops.einsum(equation, *_convert(library, arrays), optimize=optimize), expected)


def test_integer_broadcast_case(library: Backend) -> None:
    a = np.arange(64).reshape(2, 4, 8)
    expected = np.einsum("obk,ijk->ioj", a, a)
    _close(portops.einsum("obk,ijk->ioj", library.asarray(a), library.asarray(a)), expected)


@pytest.mark.parametrize("equation,operands", ASSUMED_SHAPES)
def test_python_operands(equation: str, operands: tuple[Any, ...]) -> None:
    """Numbers and nested lists only: NumPy arrays, as numpy.einsum makes them."""
    got = portops.einsum(equation, *operands)
    np.testing.assert_allclose(got, np.einsum(equation, *operands))


def test_python_operands_join_the_arrays_library() -> None:
    torch = pytest.importorskip("torch")
    got = portops.einsum("ab,->", torch.tensor([[5.0, 5], [2, 1]], dtype=torch.float64), 2.0j)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.complex128
    np.testing.assert_allclose(got.numpy(), 26.0j)
