"""Parse numpy-style einsum subscripts into integer labels.

Both of numpy's formats are accepted: a subscripts string (``"ij,jk->ik"``, with
``...``, implicit or explicit output) and the interleaved sublist format
``(op0, [0, 1], op1, [1, 2], [0, 2])``. Letters map to their code points, sublist
labels to themselves shifted past them, and the dimensions an ellipsis covers to
negative labels (``-1`` for the last), so that broadcasting ellipsis dimensions is the
same thing as broadcasting size-1 labelled axes.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from .._tracing import memo

__all__ = ["Equation", "is_plain", "parse", "split_interleaved"]

# Sublist labels are shifted past every letter so the two formats never collide.
_SUBLIST_BASE = 1 << 16
# numpy's interleaved labels: 0-25 name 'A'-'Z', 26-51 name 'a'-'z'.
_PLAIN = re.compile(r"[A-Za-z,]*(->[A-Za-z]*)?")
_SUBLIST_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class Equation(NamedTuple):
    """A parsed einsum equation with every ellipsis expanded to labels."""

    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]


def split_interleaved(args: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """Split ``(op0, sub0, op1, sub1, ..., [out])`` into operands and a subscripts key.

    The key is a hashable tuple ``(sub0, sub1, ..., out_or_None)`` of tuples.
    """
    operands = tuple(args[0::2])
    subs = list(args[1::2])
    out = None
    if len(args) % 2 == 1:
        out = args[-1]
        operands = operands[:-1]
    key = tuple(_sublist(s, f"sublist {k}") for k, s in enumerate(subs))
    out_key = None if out is None else _sublist(out, "output sublist")
    return operands, (*key, out_key)


def _sublist(s: Any, what: str) -> tuple[Any, ...]:
    if hasattr(s, "tolist") and getattr(s, "ndim", None) == 1:
        s = s.tolist()  # an integer array, as numpy accepts
    if isinstance(s, (str, bytes)) or not isinstance(s, Sequence):
        raise TypeError(
            f"einsum: {what} must be a list of integers and Ellipsis (the interleaved "
            "format op0, sublist0, op1, ...; or pass the subscripts as a string first), "
            f"got {type(s).__name__}"
        )
    items: list[Any] = []
    for v in s:
        if v is Ellipsis:
            items.append(Ellipsis)
            continue
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
        items.append(iv)
    return tuple(items)


def _string_terms(subscripts: str) -> tuple[list[str], str | None]:
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} contain '->' more than once")
    lhs, arrow, rhs = s.partition("->")
    for part in (lhs, rhs):
        if "-" in part or ">" in part:
            raise ValueError(
                f"einsum: subscripts {subscripts!r} contain a stray '-' or '>' "
                "(the output is introduced by '->')"
            )
    terms = lhs.split(",")
    return terms, (rhs if arrow else None)


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
    out: list[Any] = [ord(c) for c in head]
    if dots:
        out.append(Ellipsis)
    out.extend(ord(c) for c in tail)
    return tuple(out)


def _raw_terms(subscripts: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...] | None]:
    """Terms as tuples of int labels / Ellipsis, for either format."""
    if isinstance(subscripts, str) and _PLAIN.fullmatch(subscripts):
        # Letters, commas and one '->' only (the common case): no checks needed.
        lhs, arrow, rhs = subscripts.partition("->")
        plain = [tuple(map(ord, t)) for t in lhs.split(",")]
        return plain, (tuple(map(ord, rhs)) if arrow else None)
    if isinstance(subscripts, str):
        terms, out = _string_terms(subscripts)
        inputs = [_letters(t, subscripts, f"operand {k}'s term") for k, t in enumerate(terms)]
        output = None if out is None else _letters(out, subscripts, "the output")
        return inputs, output
    *subs, out_sub = subscripts
    shift = [
        tuple(v if v is Ellipsis else v + _SUBLIST_BASE for v in s)
        for s in (*subs, () if out_sub is None else out_sub)
    ]
    return shift[:-1], (None if out_sub is None else shift[-1])


def is_plain(subscripts: Any) -> bool:
    """Whether `subscripts` is a string of ASCII letters, commas and at most one '->'
    (what ``_PLAIN`` matches, without the regular expression's cost)."""
    if type(subscripts) is not str or not subscripts.isascii():
        return False
    lhs, _, rhs = subscripts.partition("->")
    return f"a{lhs.replace(',', '')}{rhs}".isalpha()


def parse(subscripts: Any, ndims: tuple[int, ...]) -> Equation:
    """Parse `subscripts` (a string or an interleaved key) for operands of `ndims`."""
    try:
        return _parse_cached(subscripts, ndims)
    except TypeError as exc:  # unhashable key: parse without the cache
        if "unhashable" not in str(exc):
            raise
        return _parse(subscripts, ndims)


@memo(1024)
def _parse_cached(subscripts: Any, ndims: tuple[int, ...]) -> Equation:
    return _parse(subscripts, ndims)


def _parse(subscripts: Any, ndims: tuple[int, ...]) -> Equation:
    if is_plain(subscripts):
        found = _parse_plain(subscripts, ndims)
        if found is not None:
            return found
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
            labels = (*term[:pos], *range(-extra, 0), *term[pos + 1 :])
        else:
            if n_labels != ndim:
                many = "too many" if n_labels > ndim else "too few"
                raise ValueError(
                    f"einsum: operand {k} has {ndim} dimension(s) but its term "
                    f"{_show_term(term)} names {n_labels} labels ({many} labels; use '...' "
                    "to broadcast leading dimensions)"
                )
            labels = tuple(term)
        inputs.append(labels)
    ellipsis_labels = tuple(range(-ellipsis_ndim, 0))
    if out_term is None:
        counts: dict[int, int] = {}
        for labels in inputs:
            for v in labels:
                if v >= 0:
                    counts[v] = counts.get(v, 0) + 1
        output = ellipsis_labels + tuple(sorted(v for v, c in counts.items() if c == 1))
    else:
        seen: set[int] = set()
        out_list: list[int] = []
        known = {v for labels in inputs for v in labels}
        for v in out_term:
            if v is Ellipsis:
                out_list.extend(ellipsis_labels)
                continue
            if v in seen:
                raise ValueError(
                    f"einsum: output label {_label_name(v)!r} appears more than once in "
                    f"{_show(subscripts)}"
                )
            if v not in known:
                raise ValueError(
                    f"einsum: output label {_label_name(v)!r} does not appear in any input "
                    f"term of {_show(subscripts)}"
                )
            seen.add(v)
            out_list.append(v)
        if ellipsis_ndim and Ellipsis not in out_term:
            raise ValueError(
                f"einsum: the output of {_show(subscripts)} has no '...' but the ellipsis "
                f"covers {ellipsis_ndim} dimension(s); add '...' to the output"
            )
        output = tuple(out_list)
    return Equation(tuple(inputs), output)


def _parse_plain(subscripts: str, ndims: tuple[int, ...]) -> Equation | None:
    """Letters, commas and one '->' (the common case) when they describe the operands
    and a valid output; None otherwise, for :func:`_parse` to say what is wrong.
    (ASCII letters: their bytes are their code points, the labels.)"""
    lhs, arrow, rhs = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        return None
    for term, ndim in zip(terms, ndims, strict=True):
        if len(term) != ndim:
            return None
    inputs = tuple(tuple(t.encode()) for t in terms)
    letters = lhs.replace(",", "").encode()
    if arrow:
        out = rhs.encode()
        if len(set(out)) != len(out) or not set(out).issubset(letters):
            return None
        return Equation(inputs, tuple(out))
    return Equation(inputs, tuple(sorted(c for c in set(letters) if letters.count(c) == 1)))


def _label_name(v: int) -> str:
    if v >= _SUBLIST_BASE:
        return str(v - _SUBLIST_BASE)
    if v >= 0:
        return chr(v)
    return "..."


def _show_term(term: tuple[Any, ...]) -> str:
    if all(v is Ellipsis or v < _SUBLIST_BASE for v in term):
        return repr("".join("..." if v is Ellipsis else chr(v) for v in term))
    return repr([v if v is Ellipsis else v - _SUBLIST_BASE for v in term])


def _show(subscripts: Any) -> str:
    if isinstance(subscripts, str):
        return repr(subscripts)
    return repr(list(subscripts))


def label_names(labels: Sequence[int]) -> dict[int, str]:
    """A one-character name per label for readable equations (letters kept as is)."""
    names: dict[int, str] = {}
    for v in labels:
        if v >= _SUBLIST_BASE:
            names[v] = _SUBLIST_LETTERS[v - _SUBLIST_BASE]
        elif v >= 0:
            names[v] = chr(v)
    if len(names) == len(set(labels)):
        return names  # no ellipsis labels to name
    taken = set(names.values())
    pool = iter(c for c in _POOL if c not in taken)
    for v in labels:
        if v not in names:
            names[v] = next(pool)
    return names


_POOL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" + "".join(
    chr(x) for x in range(0xC0, 0x250)
)
