"""
Attention with einsum
=====================

Scaled dot-product attention written with subscripts, as in most transformer code:
scores ``bhid,bhjd->bhij``, weights by a softmax over ``j``, output ``bhij,bhjd->bhid``.
:func:`portops.einsum` runs each contraction as one batched ``matmul`` (transposed
views instead of copies) on NumPy, torch, CuPy or JAX arrays alike, and
:func:`portops.einsum_path` shows the plan. The example also builds the multi-head
layout ``bind`` directly, without transposing the inputs, and checks the result
against ``numpy.einsum`` and torch.
"""

import matplotlib.pyplot as plt
import numpy as np

import portops

BATCH, HEADS, QUERIES, KEYS, DIM = 2, 4, 24, 32, 16
rng = np.random.default_rng(0)

# %%
# Single-layout attention
# -----------------------


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = scores - scores.max(axis=axis, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=axis, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(batch, heads, positions, dim) inputs; returns the output and the weights."""
    scores = portops.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    weights = softmax(scores)
    return portops.einsum("bhij,bhjd->bhid", weights, v), weights


# Keys that are shifted copies of the queries make a visible diagonal pattern.
q = rng.standard_normal((BATCH, HEADS, QUERIES, DIM)).astype(np.float32)
k = 0.3 * rng.standard_normal((BATCH, HEADS, KEYS, DIM)).astype(np.float32)
for h in range(HEADS):
    k[:, h, h : h + QUERIES] += 2 * q[:, h]
v = rng.standard_normal((BATCH, HEADS, KEYS, DIM)).astype(np.float32)

out, weights = attention(q, k, v)
expected = np.einsum(
    "bhij,bhjd->bhid", softmax(np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(DIM)), v
)
print("matches numpy.einsum:", np.allclose(out, expected, atol=1e-5))

path, report = portops.einsum_path("bhid,bhjd->bhij", q, k)
print(report)

# %%
# The attention weights of each head (first batch element): head ``h`` looks ``h``
# positions ahead, as the keys were built.

fig, axes = plt.subplots(1, HEADS, figsize=(12, 3.4), sharey=True)
for h, ax in enumerate(axes):
    ax.imshow(weights[0, h], cmap="Blues", vmin=0, vmax=1)
    ax.set_title(f"head {h}")
    ax.set_xlabel("key j")
axes[0].set_ylabel("query i")
fig.tight_layout()

# %%
# Heads in the middle: ``bind`` without transposes
# ------------------------------------------------
# Projections often come out as ``(batch, positions, heads, dim)``. With subscripts the
# layout is part of the equation, and portops hands ``matmul`` strided views: no
# ``transpose(0, 2, 1, 3).copy()`` is needed.

q_bind = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
k_bind = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
scores_bind = portops.einsum("bind,bjnd->bnij", q_bind, k_bind)
print("same scores:", np.allclose(scores_bind, portops.einsum("bhid,bhjd->bhij", q, k), atol=1e-5))
print(portops.einsum_path("bind,bjnd->bnij", q_bind, k_bind)[1])

# %%
# The same call on torch
# ----------------------
# The arrays' library decides where the contraction runs; the result is a tensor.

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    scores_t = portops.einsum("bhid,bhjd->bhij", torch.from_numpy(q), torch.from_numpy(k))
    print(type(scores_t).__name__, tuple(scores_t.shape))
    print(
        "torch matches:",
        torch.allclose(
            scores_t, torch.einsum("bhid,bhjd->bhij", *map(torch.from_numpy, (q, k))), atol=1e-5
        ),
    )

# %%
# A bilinear form and a trace
# ---------------------------
# Repeated labels (a diagonal, a trace) and three operands work too; the path report
# names each step's kind.

a = rng.standard_normal((5, 6))
m = rng.standard_normal((6, 6))
b = rng.standard_normal((5, 6))
print(
    "x^T M y per row:",
    np.allclose(portops.einsum("ni,ij,nj->n", a, m, b), np.einsum("ni,ij,nj->n", a, m, b)),
)
print("trace:", np.isclose(portops.einsum("ii->", m), np.trace(m)))
print(portops.einsum_path("ni,ij,nj->n", a, m, b)[1])
plt.show()
