"""Strategies: the named ways an implementation can run a call, and the rule choosing
one; a plan is made once per signature and keeps no reference to its arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FEATURES", "Choice", "Strategies", "Strategy"]

Plan = Callable[..., Any]

#: What a torch call may need beyond a result: gradients (``backward``, double
#: backward), forward-mode AD, the ``torch.func`` transforms (``vmap``, ``grad``,
#: ``jvp``, ...) and tracing by ``torch.compile``.
FEATURES = frozenset({"grad", "forward_ad", "functorch", "compile"})


@dataclass(frozen=True)
class Strategy:
    """One way to run a call.

    Parameters
    ----------
    name, summary : str
        Unique within its implementation (``prefer(op="impl/name")`` forces it); one
        line on what it does and when it wins.
    plan : callable
        ``plan(args)`` -> a function of the call's arrays (see the module docstring).
    features : frozenset of str
        The :data:`FEATURES` it keeps (a strategy that leaves torch keeps none).
    threads : callable
        ``threads(args)`` -> how many threads it will use for this call.
    applies : callable, optional
        ``applies(args)`` -> None if it can compute this result at all, else why not
        (:func:`portops.prefer` then refuses it).
    """

    name: str
    summary: str
    plan: Callable[[Any], Plan]
    features: frozenset[str] = frozenset()
    threads: Callable[[Any], int] = field(default=lambda args: 1)
    applies: Callable[[Any], str | None] | None = None

    def missing(self, needs: frozenset[str]) -> frozenset[str]:
        """The features of `needs` this strategy does not keep."""
        return needs - self.features


@dataclass(frozen=True)
class Choice:
    """The strategy chosen for a call and the rule or cost that chose it (what
    :func:`portops.explain` reports, with ``strategy.threads(args)``)."""

    strategy: Strategy
    reason: str


Chooser = Callable[[Any], tuple[str, str]]  # args -> (strategy name, reason)
NeedsOf = Callable[[Any], frozenset[str]]


class Strategies:
    """The strategies of one implementation and the rule that picks one.

    Parameters
    ----------
    strategies : sequence of Strategy
        Every way the implementation can run a call.
    choose : callable
        ``choose(args)`` -> ``(name, reason)``: the strategy, which must keep every
        feature ``needs(args)`` names, and the rule that picked it, in words.
    needs : callable, optional
        ``needs(args)`` -> the :data:`FEATURES` the call needs; none by default.
    direct : callable, optional
        ``direct()`` -> ``run(*arrays)``: the result of a call every rule sends to one
        library call, else None; once a call was planned, such calls skip the plan key.
    """

    def __init__(
        self,
        strategies: Sequence[Strategy],
        choose: Chooser,
        needs: NeedsOf = lambda args: frozenset(),
        direct: Callable[[], Callable[..., Any]] | None = None,
    ) -> None:
        self.by_name = {s.name: s for s in strategies}
        if len(self.by_name) != len(strategies):
            raise ValueError("two strategies share a name")
        self._choose = choose
        self.needs, self.direct = needs, direct

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def names(self) -> list[str]:
        return list(self.by_name)

    def choose(self, args: Any, forced: str | None = None) -> Choice:
        """The choice for `args`: the rule's, or `forced` (a strategy name), checked
        against the features the call needs."""
        needs = self.needs(args)
        if forced is not None:
            strategy = self.by_name.get(forced)
            if strategy is None:
                raise ValueError(
                    f"no strategy named {forced!r}; strategies: {', '.join(self.by_name)}"
                )
            why = None if strategy.applies is None else strategy.applies(args)
            if why is not None:
                raise ValueError(f"strategy {forced!r} does not apply to these arguments: {why}")
            if missing := strategy.missing(needs):
                raise ValueError(
                    f"strategy {forced!r} does not keep what this call needs "
                    f"({', '.join(sorted(missing))})"
                )
            reason = "forced by portops.prefer"
        else:
            name, reason = self._choose(args)
            strategy = self.by_name[name]
            assert not strategy.missing(needs), (name, needs)
        return Choice(strategy, reason)
