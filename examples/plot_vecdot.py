"""
Batched inner products with vecdot
==================================

:func:`portops.vecdot` is the array API's ``vecdot``: ``sum(conj(x1) * x2, axis)``
over one axis, broadcasting the others. The fastest way to compute it depends on the
library, the device and the shapes: ``(a * b).sum(-1)`` makes a product temporary,
``bmm`` of ``(n, 1, d) @ (n, d, 1)`` can be 40 times slower on small vectors, and a
fused reduction is best when neither fits. portops picks per call. This example
computes cosine similarities, a projection onto a basis by broadcasting, and a complex
correlation, where the conjugation of the first argument matters.
"""

import matplotlib.pyplot as plt
import numpy as np

import portops

rng = np.random.default_rng(0)

# %%
# Cosine similarity of pairs
# --------------------------
# 2000 pairs of 64-dimensional embeddings, half of them related (noisy copies), half
# unrelated. One ``vecdot`` per quantity, batched over the pairs.

n, d = 2000, 64
a = rng.standard_normal((n, d)).astype(np.float32)
related = rng.random(n) < 0.5
b = np.where(related[:, None], a + 0.8 * rng.standard_normal((n, d)), rng.standard_normal((n, d)))
b = b.astype(np.float32)

cosine = portops.vecdot(a, b) / np.sqrt(portops.vecdot(a, a) * portops.vecdot(b, b))
print(
    "matches (a*b).sum(-1):",
    np.allclose(portops.vecdot(a, b), (a * b).sum(-1), rtol=1e-4, atol=1e-4),
)
print(portops.explain("vecdot", a, b))

fig, ax = plt.subplots(figsize=(6.5, 3.6))
bins = np.linspace(-0.6, 1, 60)
ax.hist(cosine[related], bins=bins, alpha=0.7, label="related pairs")
ax.hist(cosine[~related], bins=bins, alpha=0.7, label="unrelated pairs")
ax.set_xlabel("cosine similarity")
ax.set_ylabel("pairs")
ax.legend()
fig.tight_layout()

# %%
# Projection onto a basis by broadcasting
# ---------------------------------------
# ``vecdot(basis[None, :, :], signals[:, None, :])`` gives every coefficient of every
# signal at once: ``(1, k, t)`` against ``(m, 1, t)`` broadcasts to ``(m, k)``. Here the
# basis is the first cosines of a discrete cosine transform, and the signals are noisy
# mixtures of two of them.

t = np.linspace(0, 1, 256, endpoint=False)
basis = np.stack([np.cos(np.pi * f * (t + 0.5 / t.size)) for f in range(12)])
basis /= np.linalg.norm(basis, axis=1, keepdims=True)
weights = np.zeros((3, 12))
weights[0, [1, 5]] = [1.0, 0.5]
weights[1, [3, 8]] = [0.8, -0.6]
weights[2, [2, 10]] = [-0.7, 0.7]
signals = weights @ basis + 0.02 * rng.standard_normal((3, t.size))
coefficients = portops.vecdot(basis[None, :, :], signals[:, None, :])
print("coefficients shape:", coefficients.shape)

fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for i, s in enumerate(signals):
    axes[0].plot(t, s + 0.3 * i, lw=1)
axes[0].set_title("signals (offset for clarity)")
width = 0.27
for i in range(3):
    axes[1].bar(np.arange(12) + (i - 1) * width, coefficients[i], width, label=f"signal {i}")
axes[1].set_xlabel("basis function")
axes[1].set_title("coefficients from one vecdot")
axes[1].legend()
fig.tight_layout()

# %%
# Complex vectors: the first argument is conjugated
# -------------------------------------------------
# ``vecdot(x1, x2)`` is ``sum(conj(x1) * x2)``, as in the array API standard and
# ``np.vecdot``, so ``vecdot(x, x)`` is the squared norm (its imaginary part 0), and
# the phase of ``vecdot(reference, shifted)`` recovers a phase shift.

phase = np.linspace(-np.pi, np.pi, 9)
reference = np.exp(2j * np.pi * 5 * t)
shifted = reference[None, :] * np.exp(1j * phase)[:, None]
recovered = np.angle(portops.vecdot(reference, shifted))
print("squared norm:", portops.vecdot(reference, reference))
print("phases recovered:", np.allclose(recovered, np.angle(np.exp(1j * phase))))

fig, ax = plt.subplots(figsize=(5, 3.6))
ax.plot(phase, recovered, "o", label="angle(vecdot(reference, shifted))")
ax.plot(phase, np.angle(np.exp(1j * phase)), "k--", lw=1, label="applied phase")
ax.set_xlabel("applied phase (rad)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
