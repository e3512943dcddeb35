"""What :func:`portops.explain` and :func:`portops.implementations` return: records
with attributes for programs, and a ``str`` (also their ``repr``) for people."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Candidate", "Explanation", "ImplementationInfo", "ImplementationTable", "StrategyInfo"]


@dataclass(frozen=True)
class Candidate:
    """One implementation considered for a call, in the order they were considered.

    Attributes
    ----------
    name, summary : str
        The implementation's registered name and one-line description.
    chosen, applies : bool
        Whether this is the one that runs; whether it could run these arguments.
    reason : str
        Why it was chosen (``"first that applies"``, ``"forced by portops.prefer"``)
        or passed over (``"applies, lower priority"``, or why it does not apply).
    """

    name: str
    summary: str
    chosen: bool
    applies: bool
    reason: str

    def __str__(self) -> str:
        marker = "  -> " if self.chosen else "     "
        note = self.reason if self.applies else f"does not apply: {self.reason}"
        return f"{marker}{self.name}: {self.summary} [{note}]"


@dataclass(frozen=True)
class StrategyInfo:
    """One strategy of the chosen implementation, as :func:`portops.explain` lists it.

    Attributes
    ----------
    name, summary : str
        The strategy's name (``prefer(op="implementation/name")`` forces it) and what
        it does.
    chosen : bool
        Whether it runs for these arguments.
    features : tuple of str
        The torch features it keeps; empty for strategies outside torch.
    """

    name: str
    summary: str
    chosen: bool
    features: tuple[str, ...] = ()

    def __str__(self) -> str:
        marker = "  -> " if self.chosen else "     "
        return f"{marker}{self.name}: {self.summary}"


@dataclass(frozen=True)
class Explanation:
    """Which implementation of an operation runs for given arguments, and why.

    Attributes
    ----------
    op : str
        The operation.
    library, device : str
        The arrays' library and device kind, which select the candidates.
    candidates : tuple of Candidate
        The implementations registered for that library and device, highest priority
        first.
    chosen : str
        The name of the implementation that runs.
    strategy, reason : str
        The strategy of the chosen implementation that runs, and the rule that chose it.
    threads : int
        The threads it will use (with the thread settings in force now).
    strategies : tuple of StrategyInfo
        Every strategy of the chosen implementation.
    needs : tuple of str
        The torch features the call needs (``"grad"``, ``"forward_ad"``,
        ``"functorch"``, ``"compile"``); the chosen strategy keeps them.
    """

    op: str
    library: str
    device: str
    candidates: tuple[Candidate, ...]
    strategy: str = "default"
    threads: int = 1
    reason: str = ""
    strategies: tuple[StrategyInfo, ...] = ()
    needs: tuple[str, ...] = ()

    @property
    def chosen(self) -> str:
        return next(c.name for c in self.candidates if c.chosen)

    def __str__(self) -> str:
        lines = [f"{self.op} on {self.library} arrays (device {self.device}):"]
        lines += [str(c) for c in self.candidates]
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        needs = f" (the call needs: {', '.join(self.needs)})" if self.needs else ""
        lines.append(
            f"strategy of {self.chosen}: {self.strategy} on {threads}: {self.reason}{needs}"
        )
        if len(self.strategies) > 1:
            lines += [str(s) for s in self.strategies]
        return "\n".join(lines)

    __repr__ = __str__


@dataclass(frozen=True)
class ImplementationInfo:
    """One row of :func:`portops.implementations` (``None``: any); ``row["name"]`` reads
    it as the dict earlier versions returned."""

    name: str
    libraries: tuple[str, ...] | None
    devices: tuple[str, ...] | None
    priority: int
    summary: str
    strategies: tuple[str, ...] = ("default",)

    def as_dict(self) -> dict[str, Any]:
        """The row as a dict (``libraries``, ``devices`` and ``strategies`` as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]


_COLUMNS = ("name", "priority", "libraries", "devices", "strategies", "summary")


class ImplementationTable(tuple[ImplementationInfo, ...]):
    """The :class:`ImplementationInfo` rows of one operation, highest priority first."""

    op: str

    def __new__(cls, op: str, rows: Sequence[ImplementationInfo]) -> ImplementationTable:
        table = super().__new__(cls, rows)
        table.op = op
        return table

    def names(self) -> list[str]:
        """The implementations' names, highest priority first."""
        return [r.name for r in self]

    def as_dicts(self) -> list[dict[str, Any]]:
        """The rows as dicts (see :meth:`ImplementationInfo.as_dict`)."""
        return [r.as_dict() for r in self]

    def __str__(self) -> str:
        def cell(row: ImplementationInfo, column: str) -> str:
            value = getattr(row, column)
            if column in ("libraries", "devices", "strategies"):
                return "any" if value is None else ", ".join(value)
            return str(value)

        cells = [list(_COLUMNS)] + [[cell(r, c) for c in _COLUMNS] for r in self]
        widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS) - 1)]
        lines = [f"implementations of {self.op}:"]
        for line in cells:
            padded = [v.ljust(w) for v, w in zip(line, widths, strict=False)]
            lines.append("  " + "  ".join([*padded, line[-1]]).rstrip())
        return "\n".join(lines)

    __repr__ = __str__
