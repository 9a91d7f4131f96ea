"""Does this store's analysis of an imported public run reproduce the run's own snapshot?

The public harness writes ``results.json`` (``metakernelbench/results.py``: ``overall`` with
``by_direction`` and ``by_category``, and one entry per cell, i.e. problem × direction). Each
group holds ``n_resolved``, ``source_coverage`` (share of resolved cell-replicates whose source
passed), ``skill_coverage`` (share whose source wrote a SKILL.md), and the R@t ladders:
``base``, ``skill`` and ``lift`` (skill − base), also ``with_skill`` and
``by_source_verdict.passed|failed``. Here the same figures come from
:func:`engine.analysis.metrics.rate_ladder` over the imported comparisons: ``all``,
``source_wrote_skill``, ``source_passed`` and ``source_failed``.
"""

from __future__ import annotations

from typing import Any

from engine.analysis import metrics
from engine.analysis.outcomes import from_store

TOLERANCE = 1e-9  # rates agree bit for bit; S sums five rates in another order
PUBLIC_DIRECTIONS = {"cutedsl2tirx": "cute->tirx", "tirx2cutedsl": "tirx->cute"}


def _ours(comps: list[metrics.Comparison]) -> dict[str, Any]:
    ladder: dict[str, dict[str, Any]] = {
        str(row["subset"]): row for row in metrics.rate_ladder(comps)
    }
    n = int(ladder["all"]["n"])

    def contrast(name: str) -> dict[str, Any]:
        row = ladder[name]
        return {"base": row["base"], "skill": row["skill"], "lift": row["difference"]}

    return {
        "n_resolved": n,
        "source_coverage": int(ladder["source_passed"]["n"]) / n if n else None,
        "skill_coverage": int(ladder["source_wrote_skill"]["n"]) / n if n else None,
        **contrast("all"),
        "with_skill": contrast("source_wrote_skill"),
        "by_source_verdict": {
            "passed": contrast("source_passed"),
            "failed": contrast("source_failed"),
        },
    }


def _compare(theirs: Any, ours: Any, where: str, out: list[tuple[str, float | None]]) -> None:
    """Walk the public group; every number is compared with ours (None matches None and a
    ladder of Nones)."""
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            if key in (
                "usage",
                "n_cells",
                "n_cell_replicates",
                "by_direction",
                "by_category",
                "cell",
                "replicates",
            ):
                continue
            mine = ours.get(key) if isinstance(ours, dict) else None
            _compare(value, mine, f"{where}.{key}", out)
        return
    if theirs is None:
        empty = ours is None or (isinstance(ours, dict) and all(v is None for v in ours.values()))
        out.append((where, 0.0 if empty else None))
        return
    if isinstance(theirs, (int, float)) and isinstance(ours, (int, float)):
        out.append((where, abs(float(theirs) - float(ours))))
        return
    out.append((where, None))


def check_snapshot(snapshot: dict[str, Any], db: Any, experiment_id: str) -> dict[str, Any]:
    """Every figure of the snapshot against this store's analysis of the import."""
    from problems.spec import FAMILY_DIRS

    comps = metrics.comparisons(from_store(db, experiment_id).rows)
    results: list[tuple[str, float | None]] = []
    overall = snapshot.get("overall") or {}
    _compare(overall, _ours(comps), "overall", results)
    for name, group in (overall.get("by_direction") or {}).items():
        sub = [c for c in comps if c.direction == PUBLIC_DIRECTIONS.get(name)]
        _compare(group, _ours(sub), f"by_direction.{name}", results)
    for name, group in (overall.get("by_category") or {}).items():
        sub = [c for c in comps if c.family == FAMILY_DIRS.get(name, name)]
        _compare(group, _ours(sub), f"by_category.{name}", results)
    for cell in snapshot.get("cells") or []:
        spec = cell.get("cell") or {}
        pid, direction = f"p{str(spec.get('problem'))[:2]}", spec.get("direction")
        sub = [
            c
            for c in comps
            if c.problem == pid and c.direction == PUBLIC_DIRECTIONS.get(str(direction))
        ]
        _compare(cell, _ours(sub), f"cell.{spec.get('problem')}.{direction}", results)
    bad = [
        f"{where}: {'missing here' if d is None else f'differs by {d:.3g}'}"
        for where, d in results
        if d is None or d > TOLERANCE
    ]
    diffs = [d for _, d in results if d is not None]
    return {
        "checked": len(results),
        "reproduced": not bad and bool(results),
        "exact": not bad and all(d == 0.0 for d in diffs),
        "max_abs_diff": max(diffs, default=0.0),
        "differences": bad,
    }
