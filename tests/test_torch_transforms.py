"""One torch autograd story for every op, at every size, on torch CPU.

The matrix: every op x size class x feature, each cell computed twice with the same
harness, once through portops on float32 tensors and once through a plain torch
formulation of the op on the same values in float64 (the reference), and compared.

Size classes: ``tiny`` (about 100 elements), ``cache`` (about 64K), ``big`` (about 1M,
on this machine's profile) and ``past_llc`` (the same 1M elements under a declared
machine whose last-level cache is 1 MiB, so that the strategies meant for inputs past
the caches run without allocating hundreds of MB). The strategy a call takes depends
on its size and the machine profile; the outcome must not.

Features: backward, double backward, forward-mode AD (dual numbers), ``torch.func``
(grad, vmap, jvp, vjp, jacrev, vmap of grad), an in-place op on a result that
requires grad, ``inference_mode`` and ``torch.compile(fullgraph=True)``. A call that
needs any feature but ``inference_mode`` must stay in torch: no tensor that carries
one (requires grad, a transform or compile active) is viewed as a NumPy array or
handed to a private ATen operator (the watch below records any such use).

Then: adjoint dot tests, half-precision results against torch's own, and the
reproducers of the reliability issue that are not tested elsewhere.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import portops

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")
from torch.autograd import forward_ad as fwAD  # noqa: E402
from torch.func import grad, jacrev, jvp, vjp, vmap  # noqa: E402

Tensor = torch.Tensor
STEP = 2  # the dispersion step of every shift_sum / shear case
TOL = 1e-4  # float32 against float64: relative, and absolute relative to the largest value

# The past-last-level-cache profile: 256 KiB L2, 1 MiB L3, 2 cores.
SMALL_CACHES = {"l2": 256 << 10, "l3": 1 << 20, "cores": 2}
SIZES = ("tiny", "cache", "big", "past_llc")


def _profile(size: str) -> Any:
    if size == "past_llc":
        return portops.machine(**SMALL_CACHES)
    return contextlib.nullcontext()


def _shape_class(size: str) -> str:
    return "big" if size == "past_llc" else size


# -- the watch: feature-carrying tensors must not leave torch ---------------------------


class _Watch:
    active = False
    seen: list[str] = []  # noqa: RUF012 (one list, reset per cell)


def _carries_feature(t: Any) -> bool:
    """Whether `t` belongs to a call that needs an autograd feature."""
    if not isinstance(t, Tensor):
        return False
    if t.requires_grad or torch.compiler.is_compiling():
        return True
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if active is not None and active():
        return True
    return fwAD.unpack_dual(t).tangent is not None


@pytest.fixture(scope="module", autouse=True)
def _watched() -> Iterator[None]:
    """Record NumPy views and private-operator calls of feature-carrying tensors while a
    cell's portops side runs (installed once: plans made later call the wrappers)."""
    original_numpy = torch.Tensor.numpy

    def numpy(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        if _Watch.active and self.ndim > 0 and _carries_feature(self):
            _Watch.seen.append(f"a NumPy view of a {tuple(self.shape)} tensor")
        return original_numpy(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "numpy", numpy)
        try:  # the private operator of vecdot's BLAS row dots, where it is used
            row_dots = importlib.import_module("portops._backends.torch.vecdot")
        except ImportError:
            row_dots = None
        private = getattr(row_dots, "_ROW_DOTS", None)
        if private is not None:

            def watched_private(*args: Any) -> Any:
                if _Watch.active and any(_carries_feature(a) for a in args):
                    _Watch.seen.append("the private ATen operator of the row dots")
                return private(*args)

            mp.setattr(row_dots, "_ROW_DOTS", watched_private)
            portops._plans.clear()  # plans made before hold the operator itself
        yield
    portops._plans.clear()


@contextlib.contextmanager
def _watch(enabled: bool) -> Iterator[list[str]]:
    _Watch.seen = []
    _Watch.active = enabled
    try:
        yield _Watch.seen
    finally:
        _Watch.active = False


# -- plain torch formulations (the references) ------------------------------------------


def _offsets(channels: int) -> list[int]:
    return [c * STEP for c in range(channels)]


def ref_shift_sum(x: Tensor, mask: Tensor | None = None) -> Tensor:
    xm = x if mask is None else x * mask
    offsets = _offsets(x.shape[-3])
    grow = offsets[-1]
    parts = [F.pad(xm.select(-3, c), (o, grow - o)) for c, o in enumerate(offsets)]
    return torch.stack(parts).sum(0)


def ref_adjoint(y: Tensor, channels: int, mask: Tensor | None = None) -> Tensor:
    offsets = _offsets(channels)
    width = y.shape[-1] - offsets[-1]
    x = torch.stack([y[..., o : o + width] for o in offsets], dim=-3)
    return x if mask is None else x * mask


def ref_pinv(y: Tensor, channels: int, mask: Tensor) -> Tensor:
    shape = (channels, y.shape[-2], y.shape[-1] - _offsets(channels)[-1])
    phi = ref_shift_sum((mask * mask).expand(shape))
    return ref_adjoint(y / phi, channels, mask)


def ref_shear(x: Tensor) -> Tensor:
    offsets = _offsets(x.shape[-3])
    grow = offsets[-1]
    parts = [F.pad(x.select(-3, c), (o, grow - o)) for c, o in enumerate(offsets)]
    return torch.stack(parts, dim=-3)


def ref_unshear(y: Tensor) -> Tensor:
    offsets = _offsets(y.shape[-3])
    width = y.shape[-1] - offsets[-1]
    return torch.stack([y.select(-3, c)[..., o : o + width] for c, o in enumerate(offsets)], -3)


def ref_vecdot(a: Tensor, b: Tensor, keepdims: bool = False) -> Tensor:
    return (a * b).sum(-1, keepdim=keepdims)


# -- the ops: portops on float32, the reference on float64 ------------------------------


@dataclass(frozen=True)
class Case:
    op: Callable[..., Tensor]
    ref: Callable[..., Tensor]
    shapes: tuple[tuple[int, ...], ...]


X_SHAPES = {"tiny": (1, 3, 4, 8), "cache": (2, 8, 64, 64), "big": (2, 8, 256, 256)}
V_SHAPES = {"tiny": (8, 12), "cache": (256, 256), "big": (1024, 1024)}
AIJ = {"tiny": ((1, 2, 3), (1, 3, 4)), "cache": ((4, 128, 128),) * 2, "big": ((16, 256, 256),) * 2}
BIJ = {
    "tiny": ((2, 6, 8), (2, 8, 2)),
    "cache": ((64, 32, 32), (64, 32, 4)),
    "big": ((256, 64, 64), (256, 64, 4)),
}
SQUARE = {"tiny": 10, "cache": 256, "big": 1024}


def _mask(shape: tuple[int, ...]) -> Tensor:
    gen = torch.Generator().manual_seed(7)
    return 0.5 + torch.rand(shape, generator=gen)  # away from 0: Phi stays well scaled


def _y_shape(x_shape: tuple[int, ...], keep_channels: bool) -> tuple[int, ...]:
    b, c, h, w = x_shape
    wide = w + _offsets(c)[-1]
    return (b, c, h, wide) if keep_channels else (b, h, wide)


def _case(name: str, size: str) -> Case:
    s = _shape_class(size)
    x_shape = X_SHAPES[s]
    b, c, h, w = x_shape
    if name == "shift_sum":
        return Case(lambda x: portops.shift_sum(x, STEP), ref_shift_sum, (x_shape,))
    if name == "shift_sum_mask":
        m32 = _mask((c, h, w))
        m64 = m32.double()
        return Case(
            lambda x: portops.shift_sum(x, STEP, mask=m32),
            lambda x: ref_shift_sum(x, m64),
            (x_shape,),
        )
    if name == "adjoint":
        return Case(
            lambda y: portops.shift_sum_adjoint(y, STEP, channels=c),
            lambda y: ref_adjoint(y, c),
            (_y_shape(x_shape, False),),
        )
    if name == "adjoint_one_channel":
        return Case(
            lambda y: portops.shift_sum_adjoint(y, STEP, channels=1),
            lambda y: ref_adjoint(y, 1),
            ((b * c, h, w),),
        )
    if name == "pinv_mask":
        m32 = _mask((c, h, w))
        m64 = m32.double()
        return Case(
            lambda y: portops.shift_sum_pinv(y, STEP, channels=c, mask=m32),
            lambda y: ref_pinv(y, c, m64),
            (_y_shape(x_shape, False),),
        )
    if name == "shear":
        return Case(lambda x: portops.shear(x, STEP), ref_shear, (x_shape,))
    if name == "unshear":
        return Case(lambda y: portops.unshear(y, STEP), ref_unshear, (_y_shape(x_shape, True),))
    v = V_SHAPES[s]
    if name == "vecdot":
        return Case(lambda a, b: portops.vecdot(a, b), ref_vecdot, (v, v))
    if name == "vecdot_keepdims_one_vector":
        return Case(
            lambda a, b: portops.vecdot(a, b, keepdims=True),
            lambda a, b: ref_vecdot(a, b, keepdims=True),
            (v, v[-1:]),
        )
    equation, shapes = {
        "einsum_ij,ij->i": ("ij,ij->i", (v, v)),
        "einsum_aij,ajk->aik": ("aij,ajk->aik", AIJ[s]),
        "einsum_bij,bjk->bik": ("bij,bjk->bik", BIJ[s]),
        "einsum_ii->i": ("ii->i", ((SQUARE[s],) * 2,)),
        "einsum_ij->ji": ("ij->ji", (v,)),
    }[name]
    return Case(
        lambda *ops: portops.einsum(equation, *ops),
        lambda *ops: torch.einsum(equation, *ops).clone(),  # a copy, as portops returns
        shapes,
    )


OPS = (
    "shift_sum",
    "shift_sum_mask",
    "adjoint",
    "adjoint_one_channel",
    "pinv_mask",
    "shear",
    "unshear",
    "vecdot",
    "vecdot_keepdims_one_vector",
    "einsum_ij,ij->i",
    "einsum_aij,ajk->aik",
    "einsum_bij,bjk->bik",
    "einsum_ii->i",
    "einsum_ij->ji",
)


# -- the features: one harness for both sides --------------------------------------------


@dataclass(frozen=True)
class Aux:
    """Values every feature draws on, in the dtype of the side that runs."""

    w: Tensor  # output weights (a cotangent)
    tangents: tuple[Tensor, ...]  # one per input: forward-mode directions, vmap's second item
    directions: tuple[Tensor, ...]  # one per input: the double backward's directions


def _loss(fn: Callable[..., Tensor], w: Tensor) -> Callable[..., Tensor]:
    """A scalar with a non-zero second derivative for linear and bilinear ops alike."""

    def loss(*xs: Tensor) -> Tensor:
        out = fn(*xs)
        return (out * w).sum() + 0.5 * (out * out).sum()

    return loss


def _leaves(xs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return tuple(x.detach().clone().requires_grad_() for x in xs)


def _argnums(xs: tuple[Tensor, ...]) -> tuple[int, ...]:
    return tuple(range(len(xs)))


def f_backward(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    leaves = _leaves(xs)
    out = fn(*leaves)
    assert out.requires_grad, "the result does not require grad"
    ((out * aux.w).sum() + 0.5 * (out * out).sum()).backward()
    return [out.detach(), *[t.grad for t in leaves]]


def f_double_backward(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    leaves = _leaves(xs)
    grads = torch.autograd.grad(_loss(fn, aux.w)(*leaves), leaves, create_graph=True)
    inner = sum((g * d).sum() for g, d in zip(grads, aux.directions, strict=True))
    second = torch.autograd.grad(inner, leaves)
    return [*(g.detach() for g in grads), *second]


def f_forward_ad(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    with fwAD.dual_level():
        duals = [fwAD.make_dual(x, t) for x, t in zip(xs, aux.tangents, strict=True)]
        primal, tangent = fwAD.unpack_dual(fn(*duals))
        assert tangent is not None, "the result carries no tangent"
        return [primal.clone(), tangent.clone()]


def f_func_grad(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    return list(grad(_loss(fn, aux.w), argnums=_argnums(xs))(*xs))


def _batched(xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    return [torch.stack([x, t]) for x, t in zip(xs, aux.tangents, strict=True)]


def f_vmap(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    return [vmap(fn)(*_batched(xs, aux))]


def f_jvp(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    return list(jvp(fn, xs, aux.tangents))


def f_vjp(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    out, pullback = vjp(fn, *xs)
    return [out, *pullback(aux.w)]


def f_jacrev(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    # A scalar function: the Jacobian is the size of the inputs, at every size class.
    def scalar(*a: Tensor) -> Tensor:
        return (fn(*a) * aux.w).sum()

    return list(jacrev(scalar, argnums=_argnums(xs))(*xs))


def f_vmap_grad(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    return list(vmap(grad(_loss(fn, aux.w), argnums=_argnums(xs)))(*_batched(xs, aux)))


def f_in_place(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    leaves = _leaves(xs)
    out = fn(*leaves)
    out.sigmoid_()  # in place on the result; its backward reads the result
    (out * aux.w).sum().backward()
    return [out.detach(), *[t.grad for t in leaves]]


def f_inference_mode(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    leaves = _leaves(xs)  # parameters that require grad, evaluated for inference
    with torch.inference_mode():
        out = fn(*leaves)
    assert not out.requires_grad
    return [out]


def f_compile(fn: Callable[..., Tensor], xs: tuple[Tensor, ...], aux: Aux) -> list[Tensor]:
    torch._dynamo.reset()  # a fresh cache: no recompilation limit reached across cells
    loss = torch.compile(_loss(fn, aux.w), fullgraph=True, backend="aot_eager", dynamic=False)
    leaves = _leaves(xs)
    value = loss(*leaves)
    value.backward()
    return [value.detach(), *[t.grad for t in leaves]]


FEATURES: dict[str, Callable[..., list[Tensor]]] = {
    "backward": f_backward,
    "double_backward": f_double_backward,
    "forward_ad": f_forward_ad,
    "func_grad": f_func_grad,
    "vmap": f_vmap,
    "jvp": f_jvp,
    "vjp": f_vjp,
    "jacrev": f_jacrev,
    "vmap_grad": f_vmap_grad,
    "in_place": f_in_place,
    "inference_mode": f_inference_mode,
    "compile": f_compile,
}
COMPILED_SIZES = ("tiny", "big")  # compiling is slow: the smallest and a large size


def _seed(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def _inputs(case: Case) -> tuple[tuple[Tensor, ...], Aux]:
    """float32 inputs and their Aux (float32 values, so that both sides see the same)."""
    gen = torch.Generator().manual_seed(_seed(*map(str, case.shapes)))
    xs = tuple(torch.randn(s, generator=gen) for s in case.shapes)
    with torch.no_grad():
        out_shape = case.ref(*(x.double() for x in xs)).shape
    aux = Aux(
        torch.randn(out_shape, generator=gen),
        tuple(torch.randn(s, generator=gen) for s in case.shapes),
        tuple(torch.randn(s, generator=gen) for s in case.shapes),
    )
    return xs, aux


def _double(xs: tuple[Tensor, ...], aux: Aux) -> tuple[tuple[Tensor, ...], Aux]:
    def d(ts: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return tuple(t.double() for t in ts)

    return d(xs), Aux(aux.w.double(), d(aux.tangents), d(aux.directions))


# Features whose float64 reference another feature's gives: (that feature, its results).
def _loss_value(out: Tensor, w: Tensor) -> Tensor:
    return (out * w).sum() + 0.5 * (out * out).sum()


SHARED_REFERENCES: dict[str, tuple[str, Callable[[list[Tensor], Aux], list[Tensor]]]] = {
    "func_grad": ("backward", lambda r, aux: r[1:]),
    "compile": ("backward", lambda r, aux: [_loss_value(r[0], aux.w), *r[1:]]),
    "inference_mode": ("backward", lambda r, aux: r[:1]),
    "jvp": ("forward_ad", lambda r, aux: r),
    "jacrev": ("vjp", lambda r, aux: r[1:]),
}


class _Cell:
    """The inputs and float64 references of the last (op, size) a worker ran: the
    cells of one (op, size) run one after another and share them."""

    key: tuple[str, str] | None = None
    case: Case
    inputs: tuple[tuple[Tensor, ...], Aux]
    inputs64: tuple[tuple[Tensor, ...], Aux]
    references: dict[str, list[Tensor]]


def _prepared(op: str, size: str) -> type[_Cell]:
    if _Cell.key != (op, size):
        _Cell.key = None
        _Cell.case = _case(op, size)
        _Cell.inputs = _inputs(_Cell.case)
        _Cell.inputs64 = _double(*_Cell.inputs)
        _Cell.references = {}
        _Cell.key = (op, size)
    return _Cell


def _reference(cell: type[_Cell], feature: str) -> list[Tensor]:
    source, select = SHARED_REFERENCES.get(feature, (feature, lambda r, aux: r))
    if source not in cell.references:
        cell.references[source] = FEATURES[source](cell.case.ref, *cell.inputs64)
    return select(cell.references[source], cell.inputs64[1])


def _assert_close(got: list[Tensor], want: list[Tensor], what: str) -> None:
    """Each result within TOL of the float64 reference, relative to the element and to
    the reference's largest value (float32 arithmetic: cheap at 1M elements)."""
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for k, (g, r) in enumerate(zip(got, want, strict=True)):
        label = f"{what}, result {k}"
        assert g is not None, f"{label}: None (no gradient reached the input)"
        assert g.dtype == torch.float32, f"{label}: dtype {g.dtype}, expected torch.float32"
        assert g.shape == r.shape, f"{label}: shape {tuple(g.shape)}, expected {tuple(r.shape)}"
        if not r.numel():
            continue
        expected = r.detach().to(torch.float32)  # rounding it costs 6e-8, far below TOL
        size = expected.abs()
        scale = max(1.0, float(size.max()))
        error = (g.detach() - expected).abs_()
        excess = error.sub_(size.mul_(TOL))  # beyond the relative tolerance
        if float(excess.max()) > TOL * scale or bool(excess.isnan().any()):
            bad = int(((excess > TOL * scale) | excess.isnan()).sum())
            worst = float((g.detach() - expected).abs().max())
            raise AssertionError(
                f"{label}: {bad} of {g.numel()} elements differ from the float64 reference "
                f"(largest difference {worst:.3g}; allowed {TOL:g} relative + {TOL * scale:.3g})"
            )


def _cells() -> list[Any]:
    cells = []
    for op in OPS:
        for size in SIZES:
            for feature in FEATURES:
                if feature == "compile" and size not in COMPILED_SIZES:
                    continue
                cells.append(pytest.param(op, size, feature, id=f"{op}-{size}-{feature}"))
    return cells


@pytest.mark.parametrize(("op", "size", "feature"), _cells())
def test_transform_matrix(op: str, size: str, feature: str) -> None:
    cell = _prepared(op, size)
    want = _reference(cell, feature)
    with _profile(size), _watch(feature != "inference_mode") as left_torch:
        got = FEATURES[feature](cell.case.op, *cell.inputs)
    _assert_close(got, want, f"{op} at {size}, {feature}")
    assert not left_torch, (
        f"{op} at {size}, {feature}: a call that needs {feature} left torch: "
        + "; ".join(sorted(set(left_torch)))
    )


# -- adjoint pairs: dot tests and vjp = adjoint, at every size ----------------------------


def _pairs(size: str) -> dict[str, tuple[Callable[..., Tensor], Callable[..., Tensor], Any]]:
    s = _shape_class(size)
    x_shape = X_SHAPES[s]
    b, c, h, w = x_shape
    m = _mask((c, h, w)).double()
    one = (b * c, 1, h, w)
    return {
        "shift_sum": (
            lambda x: portops.shift_sum(x, STEP),
            lambda y: portops.shift_sum_adjoint(y, STEP, channels=c),
            x_shape,
        ),
        "shift_sum_mask": (
            lambda x: portops.shift_sum(x, STEP, mask=m),
            lambda y: portops.shift_sum_adjoint(y, STEP, channels=c, mask=m),
            x_shape,
        ),
        "one_channel": (
            lambda x: portops.shift_sum(x, STEP),
            lambda y: portops.shift_sum_adjoint(y, STEP, channels=1),
            one,
        ),
        "shear": (lambda x: portops.shear(x, STEP), lambda y: portops.unshear(y, STEP), x_shape),
    }


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pair", ["shift_sum", "shift_sum_mask", "one_channel", "shear"])
def test_adjoint_pairs(pair: str, size: str) -> None:
    """``<A x, y> == <x, A^H y>``, and torch.func's vjp of A is A^H."""
    forward, adjoint, x_shape = _pairs(size)[pair]
    gen = torch.Generator().manual_seed(_seed(pair, size))
    with _profile(size):
        x = torch.randn(x_shape, generator=gen, dtype=torch.float64)
        ax = forward(x)
        y = torch.randn(ax.shape, generator=gen, dtype=torch.float64)
        ahy = adjoint(y)
        lhs, rhs = float((ax * y).sum()), float((x * ahy).sum())
        assert math.isclose(lhs, rhs, rel_tol=1e-10, abs_tol=1e-10), (lhs, rhs)
        _, pullback = vjp(forward, x)
        (pulled,) = pullback(y)
    torch.testing.assert_close(pulled, ahy, rtol=1e-12, atol=1e-12)


# -- half precision: torch results match torch's own accumulation --------------------------

HALF_EINSUM = [
    ("aij,ajk->aik", ((1, 2, 3), (1, 3, 4))),  # the issue's example
    ("aij,ajk->aik", ((4, 64, 64), (4, 64, 64))),
    ("bij,bjk->bik", ((8, 32, 32), (8, 32, 4))),
    ("ij,ij->i", ((8, 8), (8, 8))),
    ("ij,ij->i", ((300, 64), (300, 64))),
    ("ij,jk->ik", ((64, 256), (256, 32))),
    ("ii->i", ((50, 50),)),
    ("ij->ji", ((30, 40),)),
]


def _half(shapes: Any, dtype: Any, seed: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("equation", "shapes"), HALF_EINSUM, ids=lambda v: str(v))
def test_half_einsum_matches_torch(equation: str, shapes: Any, dtype: str) -> None:
    dt = getattr(torch, dtype)
    ops = _half(shapes, dt, _seed(equation, str(shapes)))
    got = portops.einsum(equation, *ops)
    assert got.dtype == dt
    torch.testing.assert_close(got, torch.einsum(equation, *ops))  # half tolerances
    # The gradients too, against torch.einsum's.
    leaves = [o.clone().requires_grad_() for o in ops]
    theirs = [o.clone().requires_grad_() for o in ops]
    w = _half([got.shape], dt, 1)[0]
    mine = torch.autograd.grad((portops.einsum(equation, *leaves) * w).sum(), leaves)
    expected = torch.autograd.grad((torch.einsum(equation, *theirs) * w).sum(), theirs)
    for g, e in zip(mine, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_half_einsum_issue_example_is_exact() -> None:
    """``aij,ajk->aik`` in float16 at (1, 2, 3) x (1, 3, 4) equals torch.einsum's result
    (it once differed by 5.9e-3 in 2 of 8 elements)."""
    for seed in range(20):
        a, b = _half(((1, 2, 3), (1, 3, 4)), torch.float16, seed)
        got = portops.einsum("aij,ajk->aik", a, b)
        want = torch.einsum("aij,ajk->aik", a, b)
        assert torch.equal(got, want), (seed, (got.float() - want.float()).abs().max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("s1", "s2", "keepdims"),
    [((8, 12), (8, 12), False), ((256, 128), (256, 128), False), ((300, 64), (64,), True)],
)
def test_half_vecdot_matches_torch(s1: Any, s2: Any, keepdims: bool, dtype: str) -> None:
    dt = getattr(torch, dtype)
    a, b = _half((s1, s2), dt, _seed(str(s1), str(s2)))
    got = portops.vecdot(a, b, keepdims=keepdims)
    want = torch.einsum("...k,...k->...", a, b)  # torch's GEMM: float32 accumulation
    if keepdims:
        want = want.unsqueeze(-1)
    assert got.dtype == dt
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("shape", [(1, 3, 4, 8), (2, 8, 64, 64)])
def test_half_shift_sum_matches_torch(shape: Any, masked: bool, dtype: str) -> None:
    """Sums in float32 rounded once, as torch's half reductions accumulate."""
    dt = getattr(torch, dtype)
    (x,) = _half((shape,), dt, _seed(str(shape)))
    mask = _mask(shape[1:]).to(dt) if masked else None
    got = portops.shift_sum(x, STEP, mask=mask)
    want = ref_shift_sum(x.float(), None if mask is None else mask.float()).to(dt)
    assert got.dtype == dt
    torch.testing.assert_close(got, want)
    y = _half([got.shape], dt, 3)[0]
    got_adjoint = portops.shift_sum_adjoint(y, STEP, channels=shape[1], mask=mask)
    want_adjoint = ref_adjoint(y.float(), shape[1], None if mask is None else mask.float())
    torch.testing.assert_close(got_adjoint, want_adjoint.to(dt))


# -- the issue's reproducers ----------------------------------------------------------------


def _randn(*shape: int, seed: int = 0, **kwargs: Any) -> Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), **kwargs)


def _overlaps(a: Tensor, b: Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()


@pytest.mark.parametrize("mode", ["plain", "requires_grad", "inference_mode"])
def test_adjoint_one_channel_does_not_alias_y(mode: str) -> None:
    y = _randn(4, 5, 6, requires_grad=mode == "requires_grad")
    kept = y.detach().clone()
    ctx = torch.inference_mode() if mode == "inference_mode" else contextlib.nullcontext()
    with ctx:
        x = portops.shift_sum_adjoint(y, 1, channels=1)
    assert x.shape == (4, 1, 5, 6)
    assert not _overlaps(x, y)
    with torch.no_grad():
        x.detach().fill_(-7.0)
    torch.testing.assert_close(y.detach(), kept, rtol=0, atol=0)


def _shift1(x: Tensor) -> Tensor:
    """shift_sum with step 1 in plain torch."""
    c = x.shape[-3]
    return torch.stack([F.pad(x.select(-3, k), (k, c - 1 - k)) for k in range(c)]).sum(0)


ISSUE_FORWARD_AD = {
    "shift_sum": (lambda x: portops.shift_sum(x, 1), _shift1, ((2, 3, 4, 6),)),
    "vecdot_256x128": (portops.vecdot, ref_vecdot, ((256, 128), (256, 128))),
    "vecdot_500x500": (portops.vecdot, ref_vecdot, ((500, 500), (500, 500))),
    "einsum_ij,ij->i_300x64": (
        lambda a, b: portops.einsum("ij,ij->i", a, b),
        lambda a, b: torch.einsum("ij,ij->i", a, b),
        ((300, 64), (300, 64)),
    ),
    "einsum_aij,ajk->aik": (
        lambda a, b: portops.einsum("aij,ajk->aik", a, b),
        lambda a, b: torch.einsum("aij,ajk->aik", a, b),
        ((1, 2, 3), (1, 3, 4)),
    ),
}


@pytest.mark.parametrize("call", ISSUE_FORWARD_AD)
def test_issue_forward_ad(call: str) -> None:
    """Dual numbers through each call: no NotImplementedError, the right tangent."""
    op, ref, shapes = ISSUE_FORWARD_AD[call]
    xs = [_randn(*s, seed=k, dtype=torch.float64) for k, s in enumerate(shapes)]
    ts = [_randn(*s, seed=10 + k, dtype=torch.float64) for k, s in enumerate(shapes)]
    results = []
    for fn in (op, ref):
        with fwAD.dual_level():
            out = fn(*[fwAD.make_dual(x, t) for x, t in zip(xs, ts, strict=True)])
            primal, tangent = fwAD.unpack_dual(out)
            results.append((primal.clone(), tangent.clone()))
    (p, t), (rp, rt) = results
    torch.testing.assert_close(p, rp)
    torch.testing.assert_close(t, rt)


def test_issue_vmap_and_grad_of_shift_sum() -> None:
    x = _randn(5, 3, 4, 6, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda a: portops.shift_sum(a, 1))(x), _shift1(x))
    g = grad(lambda a: (portops.shift_sum(a, 1) ** 2).sum())(x)
    torch.testing.assert_close(g, grad(lambda a: (_shift1(a) ** 2).sum())(x))
    t = _randn(5, 3, 4, 6, seed=1, dtype=torch.float64)
    out, tangent = jvp(lambda a: portops.shift_sum(a, 1), (x,), (t,))
    torch.testing.assert_close(out, _shift1(x))
    torch.testing.assert_close(tangent, _shift1(t))


@pytest.mark.parametrize("shape", [(3, 256, 128), (3, 500, 500)])
def test_issue_vmap_vecdot(shape: tuple[int, ...]) -> None:
    a = _randn(*shape, dtype=torch.float64)
    b = _randn(*shape, seed=1, dtype=torch.float64)
    torch.testing.assert_close(vmap(portops.vecdot)(a, b), ref_vecdot(a, b))
    ta = _randn(*shape, seed=2, dtype=torch.float64)
    tb = _randn(*shape, seed=3, dtype=torch.float64)
    out, tangent = jvp(portops.vecdot, (a, b), (ta, tb))
    torch.testing.assert_close(out, ref_vecdot(a, b))
    torch.testing.assert_close(tangent, ref_vecdot(ta, b) + ref_vecdot(a, tb))


def test_issue_vmap_of_grad_of_vecdot_past_a_million_elements() -> None:
    a = _randn(4, 512, 512)  # 1M elements
    b = _randn(4, 512, 512, seed=1)
    ga, gb = vmap(grad(lambda u, v: portops.vecdot(u, v).sum(), argnums=(0, 1)))(a, b)
    torch.testing.assert_close(ga, b, rtol=0, atol=0)
    torch.testing.assert_close(gb, a, rtol=0, atol=0)


def test_issue_grad_and_jacrev_of_the_adjoint() -> None:
    y = _randn(2, 4, 10, dtype=torch.float64)

    def adjoint(t: Tensor) -> Tensor:
        return portops.shift_sum_adjoint(t, 2, channels=3)

    w = _randn(2, 3, 4, 6, seed=1, dtype=torch.float64)
    g = grad(lambda t: (adjoint(t) * w).sum())(y)
    torch.testing.assert_close(g, ref_shift_sum(w))
    jac = jacrev(adjoint)(y)  # (2, 3, 4, 6, 2, 4, 10)
    want = jacrev(lambda t: ref_adjoint(t, 3))(y)
    torch.testing.assert_close(jac, want)


def test_issue_vmap_of_einsum_rows() -> None:
    a = _randn(3, 300, 64, dtype=torch.float64)
    b = _randn(3, 300, 64, seed=1, dtype=torch.float64)
    got = vmap(lambda u, v: portops.einsum("ij,ij->i", u, v))(a, b)
    torch.testing.assert_close(got, ref_vecdot(a, b))


def _relu_case(name: str) -> tuple[Callable[..., Tensor], Callable[..., Tensor], Any]:
    """The issue's in-place calls at >= 1M elements: op, reference, input shapes."""
    if name == "shift_sum":
        return (lambda x: portops.shift_sum(x, 2), ref_shift_sum, ((2, 8, 256, 256),))
    if name == "shift_sum_mask":
        m = _mask((8, 256, 256))
        return (
            lambda x: portops.shift_sum(x, 2, mask=m),
            lambda x: ref_shift_sum(x, m.double()),
            ((2, 8, 256, 256),),
        )
    if name == "adjoint_one_channel":
        return (
            lambda y: portops.shift_sum_adjoint(y, 2, channels=1),
            lambda y: ref_adjoint(y, 1),
            ((16, 256, 256),),
        )
    return (
        lambda a, b: portops.vecdot(a, b, keepdims=True),
        lambda a, b: ref_vecdot(a, b, keepdims=True),
        ((1024, 1024), (1024, 1024)),
    )


@pytest.mark.parametrize("name", ["shift_sum", "shift_sum_mask", "adjoint_one_channel", "vecdot"])
def test_issue_relu_in_place_on_results(name: str) -> None:
    """``op(x).relu_()`` then backward, with x requiring grad, at >= 1M elements."""
    op, ref, shapes = _relu_case(name)
    xs = [_randn(*s, seed=k).requires_grad_() for k, s in enumerate(shapes)]
    out = op(*xs)
    out.relu_()
    w = _randn(*out.shape, seed=9)
    (out * w).sum().backward()
    # The reference: the same derivative, the ReLU's mask taken from portops' own result.
    xs64 = [x.detach().double().requires_grad_() for x in xs]
    ref_out = ref(*xs64)
    torch.testing.assert_close(out.detach().double(), ref_out.detach().relu(), rtol=TOL, atol=TOL)
    (ref_out * (out.detach() > 0) * w.double()).sum().backward()
    for x, x64 in zip(xs, xs64, strict=True):
        scale = max(1.0, float(x64.grad.abs().max()))
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=TOL, atol=TOL * scale)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_issue_huge_channel_count_fails_fast(library: str) -> None:
    y = np.ones((64, 64)) if library == "numpy" else torch.ones(64, 64, dtype=torch.float64)
    portops.shift_sum_adjoint(y, 0, channels=2)  # imports and first-call set-up, not timed
    start = time.perf_counter()
    with pytest.raises(ValueError, match="channels=1000000000"):
        portops.shift_sum_adjoint(y, 0, channels=10**9)
    assert time.perf_counter() - start < 1.0
