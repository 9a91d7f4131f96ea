"""Power planning from a pilot in the store (``mkb power CONFIG --from DB``, the launch form)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.analysis import metrics
from engine.analysis.noise_lift import bands_of
from engine.analysis.outcomes import OutcomeError, from_store
from engine.analysis.power import DEFAULT_LIFTS, comparison_plan, plan, planned_cells

MIN_PILOT = 2  # resolved comparisons a pilot needs


def find_pilot(db: Any, exclude: str | None = None) -> str | None:
    """The newest experiment with at least :data:`MIN_PILOT` resolved comparisons, other than
    ``exclude`` (the experiment being planned)."""
    rows = db.execute(
        "SELECT e.id FROM experiments e JOIN comparisons c ON c.experiment_id = e.id "
        "WHERE c.resolved = 1 AND e.id != ? GROUP BY e.id HAVING count(*) >= ? "
        "ORDER BY e.created_at DESC LIMIT 1",
        [exclude or "", MIN_PILOT],
    ).fetchall()
    return str(rows[0][0]) if rows else None


def plan_from_store(
    db: Any,
    config: Any,
    pilot: str | None = None,
    *,
    lifts: Sequence[float] = DEFAULT_LIFTS,
    alpha: float = 0.05,
    power: float = 0.8,
    repeats: int | None = None,
) -> dict[str, Any] | None:
    """The plan of ``config`` judged by ``pilot`` (default: :func:`find_pilot`); None when the
    store holds no pilot. ``repeats`` defaults to the config's ``final_repeats``."""
    pilot = pilot or find_pilot(db, getattr(config, "id", None))
    if pilot is None:
        return None
    outcomes = from_store(db, pilot)
    comps = metrics.comparisons(outcomes.rows)
    if len(comps) < MIN_PILOT:
        raise OutcomeError(
            f"experiment {pilot!r} has {len(comps)} resolved comparisons; a pilot needs {MIN_PILOT}"
        )
    bands = bands_of(outcomes)
    r = repeats if repeats is not None else int(getattr(config, "final_repeats", 1))
    cells = plan(
        planned_cells(config), comps, bands, repeats=r, lifts=lifts, alpha=alpha, power=power
    )
    return {
        "pilot": pilot,
        "pilot_comparisons": len(comps),
        "preview": outcomes.preview,
        "bands": [b.as_dict() for b in bands.values()],
        "repeats": r,
        "alpha": alpha,
        "power": power,
        "lifts": list(lifts),
        "cells": cells,
        "per_comparison": comparison_plan(bands.values(), max(r, 2), alpha=alpha, power=power),
    }


def summary_line(result: dict[str, Any] | None) -> str:
    """One line for the launch form: the plan's expected power over all problems."""
    if result is None:
        return "expected power: no pilot in this store (run a pilot first; docs/analysis.md)"
    alls = [c for c in result["cells"] if c["family"] == "all" and c["lifts"]]
    if not alls:
        return f"expected power: pilot {result['pilot']} too small to estimate the spread of ρ"
    parts = []
    for i, lift in enumerate(result["lifts"]):
        low = min(c["lifts"][i]["power"] for c in alls)
        parts.append(f"ΔGM {lift:+.0%}: {low:.0%}")
    label = ", PREVIEW" if result["preview"] else ""
    return (
        f"expected power (pilot {result['pilot']}{label}; R={result['repeats']}; lowest "
        "model × direction): " + ", ".join(parts) + _per_comparison(result)
    )


def _per_comparison(result: dict[str, Any]) -> str:
    """The per-comparison planner in a phrase: the range over the bands of the chance k pairs
    call a 1.1× help, and the most pairs a band needs for it."""
    rows = result.get("per_comparison") or []
    if not rows:
        return ""
    chances = [r["detect_0.1"] for r in rows]
    k = rows[0]["pairs"]
    most = max(r["pairs_for_0.1"] for r in rows)
    return (
        f"; one comparison at k={k} pairs calls a 1.1× help {min(chances):.0%}–"
        f"{max(chances):.0%} of the time (k={most} on the noisiest band for "
        f"{result['power']:.0%})"
    )


def expected_power(db: Any, config: Any) -> str:
    """The launch form's line: the plan's expected power from the store's newest pilot."""
    try:
        return summary_line(plan_from_store(db, config))
    except (OutcomeError, KeyError, ValueError) as exc:
        return f"expected power: not available ({exc})"
