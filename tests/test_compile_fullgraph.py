"""The shift_sum family and vecdot trace into one graph under torch.compile(fullgraph=True).

einsum is compiled without fullgraph (its planner runs in Python and breaks the graph);
see tests/test_einsum.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import portops

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("name", "fn", "shapes"),
    [
        ("shift_sum", lambda a: portops.shift_sum(a, 2), [(2, 3, 4, 5)]),
        (
            "shift_sum_pinv",
            lambda a: portops.shift_sum_pinv(a, 1, channels=3),
            [(2, 4, 7)],
        ),
        ("vecdot", lambda a, b: portops.vecdot(a, b), [(3, 4), (3, 4)]),
    ],
)
def test_fullgraph_forward_and_backward(name, fn, shapes):
    inputs = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    compiled = torch.compile(lambda *a: fn(*a).sum(), fullgraph=True, backend="aot_eager")
    value = compiled(*inputs)
    value.backward()
    eager_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    expected = fn(*eager_inputs).sum()
    expected.backward()
    torch.testing.assert_close(value, expected)
    for got, want in zip(inputs, eager_inputs, strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def test_vecdot_traces_past_its_plans():
    """A plan made by an eager call is not what torch.compile traces (plans may hold
    NumPy views): a plan that raises, kept under the key of the traced call, is never
    run while tracing."""
    from portops._ops import vecdot as vecdot_module

    a, b = torch.ones(3, 4), torch.full((3, 4), 2.0)
    vecdot_module.PLANS.clear()
    portops.vecdot(a, b)
    (key,) = vecdot_module.PLANS._plans

    def sentinel(x1, x2):
        raise AssertionError("a plan was traced")

    vecdot_module.PLANS._plans[key] = sentinel
    try:
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, y: portops.vecdot(x, y), fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(a, b), torch.full((3,), 8.0))
    finally:
        vecdot_module.PLANS.clear()


def test_a_process_first_tensor_call_can_be_the_compiled_one():
    """Nothing a first tensor call sets up (the plan key's readers) is missing while
    torch.compile traces it: in a fresh process, shift_sum then vecdot, compiled first."""
    code = (
        "import torch, portops\n"
        "c = lambda f: torch.compile(f, fullgraph=True, backend='eager')\n"
        "print(float(c(lambda a: portops.shift_sum(a, 2).sum())(torch.ones(2, 3, 4, 5))))\n"
        "print(float(c(lambda a: portops.vecdot(a, a).sum())(torch.ones(3, 4))))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["120.0", "12.0"]


@pytest.mark.parametrize("mask_dtype", [torch.uint8, torch.int32, torch.bool])
def test_integer_and_bool_masks_trace(mask_dtype):
    """A float x with an integer mask (a binary uint8 mask, say) promotes by torch's
    rules inside the graph as in eager calls."""
    x, y = torch.randn(2, 3, 4, 6), torch.randn(2, 4, 8)
    m = (torch.rand(4, 6) > 0.5).to(mask_dtype)
    calls = [
        lambda x, y, m: portops.shift_sum(x, 1, mask=m),
        lambda x, y, m: portops.shift_sum_adjoint(y, 1, channels=3, mask=m),
        lambda x, y, m: portops.shift_sum_pinv(y, 1, channels=3, mask=m),
        lambda x, y, m: portops.vecdot(x, m.to(x.dtype) if mask_dtype == torch.bool else m),
    ]
    for fn in calls:
        torch._dynamo.reset()
        got = torch.compile(fn, fullgraph=True, backend="eager")(x, y, m)
        want = fn(x, y, m)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)


_NO_WARNINGS = """
import warnings
import torch, portops
x, m = torch.rand(2, 4, 8, 8), torch.rand(8, 8)
y = portops.shift_sum(x, 2, mask=m)
calls = [
    lambda: portops.shift_sum(x, 2, mask=m),
    lambda: portops.shift_sum_pinv(y, 2, mask=m, channels=4),
    lambda: portops.shift_sum_pinv(y, 2, channels=4),
    lambda: portops.Dispersion(2, 4, mask=m).pinv(y),  # made in the graph too
    lambda: portops.einsum("bcij,ij->bc", x, m),
    lambda: portops.vecdot(x, x),
]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for call in calls:
        torch.compile(call, fullgraph=True)()
# Dynamo's (about the functions it traces), or raised in portops (not torch's own imports)
ours = [str(w.message) for w in caught if "lru_cache" in str(w.message) or "portops" in w.filename]
print(len(ours), [w[:200] for w in ours])
"""


def test_compiling_warns_nothing() -> None:
    """Dynamo warns at each lru_cache-wrapped function it traces, array-api-compat's
    helpers among them: compiled calls of every operation (inductor) trace none. A new
    process, as Dynamo warns once per process."""
    out = subprocess.run([sys.executable, "-c", _NO_WARNINGS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("0 []"), out.stdout
