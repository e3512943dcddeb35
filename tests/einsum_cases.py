"""einsum test cases: a fixed list covering numpy's semantics, and a seeded generator."""

from __future__ import annotations

from typing import Any

import numpy as np

# (subscripts, operand shapes)
CASES: list[tuple[str, tuple[tuple[int, ...], ...]]] = [
    # elementwise, transposes, copies
    ("i,i->i", ((5,), (5,))),
    ("ij,ij->ij", ((3, 4), (3, 4))),
    ("ij->ji", ((3, 4),)),
    ("ijk->kij", ((2, 3, 4),)),
    ("ij->ij", ((3, 4),)),
    ("ij", ((3, 4),)),
    ("ji", ((3, 4),)),
    # sums
    ("i->", ((5,),)),
    ("ij->", ((3, 4),)),
    ("ij->j", ((3, 4),)),
    ("ijk->ik", ((2, 3, 4),)),
    # outer products
    ("i,j->ij", ((3,), (4,))),
    ("i,j", ((3,), (4,))),
    ("ij,k->ijk", ((2, 3), (4,))),
    ("i,j,k->ijk", ((2,), (3,), (4,))),
    # GEMM / GEMV / dot in every layout
    ("i,i->", ((5,), (5,))),
    ("i,i", ((5,), (5,))),
    ("ij,j->i", ((3, 4), (4,))),
    ("j,ij->i", ((4,), (3, 4))),
    ("ij,i->j", ((3, 4), (3,))),
    ("ij,jk->ik", ((3, 4), (4, 5))),
    ("ij,jk", ((3, 4), (4, 5))),
    ("ij,kj->ik", ((3, 4), (5, 4))),
    ("ji,jk->ik", ((4, 3), (4, 5))),
    ("ji,kj->ik", ((4, 3), (5, 4))),
    ("ij,jk->ki", ((3, 4), (4, 5))),
    ("ijk,jkl->il", ((2, 3, 4), (3, 4, 5))),
    ("ikj,ljk->il", ((2, 4, 3), (5, 3, 4))),
    # batch and broadcast batch axes
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
    ("bij,jk->bik", ((2, 3, 4), (4, 5))),
    ("bij,bkj->bik", ((2, 3, 4), (2, 5, 4))),
    ("bij,bjk->bik", ((1, 3, 4), (2, 4, 5))),
    ("bij,bj->bi", ((2, 3, 4), (2, 4))),
    ("bnid,bnjd->bnij", ((2, 3, 4, 5), (2, 3, 6, 5))),
    ("bind,bjnd->bnij", ((2, 4, 3, 5), (2, 6, 3, 5))),
    ("bind,jnd->bnij", ((2, 4, 3, 5), (6, 3, 5))),
    ("bnij,bnjd->bnid", ((2, 3, 4, 6), (2, 3, 6, 5))),
    ("bij,bjk->ik", ((2, 3, 4), (2, 4, 5))),
    # ellipsis
    ("...ij,...jk->...ik", ((2, 3, 4), (4, 5))),
    ("...ij,...jk", ((2, 1, 3, 4), (3, 4, 5))),
    ("i...->...", ((3, 2, 4),)),
    ("...,...", ((2, 3), (3,))),
    ("...i,...i->...", ((2, 3), (3,))),
    ("ij...,jk...->ik...", ((2, 3, 4), (3, 5, 4))),
    ("...", ((2, 3),)),
    # diagonals and traces
    ("ii->i", ((4, 4),)),
    ("ii", ((4, 4),)),
    ("ii->", ((4, 4),)),
    ("iii->i", ((3, 3, 3),)),
    ("iij->ji", ((3, 3, 2),)),
    ("jii->ij", ((2, 3, 3),)),
    ("ijij->ij", ((2, 3, 2, 3),)),
    ("ii,i->i", ((3, 3), (3,))),
    ("iij,jk->ik", ((3, 3, 4), (4, 2))),
    ("bii,bjj->bij", ((2, 3, 3), (2, 4, 4))),
    # scalars (0-d operands and outputs)
    ("", ((),)),
    (",->", ((), ())),
    (",ij->ij", ((), (3, 4))),
    ("ij,->ji", ((3, 4), ())),
    ("i,->", ((3,), ())),
    # singleton broadcasting of labelled axes
    ("ij,ij->ij", ((3, 1), (1, 4))),
    ("ij,ij->i", ((3, 1), (1, 4))),
    ("ij,jk->ik", ((3, 1), (4, 5))),
    ("ij,jk->ik", ((1, 4), (4, 1))),
    ("i,i->", ((1,), (5,))),
    ("ij->j", ((1, 4),)),
    ("ij->i", ((3, 1),)),
    ("i,i->i", ((1,), (1,))),
    # 3 to 7 operands
    ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 5))),
    ("ij,jk,kl", ((2, 3), (3, 4), (4, 5))),
    ("ea,fb,abcd,gc,hd->efgh", ((3, 2), (3, 2), (2, 2, 2, 2), (3, 2), (3, 2))),
    ("ab,bc,cd,de->ae", ((2, 3), (3, 4), (4, 3), (3, 2))),
    ("i,i,i->i", ((4,), (4,), (4,))),
    ("i,i,i->", ((4,), (4,), (4,))),
    ("ij,ik,il->jkl", ((3, 2), (3, 2), (3, 2))),
    ("abc,cd,de,ef,fa->b", ((2, 3, 4), (4, 2), (2, 3), (3, 2), (2, 2))),
    ("ab,bc,cd,de,ef,fg->ag", ((2, 3), (3, 2), (2, 3), (3, 2), (2, 3), (3, 2))),
    ("ab,bc,cd,de,ef,fg,gh->ah", ((2, 2),) * 7),
    ("bij,bjk,bkl->bil", ((2, 3, 4), (2, 4, 2), (2, 2, 3))),
    ("ii,ij,jk->k", ((3, 3), (3, 4), (4, 2))),
    ("i,j,k,l->", ((2,), (3,), (2,), (3,))),
    ("ij,jk,ki->", ((3, 4), (4, 5), (5, 3))),
    # empty axes
    ("ij,jk->ik", ((0, 3), (3, 4))),
    ("ij,jk->ik", ((2, 0), (0, 3))),
    ("ii->i", ((0, 0),)),
    ("bij,bjk->bik", ((0, 2, 3), (0, 3, 2))),
    ("bij,bjk->bik", ((2, 3, 0), (2, 0, 4))),
    ("bij,bjk->bik", ((2, 0, 3), (2, 3, 4))),
    ("ijk,jkl->il", ((2, 3, 0), (3, 0, 3))),
    # summed labels of size 1 (a reshape: the result must still be a new array)
    ("ijk->ki", ((3, 1, 4),)),
    ("daa->a", ((1, 2, 2),)),
    # uppercase labels and implicit order (uppercase sorts first)
    ("Ba,aA", ((2, 3), (3, 4))),
    ("iJ,Jk->ki", ((2, 3), (3, 4))),
]

DTYPES = ("float64", "float32", "complex128", "int64", "int32", "bool")


def make_operands(
    shapes: tuple[tuple[int, ...], ...], dtype: str, rng: np.random.Generator
) -> list[np.ndarray]:
    """Random operands of `dtype` (small integers, so integer sums stay exact)."""
    out = []
    for shape in shapes:
        if dtype == "bool":
            a = rng.random(shape) < 0.5
        elif dtype.startswith("int"):
            a = rng.integers(-3, 4, size=shape)
        elif dtype.startswith("complex"):
            a = rng.uniform(-1, 1, size=shape) + 1j * rng.uniform(-1, 1, size=shape)
        else:
            a = rng.uniform(-1, 1, size=shape)
        out.append(np.asarray(a).astype(dtype))
    return out


def random_equation(rng: np.random.Generator) -> tuple[str, tuple[tuple[int, ...], ...]]:
    """A random einsum equation numpy accepts: 1-4 operands, repeated labels,
    size-1 broadcasting, implicit or explicit output, sometimes an ellipsis."""
    pool = list("abcdef")
    sizes = {c: int(rng.integers(2, 4)) for c in pool}
    n_ops = int(rng.integers(1, 5))
    use_ellipsis = rng.random() < 0.2
    ell = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(1, 3))))
    terms, shapes = [], []
    for _ in range(n_ops):
        nd = int(rng.integers(0, 4))
        term = [str(c) for c in rng.choice(pool, size=nd)]
        shape = []
        for c in term:
            shape.append(sizes[c])
        # size-1 broadcasting for labels that appear once in this operand
        for k, c in enumerate(term):
            if term.count(c) == 1 and rng.random() < 0.15:
                shape[k] = 1
        text = "".join(term)
        if use_ellipsis:
            k = int(rng.integers(0, len(ell) + 1))
            sub = ell[len(ell) - k :]
            sub = tuple(1 if rng.random() < 0.2 else d for d in sub)
            text = "..." + text
            shape = [*sub, *shape]
        terms.append(text)
        shapes.append(tuple(shape))
    lhs = ",".join(terms)
    if rng.random() < 0.2:
        return lhs, tuple(shapes)
    labels = sorted({c for t in terms for c in t if c != "."})
    out = [c for c in labels if rng.random() < 0.5]
    rng.shuffle(out)
    out_text = ("..." if use_ellipsis else "") + "".join(out)
    return f"{lhs}->{out_text}", tuple(shapes)


def random_cases(seed: int, count: int) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    """`count` random equations that numpy.einsum accepts."""
    rng = np.random.default_rng(seed)
    found: list[tuple[str, tuple[tuple[int, ...], ...]]] = []
    while len(found) < count:
        eq, shapes = random_equation(rng)
        try:
            np.einsum(eq, *[np.ones(s) for s in shapes])
        except ValueError:
            continue
        found.append((eq, shapes))
    return found


def case_id(case: tuple[str, Any]) -> str:
    eq, shapes = case
    return f"{eq or 'scalar'}|{'x'.join(map(str, shapes))}"
