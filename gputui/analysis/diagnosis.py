"""One diagnosis for a job of several ranks (DESIGN §12): the cause common to
its ranks and the ranks that stand out, rather than a list per rank.

Each rank's findings are settled against its own ledger; the job's diagnosis
reads their top causes.  A straggler (the rank rules' ``ranks.straggler``: the
others wait for one rank) is the job's diagnosis: the other ranks' communication
findings are its symptom, and the straggler's own top cause is why it is slow.
Otherwise the cause that leads on most ranks (ties: the larger median cost) is
the common cause, and a rank whose top cause differs is named beside it.  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gputui.analysis.finding import Finding
from gputui.analysis.medians import median
from gputui.analysis.severity import CRIT, WARN
from gputui.protocol.value import ValueBase, value_class


@value_class
class RankTop(ValueBase):
    """A rank's leading warn or crit finding (None: nothing costly)."""

    rank: int
    finding: Finding | None


@value_class
class Diagnosis(ValueBase):
    """The job's diagnosis across its ranks."""

    #: the rule of the cause common to the ranks (None: nothing costly on most)
    cause: str | None
    title: str
    #: the ranks it leads on
    ranks: tuple[int, ...]
    #: the median cost over those ranks, % of the step
    impact_pct: float | None
    #: (rank, its own top rule or None) for the ranks that differ
    outliers: tuple[tuple[int, str | None], ...] = ()
    #: the rank the others wait for, where the rank rules found one
    straggler: int | None = None
    #: the rank that began the captured window last, the others waiting for it
    #: at the window's first collective (``ranks.uneven_start``)
    entered_last: int | None = None

    def to_json(self) -> dict[str, Any]:
        """``diagnosis`` in ``gputui analyze --json`` for several ranks (docs/json.md)."""
        return {
            "cause": self.cause,
            "title": self.title,
            "ranks": list(self.ranks),
            "impact_pct": self.impact_pct,
            "outliers": [{"rank": r, "rule": rule} for r, rule in self.outliers],
            "straggler": self.straggler,
            "entered_last": self.entered_last,
        }

    def sentence(self, one_job: bool = True) -> str:
        """The diagnosis in one sentence, for the text report; of traces that
        are not one job's ranks (``one_job`` False), by their files' order."""
        n = len(self.ranks) + len(self.outliers)
        unit, each = ("ranks", "rank") if one_job else ("traces", "trace")
        if self.straggler is not None:
            head = f"rank {self.straggler} is the straggler: the others wait for it"
            return head + (f" ({self.title})" if self.cause else "")
        if self.cause is None:
            head = f"nothing costly on most {unit} ({len(self.ranks)} of {n})"
        else:
            cost = ""
            if self.impact_pct is not None:
                # one job's ranks share a step; unrelated traces each have their own
                cost = f", {self.impact_pct:.0f}% of the step" + ("" if one_job else " (median)")
            head = f"{self.title} ({self.cause}) on {len(self.ranks)} of {n} {unit}{cost}"
        if self.outliers:
            head += "; " + ", ".join(
                f"{each} {r}: {rule or 'nothing costly'}" for r, rule in self.outliers
            )
            if self.entered_last is not None and any(
                rule in WAIT_RULES for _, rule in self.outliers
            ):
                head += (
                    f" (each holds its wait for rank {self.entered_last}, which began "
                    "the window last: ranks.uneven_start)"
                )
        return head


#: the rules whose cost is a rank's waiting (for its GPU, for its peers)
WAIT_RULES = frozenset({"comm.share", "sync.host_sync"})


def _top(found: Sequence[Finding]) -> Finding | None:
    return next((f for f in found if f.severity in (WARN, CRIT) and f.impact_pct), None)


def job_diagnosis(
    per_rank: Sequence[tuple[int, Sequence[Finding]]], across: Sequence[Finding] = ()
) -> Diagnosis | None:
    """The diagnosis of ``per_rank`` (rank, its ranked findings) and the rank
    rules' findings ``across`` them; None for fewer than two ranks."""
    if len(per_rank) < 2:
        return None
    tops = [RankTop(rank, _top(found)) for rank, found in per_rank]
    straggler = next(
        (f for f in across if f.rule == "ranks.straggler" and f.severity in (WARN, CRIT)),
        None,
    )
    if straggler is not None:
        rank = _rank_of(straggler.scope)
        own = next((t.finding for t in tops if t.rank == rank), None)
        others = tuple(t.rank for t in tops if t.rank != rank)
        return Diagnosis(
            cause=None if own is None else own.rule,
            title=straggler.title if own is None else own.title,
            ranks=others,
            impact_pct=straggler.impact_pct,
            straggler=rank,
        )
    votes: dict[str | None, list[RankTop]] = {}
    for t in tops:
        votes.setdefault(None if t.finding is None else t.finding.rule, []).append(t)

    def weight(rule: str | None) -> tuple[int, float]:
        costs = [t.finding.impact_pct or 0.0 for t in votes[rule] if t.finding is not None]
        return len(votes[rule]), median(costs) if costs else 0.0

    uneven = next((f for f in across if f.rule == "ranks.uneven_start"), None)
    cause = max(votes, key=weight)
    leading = votes[cause]
    costs = [t.finding.impact_pct for t in leading if t.finding and t.finding.impact_pct]
    first = next((t.finding for t in leading if t.finding is not None), None)
    return Diagnosis(
        cause=cause,
        title="nothing costly" if first is None else first.title,
        ranks=tuple(t.rank for t in leading),
        impact_pct=round(median(costs), 1) if costs else None,
        outliers=tuple(
            (t.rank, None if t.finding is None else t.finding.rule)
            for t in tops
            if t not in leading
        ),
        entered_last=None if uneven is None else _rank_of(uneven.scope),
    )


def _rank_of(scope: str) -> int | None:
    """The rank a rank rule's finding is about ("rank 3")."""
    word = scope.removeprefix("rank ").strip()
    return int(word) if word.isdigit() else None
