"""Parse numpy-style einsum subscripts into integer labels (ellipsis dims negative)."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .._tracing import memo

__all__ = ["Equation", "label_name", "label_names", "parse", "spell", "split_interleaved"]

# Sublist labels are shifted past every letter so the two formats never collide.
_SUBLIST_BASE = 1 << 16
# numpy's interleaved labels: 0-25 name 'A'-'Z', 26-51 name 'a'-'z'.
_SUBLIST_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class Equation(NamedTuple):
    """A parsed einsum equation with every ellipsis expanded to labels."""

    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]

    def may_alias(self, sizes: Mapping[int, int] | None = None) -> bool:
        """Whether numpy/torch may return a view: one operand, every summed label of size
        1 in `sizes` (a reshape), or none summed without `sizes`."""
        summed = set(self.inputs[0]).difference(self.output)
        return len(self.inputs) == 1 and all(sizes and sizes.get(x, 1) == 1 for x in summed)


def split_interleaved(args: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """Split ``(op0, sub0, op1, sub1, ..., [out])`` into operands and a hashable
    subscripts key ``(sub0, sub1, ..., out_or_None)`` of tuples."""
    odd = len(args) % 2 == 1
    key = tuple(_sublist(s, f"sublist {k}") for k, s in enumerate(args[1::2]))
    out = _sublist(args[-1], "output sublist") if odd else None
    return tuple(args[0 : len(args) - odd : 2]), (*key, out)


def _sublist(s: Any, what: str) -> tuple[Any, ...]:
    if hasattr(s, "tolist") and getattr(s, "ndim", None) == 1:
        s = s.tolist()  # an integer array, as numpy accepts
    if isinstance(s, (str, bytes)) or not isinstance(s, Sequence):
        raise TypeError(
            f"einsum: {what} must be a list of integers and Ellipsis (the interleaved "
            "format op0, sublist0, op1, ...; or pass the subscripts as a string first), "
            f"got {type(s).__name__}"
        )
    return tuple(v if v is Ellipsis else _sublist_label(v, what) for v in s)


def _sublist_label(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise TypeError(f"einsum: {what} must contain integers or Ellipsis, got {v!r}")
    try:
        iv = operator.index(v)
    except TypeError:
        raise TypeError(
            f"einsum: {what} must contain integers or Ellipsis, got {type(v).__name__}"
        ) from None
    if not 0 <= iv < len(_SUBLIST_LETTERS):
        raise ValueError(
            f"einsum: {what} contains the label {iv}; labels of the interleaved format "
            f"are 0-{len(_SUBLIST_LETTERS) - 1} (numpy's 52 letters)"
        )
    return iv


def _letters(term: str, subscripts: str, what: str) -> tuple[Any, ...]:
    """One term as a tuple of label codes and Ellipsis."""
    if term.count("...") > 1:
        raise ValueError(f"einsum: {what} of {subscripts!r} has more than one ellipsis")
    for ch in term.replace("...", ""):
        if not ch.isascii() or not ch.isalpha():
            raise ValueError(
                f"einsum: invalid character {ch!r} in {what} of {subscripts!r}; labels "
                "are letters a-z, A-Z, and '...' stands for broadcast dimensions"
            )
    head, dots, tail = term.partition("...")
    return (*map(ord, head), *([Ellipsis] if dots else []), *map(ord, tail))


def _raw_terms(subscripts: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...] | None]:
    """Terms as tuples of int labels / Ellipsis, for either format."""
    if not isinstance(subscripts, str):
        *subs, out = subscripts
        terms = [tuple(v if v is Ellipsis else v + _SUBLIST_BASE for v in s) for s in subs]
        if out is None:
            return terms, None
        return terms, tuple(v if v is Ellipsis else v + _SUBLIST_BASE for v in out)
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain '->' more than once")
    lhs, arrow, rhs = s.partition("->")
    if "-" in lhs + rhs or ">" in lhs + rhs:
        raise ValueError(
            f"einsum: subscripts {subscripts!r} contain a stray '-' or '>' "
            "(the output is introduced by '->')"
        )
    inputs = [_letters(t, subscripts, f"operand {k}'s term") for k, t in enumerate(lhs.split(","))]
    return inputs, (_letters(rhs, subscripts, "the output") if arrow else None)


@memo(1024)
def parse(subscripts: Any, ndims: tuple[int, ...]) -> Equation:
    """Parse `subscripts` (a string or an interleaved key) for operands of `ndims`."""
    terms, out_term = _raw_terms(subscripts)
    if len(terms) != len(ndims):
        raise ValueError(
            f"einsum: subscripts {_show(subscripts)} describe {len(terms)} operand(s) but "
            f"{len(ndims)} were given"
        )
    inputs: list[tuple[int, ...]] = []
    ellipsis_ndim = 0
    for k, (term, ndim) in enumerate(zip(terms, ndims, strict=True)):
        n_labels = sum(1 for v in term if v is not Ellipsis)
        if Ellipsis in term:
            extra = ndim - n_labels
            if extra < 0:
                raise ValueError(
                    f"einsum: operand {k} has {ndim} dimension(s) but its term "
                    f"{_show_term(term)} names {n_labels} labels"
                )
            ellipsis_ndim = max(ellipsis_ndim, extra)
            pos = term.index(Ellipsis)
            inputs.append((*term[:pos], *range(-extra, 0), *term[pos + 1 :]))
        elif n_labels != ndim:
            many = "too many" if n_labels > ndim else "too few"
            raise ValueError(
                f"einsum: operand {k} has {ndim} dimension(s) but its term "
                f"{_show_term(term)} names {n_labels} labels ({many} labels; use '...' "
                "to broadcast leading dimensions)"
            )
        else:
            inputs.append(term)
    ellipsis_labels = tuple(range(-ellipsis_ndim, 0))
    if out_term is None:
        counts = Counter(v for labels in inputs for v in labels if v >= 0)
        output = ellipsis_labels + tuple(sorted(v for v, c in counts.items() if c == 1))
        return Equation(tuple(inputs), output)
    out_list: list[int] = []
    known = {v for labels in inputs for v in labels}
    for v in out_term:
        if v is Ellipsis:
            out_list.extend(ellipsis_labels)
        elif v in out_list:
            raise ValueError(
                f"einsum: output label {label_name(v)!r} appears more than once in "
                f"{_show(subscripts)}"
            )
        elif v not in known:
            raise ValueError(
                f"einsum: output label {label_name(v)!r} does not appear in any input "
                f"term of {_show(subscripts)}"
            )
        else:
            out_list.append(v)
    if ellipsis_ndim and Ellipsis not in out_term:
        raise ValueError(
            f"einsum: the output of {_show(subscripts)} has no '...' but the ellipsis "
            f"covers {ellipsis_ndim} dimension(s); add '...' to the output"
        )
    return Equation(tuple(inputs), tuple(out_list))


def label_name(v: int) -> str:
    if v >= _SUBLIST_BASE:
        return str(v - _SUBLIST_BASE)
    return chr(v) if v >= 0 else "..."


def _show_term(term: tuple[Any, ...]) -> str:
    if all(v is Ellipsis or v < _SUBLIST_BASE for v in term):
        return repr("".join("..." if v is Ellipsis else chr(v) for v in term))
    return repr([v if v is Ellipsis else v - _SUBLIST_BASE for v in term])


def _show(subscripts: Any) -> str:
    return repr(subscripts) if isinstance(subscripts, str) else repr(list(subscripts))


def spell(inputs: Sequence[Sequence[int]], output: Sequence[int], names: dict[int, str]) -> str:
    """An equation in the labels' names, ``"ij,jk->ik"``."""
    lhs = ",".join("".join(names[x] for x in t) for t in inputs)
    return f"{lhs}->{''.join(names[x] for x in output)}"


def label_names(labels: Sequence[int]) -> dict[int, str]:
    """A one-character name per label for readable equations (letters kept as is)."""
    names = {v: chr(v) for v in labels if 0 <= v < _SUBLIST_BASE}
    names.update({v: _SUBLIST_LETTERS[v - _SUBLIST_BASE] for v in labels if v >= _SUBLIST_BASE})
    taken = set(names.values())
    pool = iter(c for c in _POOL if c not in taken)
    for v in labels:
        if v not in names:  # ellipsis labels
            names[v] = next(pool)
    return names


_POOL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" + "".join(
    chr(x) for x in range(0xC0, 0x250)
)
