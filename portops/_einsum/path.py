"""Choosing the contraction order, and chunking to honour ``memory_limit``.

opt_einsum's path finders are well tested and cover many operands (dynamic programming,
branch and bound, greedy), so they propose orders when installed. Every proposal is then
lowered and ranked by :mod:`portops._einsum.plan`'s cost model, which counts the copies
and transposes a path forces as well as its FLOPs. With up to four operands every order
is lowered and ranked (at most 18). Without opt_einsum a built-in greedy search stands
in for it, so opt_einsum stays optional.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._tables import EINSUM
from .parse import Equation
from .plan import Plan, SliceSpec, all_paths, build, effective_labels, sizes_of

__all__ = ["PATH_NAMES", "choose", "normalize_optimize"]

PATH_NAMES = ("auto", "greedy", "optimal")
# How hard the search for an order looks: bounds on planning time, which grows
# factorially with the operands, not choices about the machine. Every order is lowered
# and ranked up to _EXHAUSTIVE_MAX operands (at most 18 orders); a dynamic program over
# subsets of operands (3**n / 2 splits) stays cheap up to _SUBSETS_MAX; "optimal"
# without opt_einsum enumerates orders up to _OPTIMAL_MAX.
_EXHAUSTIVE_MAX = 4
_SUBSETS_MAX = 5
_OPTIMAL_MAX = 6


def normalize_optimize(optimize: Any) -> Any:
    """A hashable form of `optimize`, or raise TypeError/ValueError naming it.

    Forms: ``"auto"``, ``False``, a path finder name, ``("limit", name, elements)``
    for numpy's ``(name, memory_limit)`` tuples, ``("path", steps)`` for an explicit
    path.
    """
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
            return ("limit", "auto" if name == "auto" else name, int(limit))
        if items and items[0] == "einsum_path":
            items = items[1:]
        path = []
        for c in items:
            if not isinstance(c, (list, tuple)) or not c:
                raise TypeError(
                    "einsum: an explicit optimize path is a list of tuples of operand "
                    f"positions (numpy's format), got the item {c!r}"
                )
            path.append(tuple(_position(p) for p in c))
        return ("path", tuple(path))
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


def _position(p: Any) -> int:
    if isinstance(p, bool) or not isinstance(p, int):
        raise TypeError(f"einsum: explicit path positions must be integers, got {p!r}")
    return p


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


def _left_to_right(n: int) -> list[tuple[int, int]]:
    return [(0, 1)] * (n - 1)


def _greedy(sets: list[set[int]], output: set[int], sizes: dict[int, int]) -> list[tuple[int, int]]:
    """Contract the pair whose result is smallest relative to its inputs, repeatedly."""
    sets = [set(s) for s in sets]
    path: list[tuple[int, int]] = []

    def size(s: set[int]) -> int:
        return math.prod(sizes[x] for x in s)

    while len(sets) > 1:
        best: tuple[float, float, int, int] | None = None
        for i in range(len(sets)):
            for j in range(i + 1, len(sets)):
                rest: set[int] = set(output)
                for k, s in enumerate(sets):
                    if k not in (i, j):
                        rest |= s
                union = sets[i] | sets[j]
                kept = union & rest
                gain = size(kept) - size(sets[i]) - size(sets[j])
                key = (gain, size(union), i, j)
                if best is None or key < best:
                    best = key
        assert best is not None
        _, _, i, j = best
        kept = (sets[i] | sets[j]) & (
            set(output).union(*[s for k, s in enumerate(sets) if k not in (i, j)])
        )
        sets = [s for k, s in enumerate(sets) if k not in (i, j)] + [kept]
        path.append((i, j))
    return path


def _opt_einsum_paths(
    names: Sequence[str],
    sets: list[set[int]],
    output: set[int],
    sizes: dict[int, int],
    limit: int | None = None,
) -> list[list[tuple[int, ...]]]:
    try:
        from opt_einsum.paths import get_path_fn
    except ImportError:
        return []
    found = []
    for name in names:
        path = get_path_fn(name)(sets, output, sizes, limit)
        found.append([tuple(c) for c in path])
    return found


def _numpy_path(
    eq: Equation,
    shapes: Sequence[Sequence[int]],
    names: dict[int, str],
    finder: str,
    limit: int | None,
) -> list[tuple[int, ...]] | None:
    """numpy's own path finder ``finder`` ("greedy" or "optimal"), or None when the
    equation has more labels than numpy's letters."""
    terms = ["".join(names[x] for x in t) for t in eq.inputs]
    out = "".join(names[x] for x in eq.output)
    text = f"{','.join(terms)}->{out}"
    if not all(c.isascii() and c.isalpha() for c in text.replace(",", "").replace("->", "")):
        return None
    stub = np.empty((), dtype=np.float64)
    stubs = [np.broadcast_to(stub, tuple(s)) for s in shapes]
    optimize: Any = finder if limit is None else (finder, limit)
    path, _ = np.einsum_path(text, *stubs, optimize=optimize)
    return [tuple(c) for c in path[1:]]


def candidates(
    eq: Equation,
    shapes: Sequence[Sequence[int]],
    optimize: Any,
    names: dict[int, str] | None = None,
) -> list[list[tuple[int, ...]]]:
    """Contraction orders worth lowering for `optimize` (already normalised)."""
    n = len(eq.inputs)
    if isinstance(optimize, tuple) and optimize[0] == "path":
        _check_path(optimize[1], n)
        return [list(optimize[1])]
    if n == 1:
        return [[(0,)]]
    if optimize is False:  # numpy's meaning: one step over every operand
        return [[tuple(range(n))]]
    if optimize == "auto" and n <= _EXHAUSTIVE_MAX:
        return [list(p) for p in all_paths(n)]
    sizes = sizes_of(eq, shapes)
    sets = effective_labels(eq, shapes)
    output = set(eq.output)
    limit = None
    if isinstance(optimize, tuple):  # ("limit", finder, elements): numpy's tuples
        _, optimize, limit = optimize
        if optimize == "auto":
            optimize = "greedy"
    if optimize in ("greedy", "optimal") and names is not None:
        found = _numpy_path(eq, shapes, names, optimize, limit)
        if found is not None:
            return [found]
    if limit is not None:
        oe = _opt_einsum_paths([optimize], sets, output, sizes, limit)
        if oe:
            return oe
    if optimize == "greedy":
        oe = _opt_einsum_paths(["greedy"], sets, output, sizes)
        return oe or [list(_greedy(sets, output, sizes))]
    if optimize == "optimal":
        if n <= _EXHAUSTIVE_MAX:
            return [list(p) for p in all_paths(n)]
        oe = _opt_einsum_paths(["optimal"], sets, output, sizes)
        if oe:
            return oe
        if n <= _OPTIMAL_MAX:
            return [list(p) for p in all_paths(n)]
        return [list(_greedy(sets, output, sizes))]
    if optimize != "auto":  # another opt_einsum path finder, validated already
        return _opt_einsum_paths([optimize], sets, output, sizes)
    if n <= _EXHAUSTIVE_MAX:
        return [list(p) for p in all_paths(n)]
    paths = _opt_einsum_paths(["greedy"], sets, output, sizes)
    if not paths:
        paths = [list(_greedy(sets, output, sizes))]
    estimate = _Estimator(sets, output, sizes)
    if min(estimate(p) for p in paths) > EINSUM["search_cost"]:  # worth a longer search
        paths += _opt_einsum_paths(["auto"], sets, output, sizes)
        paths.append(list(_greedy(sets, output, sizes)))
        paths.append(list(_left_to_right(n)))
    return paths


# At most this many candidate orders are lowered and ranked by the full cost model.
_SHORTLIST = 4


class _Estimator:
    """Quick costs of paths from label sets alone: the products each step multiplies
    plus the elements it writes (no copies or layouts). Label sets are bit masks, and
    steps that several paths share are costed once."""

    def __init__(self, sets: Sequence[set[int]], output: set[int], sizes: dict[int, int]):
        labels = sorted(set(output).union(*sets))
        bit = {x: 1 << i for i, x in enumerate(labels)}
        self.weights = [sizes[x] for x in labels]
        self.masks = [sum(bit[x] for x in s) for s in sets]
        self.output = sum(bit[x] for x in output)
        self.sizes: dict[int, int] = {}
        self.steps: dict[tuple[Any, ...], tuple[int, float]] = {}

    def size(self, mask: int) -> int:
        found = self.sizes.get(mask)
        if found is None:
            found, m, i = 1, mask, 0
            while m:
                if m & 1:
                    found *= self.weights[i]
                m >>= 1
                i += 1
            self.sizes[mask] = found
        return found

    def __call__(self, path: Sequence[tuple[int, ...]]) -> float:
        remaining = list(self.masks)
        total = 0.0
        for c in path:
            picked = tuple(sorted([remaining[i] for i in c]))
            for i in sorted(c, reverse=True):
                del remaining[i]
            rest = self.output
            for m in remaining:
                rest |= m
            key = (picked, rest)
            found = self.steps.get(key)
            if found is None:
                union = 0
                for m in picked:
                    union |= m
                kept = union & rest
                cost = max(len(c) - 1, 1) * self.size(union) + EINSUM["memory_cost"] * self.size(
                    kept
                )
                found = self.steps[key] = (kept, cost)
            total += found[1]
            remaining.append(found[0])
        return total


def _best_tree(estimate: _Estimator, n: int) -> tuple[list[tuple[int, ...]], float]:
    """The order of pairwise contractions with the lowest quick estimate, by dynamic
    programming over subsets of operands (what ranking every order finds, in far fewer
    steps), in numpy's path format."""
    full = (1 << n) - 1
    labels = [0] * (full + 1)
    for s in range(1, full + 1):
        low = s & -s
        labels[s] = labels[s ^ low] | estimate.masks[low.bit_length() - 1]
    kept = [labels[s] & (estimate.output | labels[full ^ s]) for s in range(full + 1)]
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
                c = cost[a] + cost[b] + estimate.size(kept[a] | kept[b])
                if c < best:
                    best, best_a = c, a
            a = (a - 1) & s
        cost[s] = best + EINSUM["memory_cost"] * estimate.size(kept[s])
        split[s] = best_a
    items = [1 << k for k in range(n)]
    path: list[tuple[int, ...]] = []

    def emit(s: int) -> None:
        if s & (s - 1) == 0:
            return
        a = split[s]
        emit(a)
        emit(s ^ a)
        i, j = sorted((items.index(a), items.index(s ^ a)))
        items.pop(j)
        items.pop(i)
        items.append(s)
        path.append((i, j))

    emit(full)
    return path, cost[full]


def _shortlist(
    eq: Equation, shapes: Sequence[Sequence[int]], paths: list[list[tuple[int, ...]]]
) -> list[list[tuple[int, ...]]]:
    """The candidates worth lowering: the quick estimate's best for a cheap
    contraction; for one costly enough to repay lowering several orders, those within
    4x of the best, whose copies and layouts the full cost model then ranks."""
    sizes = sizes_of(eq, shapes)
    sets = effective_labels(eq, shapes)
    output = set(eq.output)
    estimate = _Estimator(sets, output, sizes)
    costs = [estimate(p) for p in paths]
    best = min(costs)
    slack = 4.0 if best > EINSUM["search_cost"] else 1.0
    ranked = sorted(range(len(paths)), key=costs.__getitem__)
    keep = [k for k in ranked if costs[k] <= slack * best]
    return [paths[k] for k in keep[: 1 if best <= EINSUM["search_cost"] else _SHORTLIST]]


def choose(
    eq: Equation,
    shapes: tuple[tuple[int, ...], ...],
    orders: tuple[tuple[int, ...], ...],
    boolean: bool,
    optimize: Any,
    memory_limit: int | None,
    names: dict[int, str],
    merge_reshapes: bool = True,
    sizes: dict[int, int] | None = None,
) -> Plan:
    """The cheapest lowering among the candidate orders, chunked under `memory_limit`
    (`sizes`: the label sizes, when the caller has them)."""
    if sizes is None:
        sizes = sizes_of(eq, shapes)
    best: Plan | None = None
    best_fit: Plan | None = None
    n = len(eq.inputs)
    paths: list[list[tuple[int, ...]]] | None = None
    if optimize == "auto" and memory_limit is None and 3 <= n <= _SUBSETS_MAX:
        estimate = _Estimator(effective_labels(eq, shapes), set(eq.output), sizes)
        tree, cost = _best_tree(estimate, n)
        if cost <= EINSUM["search_cost"]:  # cheap: the estimate's best order is the one lowered
            paths = [tree]
    if paths is None:
        paths = candidates(eq, shapes, optimize, names)
        if len(paths) > 1 and memory_limit is None:
            paths = _shortlist(eq, shapes, paths)
    for path in paths:
        plan = build(eq, shapes, orders, boolean, path, names, merge_reshapes, sizes)
        if best is None or plan.cost < best.cost:
            best = plan
        if memory_limit is not None and plan.peak <= memory_limit:
            if best_fit is None or plan.cost < best_fit.cost:
                best_fit = plan
    assert best is not None
    if memory_limit is None or best.peak <= memory_limit:
        return best
    if best_fit is not None:
        return best_fit
    return _sliced(eq, shapes, orders, boolean, best, memory_limit, names, merge_reshapes)


def chunk_shapes(
    eq: Equation, shapes: tuple[tuple[int, ...], ...], chunks: dict[int, int]
) -> tuple[tuple[int, ...], ...]:
    """Operand shapes with each chunked label cut to its chunk (size-1 axes kept)."""
    return tuple(
        tuple(chunks.get(x, d) if d != 1 else 1 for x, d in zip(lab, sh, strict=True))
        for lab, sh in zip(eq.inputs, shapes, strict=True)
    )


def _sliced(
    eq: Equation,
    shapes: tuple[tuple[int, ...], ...],
    orders: tuple[tuple[int, ...], ...],
    boolean: bool,
    plan: Plan,
    memory_limit: int,
    names: dict[int, str],
    merge_reshapes: bool,
) -> Plan:
    """Cut labels into chunks until every intermediate fits in `memory_limit`."""
    sizes = sizes_of(eq, shapes)
    chunks: dict[int, int] = {}
    sub = plan
    while sub.peak > memory_limit:
        step = max(sub.steps, key=lambda s: max(s.copies, s.temporary, s.result))
        labels = step.peak_labels or tuple(sizes)
        lab = max(labels, key=lambda x: chunks.get(x, sizes[x]))
        current = chunks.get(lab, sizes[lab])
        if current <= 1:  # cannot cut further: every label of the peak is at 1
            lab = max(sizes, key=lambda x: chunks.get(x, sizes[x]))
            current = chunks.get(lab, sizes[lab])
            if current <= 1:
                break
        chunks[lab] = (current + 1) // 2
        sub = build(
            eq, chunk_shapes(eq, shapes, chunks), orders, boolean, plan.path, names, merge_reshapes
        )
    specs = []
    for lab, chunk in chunks.items():
        axes = tuple(
            tuple(a for a, x in enumerate(labs) if x == lab and sh[a] != 1)
            for labs, sh in zip(eq.inputs, shapes, strict=True)
        )
        out_axis = eq.output.index(lab) if lab in eq.output else None
        specs.append(SliceSpec(lab, sizes[lab], chunk, axes, out_axis))
    return Plan(
        equation=plan.equation,
        shapes=plan.shapes,
        instructions=(),
        n_slots=0,
        result=-1,
        path=plan.path,
        steps=sub.steps,
        flops=plan.flops,
        naive_flops=plan.naive_flops,
        peak=sub.peak,
        cost=plan.cost,
        boolean=boolean,
        slices=tuple(specs),
    )
