"""A comparison's paired, interleaved finals as the analysis reads them (``timing_repeats``
rows with a ``pair_key``, migration m008).

A paired job grades a comparison's baseline and treatment k times each on one grading slot,
interleaved in pairs (each pair's order drawn at random). Both arms' rows share
``pair_key = pair:<experiment id>:<comparison id>``; each arm's rows are one series
(``pair:<experiment id>:<comparison id>:<arm>``) and ``repeat`` is the row's position in the
job's interleaved order, so the i-th baseline row and the i-th treatment row (by ``repeat``)
form pair i.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

PASSING = ("pass", "preview")


@dataclass(frozen=True)
class PairedGrading:
    """One graded row of a paired job."""

    series: str
    repeat: int
    dsl: str
    host: str  # machine · device (the band's host)
    slot: str  # the grading slot that ran it ('' when not recorded: the host stands in)
    verdict: str | None
    impl_median_ms: float | None
    span_ms: float | None
    source_hash: str = ""  # the graded file's (its arm's solo finals share it)

    @property
    def passed(self) -> bool:
        return self.verdict in PASSING

    @property
    def where(self) -> str:
        return self.slot or self.host


@dataclass(frozen=True)
class PairedComparison:
    """A comparison's paired gradings, each arm's in interleaved order."""

    comparison_id: int
    model: str
    problem_id: str
    direction: str
    replicate: int
    baseline: tuple[PairedGrading, ...]
    treatment: tuple[PairedGrading, ...]

    @property
    def pairs(self) -> list[tuple[PairedGrading, PairedGrading]]:
        """Pair i: the i-th baseline and the i-th treatment grading."""
        return list(zip(self.baseline, self.treatment, strict=False))


def has_pairing(db: Any) -> bool:
    """Whether the store records pairings (migration m008; a read-only older store does not)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(timing_repeats)").fetchall()}
    return {"pair_key", "arm", "slot", "span_ms"} <= columns


def comparison_pairs(db: Any, experiment_id: str) -> list[PairedComparison]:
    """Every comparison of the experiment with graded paired rows (``done``), by id; none in a
    store older than the pairing columns."""
    if not has_pairing(db):
        return []
    rows = db.execute(
        "SELECT t.pair_key, t.arm, t.series, t.repeat, t.dsl, t.host, t.slot, t.verdict, "
        "t.impl_median_ms, t.span_ms, t.source_hash, c.id, c.model, c.problem_id, c.direction, "
        "c.replicate "
        "FROM timing_repeats t JOIN comparisons c "
        "ON t.pair_key = 'pair:' || c.experiment_id || ':' || c.id "
        "WHERE t.experiment_id = ? AND c.experiment_id = ? AND t.pair_key IS NOT NULL "
        "AND t.state = 'done' AND t.arm IN ('baseline', 'treatment') "
        "ORDER BY c.id, t.repeat",
        [experiment_id, experiment_id],
    ).fetchall()
    arms: dict[int, dict[str, list[PairedGrading]]] = defaultdict(
        lambda: {"baseline": [], "treatment": []}
    )
    keys: dict[int, tuple[str, str, str, int]] = {}
    for key, arm, series, repeat, dsl, host, slot, verdict, impl, span, sha, cid, *rest in rows:
        del key
        arms[cid][arm].append(
            PairedGrading(
                series, int(repeat), dsl, host, slot or "", verdict, impl, span, sha or ""
            )
        )
        keys[cid] = (rest[0], rest[1], rest[2], int(rest[3]))
    return [
        PairedComparison(cid, *keys[cid], tuple(a["baseline"]), tuple(a["treatment"]))
        for cid, a in sorted(arms.items())
    ]


def solo_gradings(
    db: Any, experiment_id: str, hashes: set[str]
) -> dict[tuple[str, str], list[tuple[float | None, float | None]]]:
    """The experiment's passing unpaired gradings of these files, by (source hash, host):
    (end to end, span) each; more readings of a paired arm's file on its host."""
    out: dict[tuple[str, str], list[tuple[float | None, float | None]]] = defaultdict(list)
    if not hashes or not has_pairing(db):
        return out
    rows = db.execute(
        "SELECT source_hash, host, impl_median_ms, span_ms FROM timing_repeats "
        "WHERE experiment_id = ? AND pair_key IS NULL AND state = 'done' "
        "AND verdict IN ('pass', 'preview')",
        [experiment_id],
    ).fetchall()
    for sha, host, impl, span in rows:
        if sha in hashes:
            out[(sha, host)].append((impl, span))
    return out
