"""The stored pairing of an experiment's paired finals (``engine/paired_repeats.py``), per
comparison: the slots and hosts its job ran on, its order as graded (``A B B A …``), its
complete pairs and whether every pair ran on one slot (``paired``) or any spans two
(``cross_host``). ``mkb analyze --json`` shows it under ``pairing``."""

from __future__ import annotations

from typing import Any

from engine.analysis.paired_test import pairing_status
from storage import queries
from storage import repeats as repeat_rows


def _ordered_unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def pairing_table(db: Any, experiment_id: str) -> list[dict[str, Any]]:
    """One entry per comparison with a paired job, in comparison id order."""
    comparisons = {c.id: c for c in queries.comparisons(db, experiment_id)}
    out = []
    for comparison_id, rows in sorted(repeat_rows.paired_rows(db, experiment_id).items()):
        done = [r for r in rows if r.state == "done"]
        base = [r for r in done if r.arm == "baseline"]
        treat = [r for r in done if r.arm == "treatment"]
        pairs = [(b.slot, t.slot) for b, t in zip(base, treat, strict=False)]
        comp = comparisons.get(comparison_id)
        out.append(
            {
                "comparison_id": comparison_id,
                "model": comp.model if comp else None,
                "problem": comp.problem_id if comp else None,
                "direction": comp.direction if comp else None,
                "replicate": comp.replicate if comp else None,
                "status": pairing_status(pairs),
                "pairs": len(pairs),
                "gradings": len(done),
                "open": len(rows) - len(done),  # running, or an infrastructure error
                "order": "".join("A" if r.arm == "baseline" else "B" for r in done),
                "slots": _ordered_unique([r.slot for r in done]),
                "hosts": _ordered_unique([r.host for r in done]),
            }
        )
    return out
