"""Pure rubric views over the store (the TUI and ``mkb rubric report`` call these).

- :func:`category_prevalence`: share of source skills with each category present, in helped
  vs harmed comparisons, per model (difference in points, harmed − helped).
- :func:`uptake_by_outcome`: uptake-rating and propagation shares by transfer outcome.
- :func:`failure_causes`: primary causes per model, groups merged (e.g. rule and precision
  failure), as counts and shares of the model's resolved comparisons.
- :func:`uptake_lift`: share followed fully vs ΔGM over model × family cells, with their
  Spearman rank correlation.
Labels are resolved per item as described in :mod:`engine.rubric.labels`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from sqlite_utils import Database

from engine.analysis.stats import spearman
from engine.rubric import subjects
from engine.rubric.agreement import agreement
from engine.rubric.labels import resolved_labels
from engine.rubric.model import (
    CAUSE_CATEGORY,
    PRESENT,
    PROPAGATION_CATEGORY,
    UPTAKE_CATEGORY,
    Rubric,
    default_rubric,
)
from storage import queries
from storage.queries import ComparisonRow


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _comparisons(db: Database, experiment_id: str | None) -> list[ComparisonRow]:
    return queries.comparisons(db, experiment_id, resolved_only=True)


def category_prevalence(db: Database, *, experiment_id: str | None = None,
                        annotator: str | None = None, rubric: Rubric | None = None
                        ) -> list[dict[str, Any]]:
    rubric = rubric or default_rubric()
    labels = resolved_labels(db, task="skill", experiment_id=experiment_id, annotator=annotator)
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    models: set[str] = set()
    for comp in _comparisons(db, experiment_id):
        if comp.verdict not in ("help", "harm"):
            continue
        skill_id = subjects.comparison_skill_id(db, comp)
        if skill_id is None:
            continue
        for category in rubric.category_names:
            value = labels.get(("skill", skill_id, category))
            if value is None:
                continue
            models.add(comp.model)
            cell = counts[(comp.model, category, comp.verdict)]
            cell[0] += value == PRESENT
            cell[1] += 1
    rows = []
    for model in sorted(models):
        for category in rubric.category_names:
            helped_k, helped_n = counts.get((model, category, "help"), [0, 0])
            harmed_k, harmed_n = counts.get((model, category, "harm"), [0, 0])
            helped, harmed = _share(helped_k, helped_n), _share(harmed_k, harmed_n)
            rows.append({
                "model": model, "category": category,
                "helped_n": helped_n, "helped_present": helped_k, "helped_share": helped,
                "harmed_n": harmed_n, "harmed_present": harmed_k, "harmed_share": harmed,
                "harmed_minus_helped_pts": (None if helped is None or harmed is None
                                            else 100.0 * (harmed - helped)),
            })
    return rows


def uptake_by_outcome(db: Database, *, experiment_id: str | None = None,
                      annotator: str | None = None, rubric: Rubric | None = None
                      ) -> list[dict[str, Any]]:
    rubric = rubric or default_rubric()
    labels = resolved_labels(db, task="uptake", experiment_id=experiment_id,
                             annotator=annotator)
    yes = rubric.propagation_values[0]
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for comp in _comparisons(db, experiment_id):
        if comp.treatment_attempt_id is None or comp.verdict is None:
            continue
        rating = labels.get(("uptake", comp.treatment_attempt_id, UPTAKE_CATEGORY))
        flag = labels.get(("uptake", comp.treatment_attempt_id, PROPAGATION_CATEGORY))
        if rating is None and flag is None:
            continue
        cell = cells.setdefault((comp.model, comp.verdict), {
            "n": 0, "ratings": dict.fromkeys(rubric.uptake_names, 0),
            "propagation_n": 0, "propagated": 0})
        if rating is not None:
            cell["n"] += 1
            cell["ratings"][rating] = cell["ratings"].get(rating, 0) + 1
        if flag is not None:
            cell["propagation_n"] += 1
            cell["propagated"] += flag == yes
    rows = []
    for (model, outcome), cell in sorted(cells.items()):
        row: dict[str, Any] = {"model": model, "outcome": outcome, "n": cell["n"]}
        for name, k in cell["ratings"].items():
            row[name] = _share(k, cell["n"])
        full, partial = rubric.uptake_names[0], rubric.uptake_names[1]
        row["followed"] = _share(cell["ratings"].get(full, 0) + cell["ratings"].get(partial, 0),
                                 cell["n"])
        row["propagation_n"] = cell["propagation_n"]
        row["propagation"] = _share(cell["propagated"], cell["propagation_n"])
        rows.append(row)
    return rows


def failure_causes(db: Database, *, experiment_id: str | None = None,
                   annotator: str | None = None, rubric: Rubric | None = None
                   ) -> list[dict[str, Any]]:
    rubric = rubric or default_rubric()
    labels = resolved_labels(db, task="cause", experiment_id=experiment_id, annotator=annotator)
    per_model: dict[str, dict[str, Any]] = {}
    for comp in _comparisons(db, experiment_id):
        cell = per_model.setdefault(comp.model, {
            "comparisons": 0, "harmed": 0, "labelled": 0, "excluded": 0,
            "causes": dict.fromkeys(rubric.reported_causes, 0)})
        cell["comparisons"] += 1
        cell["harmed"] += comp.verdict == "harm"
        value = labels.get(("cause", comp.id, CAUSE_CATEGORY))
        if value is None or comp.verdict != "harm":
            continue
        cell["labelled"] += 1
        if value == rubric.no_failure:
            cell["excluded"] += 1
            continue
        name = rubric.report_cause(value)
        cell["causes"][name] = cell["causes"].get(name, 0) + 1
    rows = []
    for model, cell in sorted(per_model.items()):
        for cause, k in cell["causes"].items():
            rows.append({"model": model, "cause": cause, "count": k,
                         "share_of_comparisons": _share(k, cell["comparisons"]),
                         "comparisons": cell["comparisons"], "harmed": cell["harmed"],
                         "labelled": cell["labelled"], "excluded": cell["excluded"]})
    return rows


def uptake_lift(db: Database, *, experiment_id: str | None = None,
                annotator: str | None = None, rubric: Rubric | None = None) -> dict[str, Any]:
    """Share followed fully vs ΔGM per model × family (comparisons with a transferred skill)."""
    rubric = rubric or default_rubric()
    labels = resolved_labels(db, task="uptake", experiment_id=experiment_id,
                             annotator=annotator)
    full = rubric.uptake_names[0]
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"logs": [], "rated": 0, "full": 0})
    for comp in _comparisons(db, experiment_id):
        if comp.skipped or comp.rho is None or comp.treatment_attempt_id is None:
            continue
        cell = cells[(comp.model, comp.family or "unknown")]
        cell["logs"].append(math.log(comp.rho))
        rating = labels.get(("uptake", comp.treatment_attempt_id, UPTAKE_CATEGORY))
        if rating is not None:
            cell["rated"] += 1
            cell["full"] += rating == full
    rows = []
    for (model, family), cell in sorted(cells.items()):
        logs = cell["logs"]
        rows.append({"model": model, "family": family, "n": len(logs), "rated": cell["rated"],
                     "followed_fully": _share(cell["full"], cell["rated"]),
                     "delta_gm": math.exp(sum(logs) / len(logs)) - 1.0})
    usable = [r for r in rows if r["followed_fully"] is not None]
    rho = spearman([r["followed_fully"] for r in usable], [r["delta_gm"] for r in usable])
    return {"cells": rows, "n_cells": len(usable), "spearman": rho}  # n_cells: rated cells


def uptake_lift_summary(lift: dict[str, Any]) -> str:
    """One line on the uptake–lift correlation that names the cells it is computed over."""
    cells, rated = len(lift["cells"]), lift["n_cells"]
    if not cells:
        return "uptake vs lift: no model x family cell has a transferred skill yet"
    if not rated:
        return (
            f"uptake vs lift: none of the {cells} model x family cells has uptake ratings "
            "yet (no Spearman)"
        )
    rho = lift["spearman"]
    value = "- (undefined: needs 3 rated cells that vary)" if rho is None else format(rho, "+.3f")
    return (
        f"uptake vs lift: Spearman {value} over the {rated} of {cells} model x family "
        "cells with uptake ratings"
    )


def annotation_failures(db: Database) -> list[dict[str, Any]]:
    """Recorded ``annotation_failed`` events (newest last)."""
    return [dict(e.payload, event_id=e.id, at=e.created_at)
            for e in queries.events_after(db, 0, limit=1_000_000)
            if e.kind == "annotation_failed"]


def label_usage(db: Database) -> list[dict[str, Any]]:
    """Labels, tokens and cost per task and annotator."""
    return [dict(r) for r in db.query(
        "SELECT task, annotator, annotator_kind, count(*) AS labels, "
        "sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out, "
        "sum(cost_usd) AS cost_usd FROM labels GROUP BY task, annotator, annotator_kind "
        "ORDER BY task, annotator")]


def report(db: Database, *, experiment_id: str | None = None, annotator: str | None = None,
           rubric: Rubric | None = None) -> dict[str, Any]:
    """Every rubric view in one JSON-ready dict (``experiment`` None: all experiments)."""
    rubric = rubric or default_rubric()
    chosen = [e for e in queries.experiments(db) if experiment_id is None or e.id == experiment_id]
    preview = any(e.preview for e in chosen)
    kw: dict[str, Any] = {"experiment_id": experiment_id, "annotator": annotator,
                          "rubric": rubric}
    return {
        "rubric": {
            "name": rubric.name,
            "hash": rubric.hash,
            "uptake_ratings": list(rubric.uptake_names),
        },
        "experiment": experiment_id,
        "experiment_name": chosen[0].name if experiment_id is not None and chosen else None,
        "preview": preview,
        "usage": label_usage(db),
        "prevalence": category_prevalence(db, **kw),
        "uptake": uptake_by_outcome(db, **kw),
        "causes": failure_causes(db, **kw),
        "uptake_lift": uptake_lift(db, **kw),
        "agreement": agreement(db, experiment_id=experiment_id),
        "failures": len(annotation_failures(db)),
    }
