"""Lower a parsed einsum equation to array-API primitives over numbered slots: each
pairwise step one batched ``matmul`` (or a broadcast multiply), reshapes kept as views.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._tables import EINSUM
from .._tracing import memo
from .parse import Equation, label_name

__all__ = ["BINARY_OPS", "Plan", "SliceSpec", "Step", "build", "sizes_of"]

BINARY_OPS = frozenset({"matmul", "matmul_bool", "mul", "logical_and"})


@dataclass(slots=True, kw_only=True)
class Step:
    """One step of a plan, as :func:`portops.einsum_path` reports it (fields a kind of
    step has no use for keep their defaults)."""

    kind: str  # batched matmul, multiply, multiply-and-sum, diagonal, sum, transpose
    operands: tuple[int, ...]  # slots (positions) the step reads
    terms: tuple[tuple[int, ...], ...]  # the step's input labels, then its output's
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    flops: int = 0
    result: int = 0  # elements of the step's result (0 when it is the einsum's output)
    copies: int = 0  # elements copied to make operands matmul-ready
    temporary: int = 0  # largest temporary (elements) made inside the step
    peak_labels: tuple[int, ...] = ()  # labels of the largest array the step makes


class SliceSpec(NamedTuple):
    """Chunking of one label to honour ``memory_limit``."""

    label: int
    size: int
    chunk: int
    operand_axes: tuple[tuple[int, ...], ...]  # per operand, the axes carrying the label
    output_axis: int | None  # None: the label is summed, so chunks are added


@dataclass(frozen=True)
class Plan:
    """A lowered einsum: instructions over slots, plus what the report needs."""

    equation: Equation
    shapes: tuple[tuple[int, ...], ...]
    instructions: tuple[tuple[Any, ...], ...]
    n_slots: int
    result: int
    path: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    flops: int
    naive_flops: int
    peak: int
    cost: float
    boolean: bool
    slices: tuple[SliceSpec, ...] = field(default=())


class _Value(NamedTuple):
    """Planning-time view of one slot: its labels in axis order and in memory order."""

    labels: tuple[int, ...]
    mem: tuple[int, ...]


def sizes_of(eq: Equation, shapes: Sequence[Sequence[int]]) -> dict[int, int]:
    """Size of each label; raise ValueError where operands disagree."""
    sizes: dict[int, int] = {}
    where: dict[int, int] = {}
    for k, (labels, shape) in enumerate(zip(eq.inputs, shapes, strict=True)):
        local: dict[int, int] = {}
        for lab, d in zip(labels, shape, strict=True):
            if local.setdefault(lab, d) != d:
                raise ValueError(
                    f"einsum: label {label_name(lab)!r} is repeated in operand {k} with sizes "
                    f"{local[lab]} and {d}; a repeated label (diagonal) needs equal sizes"
                )
            old = sizes.setdefault(lab, d)
            if d != 1 and old != d:
                if old != 1:
                    raise ValueError(
                        f"einsum: label {label_name(lab)!r} has size {old} in operand "
                        f"{where[lab]} but {d} in operand {k} (sizes must match or be 1)"
                    )
                sizes[lab] = d
            if d != 1:
                where.setdefault(lab, k)
    return sizes


class _Builder:
    def __init__(
        self,
        eq: Equation,
        shapes: tuple[tuple[int, ...], ...],
        orders: tuple[tuple[int, ...], ...],
        boolean: bool,
        merge_reshapes: bool = True,
        sizes: dict[int, int] | None = None,
    ) -> None:
        self.eq, self.shapes, self.boolean = eq, shapes, boolean
        self.merge_reshapes = merge_reshapes
        self.sizes = sizes_of(eq, shapes) if sizes is None else sizes
        self.instr: list[tuple[Any, ...]] = []
        self.steps: list[Step] = []
        self.values: list[_Value] = []
        self.cost, self.peak, self.flops = 0.0, 0, 0
        for labels, order in zip(eq.inputs, orders, strict=True):
            self.values.append(_Value(labels, tuple(labels[a] for a in order)))

    def emit(self, ins: tuple[Any, ...]) -> None:
        """Append an instruction; a reshape replaces an unused reshape of its slot."""
        if ins[0] == "reshape" and self.merge_reshapes:
            slot = ins[1]
            for k in range(len(self.instr) - 1, -1, -1):
                prev = self.instr[k]
                if prev[0] in BINARY_OPS:
                    if slot in (prev[1], prev[2], prev[3]):
                        break
                elif prev[1] == slot:
                    if prev[0] == "reshape":
                        self.instr[k] = ins
                        return
                    break
        self.instr.append(ins)

    def size(self, labels: Sequence[int]) -> int:
        return math.prod(map(self.sizes.__getitem__, labels))

    def note(self, step: Step, final: bool) -> None:
        self.steps.append(step)
        self.flops += step.flops
        self.peak = max(self.peak, step.copies, step.temporary, 0 if final else step.result)

    def prepare(self, k: int, needed_elsewhere: set[int]) -> None:
        """Diagonals, size-1 axes and private sums of operand `k` (slot k)."""
        v = self.values[k]
        shape = self.shapes[k]
        if 1 not in shape and len(set(v.labels)) == len(v.labels):
            if needed_elsewhere.issuperset(v.labels):
                return  # nothing to prepare: the common case
        labels = list(v.labels)
        # Diagonals: the diagonal axis goes last (what numpy/torch diagonal do).
        for lab in dict.fromkeys(labels):
            axes = tuple(i for i, x in enumerate(labels) if x == lab)
            if len(axes) > 1:
                self.instr.append(("diag", k, axes))
                after = [x for i, x in enumerate(labels) if i not in axes] + [lab]
                self.cost += EINSUM["memory_cost"] * shape[v.labels.index(lab)]
                step = Step(kind="diagonal", operands=(k,), terms=(tuple(labels), tuple(after)))
                self.note(step, final=False)
                labels = after
        local_size = {x: shape[v.labels.index(x)] for x in labels}
        # Size-1 axes: broadcast against the other operands (or size 1 everywhere).
        keep = [x for x in labels if local_size[x] != 1]
        if len(keep) != len(labels):
            self.emit(("reshape", k, tuple(local_size[x] for x in keep)))
            labels = keep
        # Labels no other operand and not the output need: sum them now.
        private = [i for i, x in enumerate(labels) if x not in needed_elsewhere]
        if private:
            self.instr.append(("any" if self.boolean else "sum", k, tuple(private)))
            total = self.size(labels)
            after = [x for i, x in enumerate(labels) if i not in private]
            self.cost += EINSUM["memory_cost"] * total
            alone = len(self.eq.inputs) == 1  # then the sum is the einsum's output
            step = Step(
                kind="sum",
                operands=(k,),
                terms=(tuple(labels), tuple(after)),
                flops=total,
                result=0 if alone else self.size(after),
                peak_labels=tuple(after),
            )
            self.note(step, final=alone)
            labels = mem = after
        else:
            mem = [x for x in dict.fromkeys(reversed(v.mem)) if x in labels][::-1]
        self.values[k] = _Value(tuple(labels), tuple(mem))

    def contract(self, i: int, j: int, keep: set[int], final: bool) -> int:
        """Emit the step contracting slots i and j; return the result's slot."""
        a, b = self.values[i], self.values[j]
        if final:
            # Operand owning the output's leading label first: output in requested order.
            shared = set(a.labels) & set(b.labels)
            lead = [x for x in self.eq.output if x in keep and x not in shared]
            if lead and lead[0] in b.labels:
                i, j, a, b = j, i, b, a
        in_a, in_b = set(a.labels), set(b.labels)
        batch: list[int] = []
        ks: list[int] = []
        ms: list[int] = []
        for x in a.mem:  # one pass: a's labels in its memory order, by group
            if x not in in_b:
                ms.append(x)
            elif x in keep:
                batch.append(x)
            else:
                ks.append(x)
        ns = [x for x in b.mem if x not in in_a]
        size = self.sizes.__getitem__
        prod = math.prod
        if ks and prod(map(size, b.labels)) > prod(map(size, a.labels)):
            ks = [x for x in b.mem if x in ks]
        out_labels = batch + ms + ns
        out = len(self.values)
        bsh, msh, nsh = (tuple(map(size, group)) for group in (batch, ms, ns))
        bp, mp, np_, kp = prod(bsh), prod(msh), prod(nsh), prod(map(size, ks))
        result = bp * mp * np_
        eq = (a.labels, b.labels, tuple(out_labels))
        copies = 0
        if not ks or (mp * np_ <= EINSUM["dot_mn"] and bp >= EINSUM["dot_batch"]):
            # Broadcast multiply (and sum over a tiny K): (batch, M, N, K).
            self._permute(i, batch + ms + ks)
            self._permute(j, batch + ns + ks)
            kk = (kp,) if ks else ()
            self.emit(("reshape", i, bsh + msh + (1,) * len(ns) + kk))
            self.emit(("reshape", j, bsh + (1,) * len(ms) + nsh + kk))
            self.instr.append(("logical_and" if self.boolean else "mul", i, j, out))
            temp = result * kp
            if ks:
                self.instr.append(("any" if self.boolean else "sum", out, (len(out_labels),)))
            self.cost += EINSUM["memory_cost"] * (temp * (2 if ks else 1) + result)
            kind = "multiply-and-sum" if ks else "multiply"
            flops = (2 if ks else 1) * temp
            temp = temp if ks else 0
            peak_labels = tuple(batch + ms + ns + ks) if ks else tuple(out_labels)
        else:
            # Batched matmul: (batch..., M, K) @ (batch..., K, N).
            copy_labels: tuple[int, ...] = ()
            a_copy = self._operand(i, batch, ms, ks, bsh)
            b_copy = self._operand(j, batch, ks, ns, bsh)
            for c, v in ((a_copy, a), (b_copy, b)):
                if c:
                    copies += self.size(v.labels)
                    copy_labels = v.labels if len(v.labels) > len(copy_labels) else copy_labels
            self.instr.append(("matmul_bool" if self.boolean else "matmul", i, j, out))
            if len(ms) != 1 or len(ns) != 1:
                self.emit(("reshape", out, bsh + msh + nsh))
            kind = "batched matmul"
            flops = 2 * result * kp
            self.cost += flops + EINSUM["memory_cost"] * (EINSUM["copy_factor"] * copies + result)
            temp = copies
            peak_labels = tuple(out_labels) if result >= copies else copy_labels
        self.values.append(_Value(tuple(out_labels), tuple(out_labels)))
        step = Step(kind=kind, operands=(i, j), terms=eq, batch=bp, m=mp, n=np_, k=kp, flops=flops)
        step.result = 0 if final else result
        step.copies = copies
        step.temporary = temp
        step.peak_labels = peak_labels
        self.note(step, final)
        return out

    def _permute(self, k: int, order: Sequence[int]) -> bool:
        labels = self.values[k].labels
        perm = tuple(labels.index(x) for x in order)
        moved = perm != tuple(range(len(perm)))
        if moved:
            self.instr.append(("permute", k, perm))
        return moved

    def _operand(
        self, k: int, batch: list[int], rows: list[int], cols: list[int], bsh: tuple[int, ...]
    ) -> bool:
        """Lay slot k out as (batch..., rows, cols) (a transposed view when the unit-stride
        axis is in `rows`); return whether that copies."""
        v = self.values[k]
        inner = v.mem[-1] if v.mem else None

        def runs(group: list[int]) -> bool:
            if len(group) <= 1:
                return True
            idx = [v.mem.index(x) for x in group]
            return idx == list(range(idx[0], idx[0] + len(group)))

        views = runs(rows) and runs(cols)
        rs, cs = self.size(rows), self.size(cols)
        if views and inner in rows:
            # Unit stride in the first group: a transposed view, read by BLAS as is.
            self._permute(k, batch + cols + rows)
            if rs == 1 or cs == 1:  # one side of size 1: the transpose is a reshape
                self.emit(("reshape", k, (*bsh, rs, cs)))
                return False
            if len(rows) != 1 or len(cols) != 1:
                self.emit(("reshape", k, (*bsh, cs, rs)))
            self.instr.append(("swap", k))
            return False
        self._permute(k, batch + rows + cols)
        if len(rows) != 1 or len(cols) != 1:
            self.emit(("reshape", k, (*bsh, rs, cs)))
        return not (views and (inner is None or inner in cols))

    def run(self, path: Sequence[tuple[int, ...]]) -> int:
        eq = self.eq
        eff = effective_labels(eq, self.shapes)
        out_set = set(eq.output)
        uses = Counter(x for labs in eff for x in labs)  # operands with each label (size > 1)
        for k, mine in enumerate(eff):
            others = {x for x, c in uses.items() if c > (x in mine)}
            self.prepare(k, others | out_set)
        slots = list(range(len(eq.inputs)))
        for step_no, contraction in enumerate(path):
            taken = [slots.pop(p) for p in sorted(contraction, reverse=True)]
            last = step_no == len(path) - 1
            while len(taken) > 1:
                x, y = taken.pop(), taken.pop()
                keep = out_set.union(*[self.values[s].labels for s in slots + taken])
                taken.append(self.contract(x, y, keep, last and not taken))
            slots.append(taken[0])
        (res,) = slots
        out_big = [x for x in eq.output if self.sizes[x] != 1]
        if self._permute(res, out_big):
            terms = (self.values[res].labels, tuple(out_big))
            self.steps.append(Step(kind="transpose", operands=(res,), terms=terms))
        if len(out_big) != len(eq.output):
            self.emit(("reshape", res, tuple(self.sizes[x] for x in eq.output)))
        return res


def build(
    eq: Equation,
    shapes: tuple[tuple[int, ...], ...],
    orders: tuple[tuple[int, ...], ...],
    boolean: bool,
    path: Sequence[tuple[int, ...]],
    merge_reshapes: bool = True,
    sizes: dict[int, int] | None = None,
) -> Plan:
    """Lower `eq` along `path` (numpy's format). `merge_reshapes`: a reshape of a reshape
    becomes one (not for Dask, which cannot always do in one what it does in two)."""
    b = _Builder(eq, shapes, orders, boolean, merge_reshapes, sizes)
    res = b.run(path)
    naive_flops = math.prod(b.sizes.values()) * max(1, len(eq.inputs))
    return Plan(
        *(eq, shapes, tuple(b.instr), len(b.values), res, tuple(map(tuple, path))),
        *(tuple(b.steps), b.flops, naive_flops, b.peak, b.cost, boolean),
    )


def effective_labels(eq: Equation, shapes: Sequence[Sequence[int]]) -> list[set[int]]:
    """Labels of size > 1 of each operand (what the path finder sees)."""
    return [
        {x for x, d in zip(lab, sh, strict=True) if d != 1}
        for lab, sh in zip(eq.inputs, shapes, strict=True)
    ]


@memo(8)
def all_paths(n: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every sequence of pairwise contractions of `n` operands (numpy's format)."""
    if n <= 1:
        return ((),)
    return tuple(
        ((i, j), *rest) for i, j in itertools.combinations(range(n), 2) for rest in all_paths(n - 1)
    )
