"""Choosing the contraction order (``"auto"``: estimate-ranked orders, the best few
costed by :mod:`portops._einsum.plan`; else NumPy's or opt_einsum's finders).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._tables import EINSUM
from .parse import Equation, spell
from .plan import all_paths, effective_labels, sizes_of

__all__ = ["PATH_NAMES", "candidates", "normalize_optimize"]

PATH_NAMES = ("auto", "greedy", "optimal")
# Search budgets bounding planning time (factorial in the operands), as opt_einsum's.
_EXHAUSTIVE_MAX = 4
_SUBSETS_MAX = 6
_SEARCH_MAX = 8
_SHORTLIST = 4
_SHORTLIST_RATIO = 4.0

Path = list[tuple[int, ...]]


def normalize_optimize(optimize: Any) -> Any:
    """A hashable form of `optimize` (``"auto"``, ``False``, a finder name, ``("limit",
    name, elements)`` or ``("path", steps)``), or raise TypeError/ValueError."""
    if optimize is True:
        return "auto"
    if optimize is False:
        return False
    if isinstance(optimize, str):
        return _check_name(optimize)
    if isinstance(optimize, (list, tuple)):
        items = list(optimize)
        if (
            len(items) == 2
            and isinstance(items[0], str)
            and items[0] != "einsum_path"
            and not isinstance(items[1], (list, tuple))
        ):
            name = _check_name(items[0])
            limit = items[1]
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise TypeError(
                    "einsum: optimize=(path finder, memory_limit) needs a number of elements "
                    f"as its memory_limit, got {type(limit).__name__}"
                )
            return ("limit", name, int(limit))
        if items and items[0] == "einsum_path":
            items = items[1:]
        for c in items:
            if not isinstance(c, (list, tuple)) or not c:
                raise TypeError(
                    "einsum: an explicit optimize path is a list of tuples of operand "
                    f"positions (numpy's format), got the item {c!r}"
                )
            for p in c:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise TypeError(f"einsum: explicit path positions must be integers, got {p!r}")
        return ("path", tuple(tuple(c) for c in items))
    raise TypeError(
        f"einsum: optimize must be a bool, a path finder name, a (name, memory_limit) tuple "
        f"or an explicit path, got {type(optimize).__name__}"
    )


def _check_name(optimize: str) -> str:
    if optimize in PATH_NAMES:
        return optimize
    try:
        from opt_einsum.paths import get_path_fn

        get_path_fn(optimize)
    except ImportError:
        raise ValueError(
            f"einsum: optimize={optimize!r} needs opt_einsum; without it use one of "
            f"{PATH_NAMES}, True, False or an explicit path"
        ) from None
    except KeyError:
        raise ValueError(
            f"einsum: unknown optimize={optimize!r}; expected one of {PATH_NAMES}, an "
            "opt_einsum path finder name, True, False or an explicit path"
        ) from None
    return optimize


def _check_path(path: Sequence[tuple[int, ...]], n: int) -> None:
    remaining = n
    for c in path:
        if len(set(c)) != len(c) or any(not 0 <= p < remaining for p in c):
            raise ValueError(
                f"einsum: invalid contraction {c} in the explicit path: positions must be "
                f"distinct and below {remaining} (operands left at that step)"
            )
        remaining -= len(c) - 1
    if remaining != 1:
        raise RuntimeError(
            f"einsum: the explicit path leaves {remaining} operands; it must contract all "
            f"{n} into one"
        )


def _finder_path(
    eq: Equation, shapes: Sequence[Sequence[int]], names: dict[int, str], finder: str, limit: Any
) -> Path:
    """The path of NumPy's ``"greedy"``/``"optimal"`` or of an opt_einsum finder."""
    if finder not in PATH_NAMES:  # an opt_einsum name, validated already
        from opt_einsum.paths import get_path_fn

        sets = effective_labels(eq, shapes)
        found = get_path_fn(finder)(sets, set(eq.output), sizes_of(eq, shapes), limit)
        return [tuple(c) for c in found]
    text = spell(eq.inputs, eq.output, names)
    if not all(c.isascii() and c.isalpha() for c in text.replace(",", "").replace("->", "")):
        return _Estimator(eq, shapes, sizes_of(eq, shapes)).greedy()  # over 52 labels
    stubs = [np.broadcast_to(np.empty(()), tuple(s)) for s in shapes]
    path, _ = np.einsum_path(text, *stubs, optimize=finder if limit is None else (finder, limit))
    return [tuple(c) for c in path[1:]]


def _union(masks: Sequence[int], start: int = 0) -> int:
    return functools.reduce(operator.or_, masks, start)


class _Estimator:
    """Quick costs of paths from label sets (bit masks): products plus elements written."""

    def __init__(self, eq: Equation, shapes: Sequence[Sequence[int]], sizes: dict[int, int]):
        sets = effective_labels(eq, shapes)
        labels = sorted(set(eq.output).union(*sets))
        bit = {x: 1 << i for i, x in enumerate(labels)}
        self.weights = [sizes[x] for x in labels]
        self.masks = [sum(bit[x] for x in s) for s in sets]
        self.output = sum(bit[x] for x in eq.output)
        self.sizes: dict[int, int] = {}

    def size(self, mask: int) -> int:
        if mask not in self.sizes:
            self.sizes[mask] = math.prod(w for i, w in enumerate(self.weights) if mask >> i & 1)
        return self.sizes[mask]

    def __call__(self, path: Sequence[tuple[int, ...]]) -> float:
        items = list(self.masks)
        total = 0.0
        for c in path:
            union = _union([items[i] for i in c])
            items = [m for k, m in enumerate(items) if k not in c]
            kept = union & _union(items, self.output)
            total += max(len(c) - 1, 1) * self.size(union) + EINSUM["memory_cost"] * self.size(kept)
            items.append(kept)
        return total

    def greedy(self) -> Path:
        """Contract the pair whose result is smallest relative to its inputs, repeatedly."""
        items = list(self.masks)
        path: Path = []
        while len(items) > 1:
            best: tuple[Any, ...] = (math.inf,)
            for i, j in itertools.combinations(range(len(items)), 2):
                rest = _union([m for k, m in enumerate(items) if k != i and k != j], self.output)
                union = items[i] | items[j]
                gain = self.size(union & rest) - self.size(items[i]) - self.size(items[j])
                best = min(best, (gain, self.size(union), i, j, union & rest))
            *_, i, j, kept = best
            items = [m for k, m in enumerate(items) if k != i and k != j] + [kept]
            path.append((i, j))
        return path

    def best_tree(self) -> tuple[Path, float]:
        """The pairwise order of lowest estimate, by dynamic programming over subsets."""
        n = len(self.masks)
        full = (1 << n) - 1
        labels = [0] * (full + 1)
        for s in range(1, full + 1):
            low = s & -s
            labels[s] = labels[s ^ low] | self.masks[low.bit_length() - 1]
        kept = [labels[s] & (self.output | labels[full ^ s]) for s in range(full + 1)]
        cost = [0.0] * (full + 1)
        split = [0] * (full + 1)
        for s in range(1, full + 1):
            if s & (s - 1) == 0:
                continue  # one operand: nothing to contract
            best, best_a = math.inf, 0
            a = (s - 1) & s
            while a:
                b = s ^ a
                if a < b:
                    c = cost[a] + cost[b] + self.size(kept[a] | kept[b])
                    if c < best:
                        best, best_a = c, a
                a = (a - 1) & s
            cost[s] = best + EINSUM["memory_cost"] * self.size(kept[s])
            split[s] = best_a
        items = [1 << k for k in range(n)]
        path: Path = []

        def emit(s: int) -> None:
            if s & (s - 1):
                emit(split[s])
                emit(s ^ split[s])
                i, j = sorted((items.index(split[s]), items.index(s ^ split[s])))
                del items[j], items[i]
                items.append(s)
                path.append((i, j))

        emit(full)
        return path, cost[full]


def candidates(
    eq: Equation,
    shapes: Sequence[Sequence[int]],
    optimize: Any,
    names: dict[int, str],
    sizes: dict[int, int],
    memory_limit: int | None = None,
) -> list[Path]:
    """Contraction orders worth lowering for `optimize` (already normalised)."""
    n = len(eq.inputs)
    if isinstance(optimize, tuple) and optimize[0] == "path":
        _check_path(optimize[1], n)
        return [list(optimize[1])]
    if n == 1:
        return [[(0,)]]
    if optimize is False:  # numpy's meaning: one step over every operand
        return [[tuple(range(n))]]
    if isinstance(optimize, tuple):  # ("limit", finder, elements): numpy's tuples
        _, finder, limit = optimize
        return [_finder_path(eq, shapes, names, "greedy" if finder == "auto" else finder, limit)]
    if optimize != "auto":
        return [_finder_path(eq, shapes, names, optimize, None)]
    if n == 2:
        return [[(0, 1)]]
    estimate = _Estimator(eq, shapes, sizes)
    cheap = EINSUM["search_cost"]
    greedy = None
    if n > _SUBSETS_MAX:
        greedy = estimate.greedy()
        if n > _SEARCH_MAX or estimate(greedy) <= cheap:
            return [greedy]
    tree, cost = estimate.best_tree()
    if cost <= cheap and memory_limit is None:
        return [tree]  # cheap: the estimate's best order is the one lowered
    paths: list[Path] = [tree, greedy or estimate.greedy()]
    if n <= _EXHAUSTIVE_MAX:
        paths = [list(p) for p in all_paths(n)]
    if memory_limit is not None:
        return paths  # every one is lowered: the cheapest that fits wins
    costs = [estimate(p) for p in paths]
    ranked = sorted(range(len(paths)), key=costs.__getitem__)
    best = costs[ranked[0]]
    return [paths[k] for k in ranked[:_SHORTLIST] if costs[k] <= _SHORTLIST_RATIO * best]
