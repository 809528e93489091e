"""Findings settled against the ledger (DESIGN §12): causes over symptoms, every
cost capped at its part of the step and in milliseconds of the ledger's mean
step.  Pure."""

from __future__ import annotations

from collections.abc import Iterable

from gputui.analysis.finding import Finding, ranked
from gputui.analysis.ledger import (
    CLAIM_BUCKETS,
    GPU_BUSY,
    GPU_COMM,
    GPU_COPY,
    GPU_IDLE,
    HOST_CLAIMS,
    OUTSIDE,
    Ledger,
)
from gputui.analysis.live_account import REST
from gputui.analysis.registry import REGISTRY, severity_of
from gputui.analysis.severity import CRIT, WARN

#: the claims on the GPU's own time
GPU_SIDE = frozenset({GPU_BUSY, GPU_COMM, GPU_COPY})


def claim_of(f: Finding) -> str | None:
    """The part of the step a finding's cost lies in: its own (a rule that knows
    where its time went says so), else its rule's."""
    if f.bucket:
        return f.bucket
    r = REGISTRY.get(f.rule)
    return None if r is None else r.bucket


def _is_symptom(f: Finding) -> bool:
    r = REGISTRY.get(f.rule)
    return r is not None and r.symptom


def _may_attach(f: Finding) -> bool:
    r = REGISTRY.get(f.rule)
    return r is not None and (r.symptom or bool(r.symptom_of))


def _explains(symptom: Finding, cause: Finding) -> bool:
    """Whether ``cause`` names the time ``symptom`` points at."""
    r = REGISTRY.get(symptom.rule)
    if r is None or cause is symptom or cause.severity not in (WARN, CRIT):
        return False
    if cause.rule in r.symptom_of:
        return True
    if not r.symptom or _is_symptom(cause):
        return False
    where, why = claim_of(symptom), claim_of(cause)
    if where is None or why is None:
        return False
    if where == why:
        return True
    if where == GPU_IDLE:  # idle GPU time: any host-side cause explains it
        return why in HOST_CLAIMS
    if where in GPU_SIDE or why in GPU_SIDE or why == GPU_IDLE:
        return False
    # a bucket inside a group (launch inside issue)
    return bool(set(CLAIM_BUCKETS.get(where, ())) & set(CLAIM_BUCKETS.get(why, ())))


class _Budget:
    """What is left of each part of the step while claims are settled.

    The step is held by two resources, the host and the GPU.  A host-side fix
    (a bucket of the account) shortens the step by at most its bucket's time
    (a synchronization's also by the gaps it leaves the GPU) and, on a job with
    a GPU, all host-side fixes together by at most the GPU's idle time: the step
    cannot get shorter than the GPU's work.  A GPU-side fix shortens it by at
    most the GPU's busy time beyond what the host needs anyway
    (:attr:`Ledger.gpu_slack`)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.used: dict[str, float] = {}

    def _used(self, key: str) -> float:
        return self.used.get(key, 0.0)

    def _spend(self, key: str, amount: float) -> None:
        self.used[key] = self._used(key) + amount

    def _key(self, b: str) -> str:
        """The account's part a bucket draws on: itself, or, in a live account
        whose capture did not split the rest of the step, that rest."""
        shares = self.ledger.shares
        return b if b in shares or REST not in shares else REST

    def _bucket(self, b: str) -> float:
        led = self.ledger
        share = led.shares.get(self._key(b), 0.0)
        if b == "sync":  # the gaps a synchronization left the GPU
            share += led.idle_shares.get("sync", 0.0)
        return share

    def room(self, claim: str) -> float:
        led = self.ledger
        if claim == GPU_BUSY:
            slack = led.gpu_slack
            return (1.0 if slack is None else slack) - self._used("gpu")
        if claim in (GPU_COMM, GPU_COPY):
            exposed = led.gpu_comm if claim == GPU_COMM else led.gpu_copy
            return (1.0 if exposed is None else exposed) - self._used(claim)
        idle = led.gpu_idle
        host_room = (1.0 if idle is None else idle) - self._used("host")
        buckets = CLAIM_BUCKETS.get(claim, ())
        if claim == GPU_IDLE or not led.shares or not buckets:
            return host_room
        keys = {self._key(b): b for b in buckets}
        return min(host_room, sum(self._bucket(b) - self._used(k) for k, b in keys.items()))

    def take(self, claim: str, wanted: float) -> float:
        got = max(0.0, min(wanted, self.room(claim)))
        if claim == GPU_BUSY:
            self._spend("gpu", got)
            return got
        if claim in (GPU_COMM, GPU_COPY):
            self._spend(claim, got)
            return got
        self._spend("host", got)
        left = got
        for b in CLAIM_BUCKETS.get(claim, ()):  # a group draws on its buckets in order
            key = self._key(b)
            take = min(left, max(0.0, self._bucket(b) - self._used(key)))
            self._spend(key, take)
            left -= take
        return got


def settle(found: Iterable[Finding], ledger: Ledger) -> list[Finding]:
    """The findings as reported: every cost capped at what the ledger holds in
    its part of the step and in milliseconds of the ledger's mean step, severity
    from the settled cost, symptoms under the cause that names their time (the
    one with the largest settled cost), ranked.  Causes are settled first, so a
    symptom never takes a part of the step a cause names."""
    found = list(found)
    budget = _Budget(ledger)
    causes = _settled([f for f in found if not _may_attach(f)], budget, ledger)
    loose = [f for f in found if _may_attach(f)]
    under = _placement(causes, loose)  # id(symptom) -> index of its cause
    left = _settled([f for f in loose if id(f) not in under], budget, ledger)
    # a finding left standing may itself explain the pure symptoms beside it (a
    # dominant kernel under precision.fp32_matmul, which stands where
    # attention.sdpa_math does not speak)
    heads = [*causes, *left]
    more = _placement(heads, [f for f in left if _is_symptom(f)])
    heads = [f for f in heads if id(f) not in more]
    index = {id(f): i for i, f in enumerate(heads)}
    related: dict[int, list[Finding]] = {}
    for f in loose:
        if id(f) in under:
            related.setdefault(under[id(f)], []).append(f)
    all_heads = [*causes, *left]
    for f in left:
        if id(f) in more:
            cause = all_heads[more[id(f)]]
            related.setdefault(index[id(cause)], []).append(f)
    out = [
        f.evolve(related=(*f.related, *related[i])) if i in related else f
        for i, f in enumerate(heads)
    ]
    return ranked(out)


def _placement(causes: list[Finding], loose: list[Finding]) -> dict[int, int]:
    """For each finding of ``loose`` that a settled cause (or another of
    ``loose`` that stands on its own) explains: the index of that finding in
    ``causes + standing``, the one with the largest settled cost first."""
    heads = sorted(range(len(causes)), key=lambda i: -(causes[i].impact_pct or 0.0))
    out: dict[int, int] = {}
    for f in loose:
        i = next((i for i in heads if _explains(f, causes[i])), None)
        if i is not None:
            out[id(f)] = i
    return out


def _settled(findings: list[Finding], budget: _Budget, ledger: Ledger) -> list[Finding]:
    out: list[Finding] = []
    # the largest claims are settled first: a smaller claim on the same part
    # gets what is left
    for f in sorted(findings, key=lambda f: -(f.impact_pct or 0.0)):
        claim = claim_of(f)
        if f.impact_pct is None or claim is None or claim == OUTSIDE:
            out.append(f)
            continue
        wanted = f.impact_pct / 100.0
        # what it would get alone (its part's size caps it, not the others)
        alone = max(0.0, min(wanted, _Budget(ledger).room(claim)))
        got = budget.take(claim, wanted)
        pct = round(100.0 * got, 1)
        ms = ledger.ms(got) if ledger.step_s else f.impact_ms
        severity = f.severity
        if not f.severity_fixed:
            severity = severity_of(pct)
        overlap = round(100.0 * alone - pct, 1)  # taken by the findings settled before
        out.append(
            f.evolve(
                impact_pct=pct,
                impact_ms=ms,
                severity=severity,
                bucket=claim,
                # worth a word where it changes the figure: a point and a tenth of it
                overlap_pct=overlap if overlap >= max(1.0, 10.0 * alone) else None,
            )
        )
    return out
