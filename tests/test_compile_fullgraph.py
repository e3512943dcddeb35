"""The shift_sum family and vecdot trace into one graph under torch.compile(fullgraph=True).

einsum is compiled without fullgraph (its planner runs in Python and breaks the graph);
see tests/test_einsum.py.
"""

from __future__ import annotations

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
