"""The agreement report of a re-grade: verdicts, speedups and the paper's tables, the
bundle's beside this host's.

Verdicts are compared by class (``pass`` and ``preview`` both pass; ``fail``; ``error``),
so a CPU-preview re-grade of a preview experiment agrees when every implementation passes
or fails alike; every changed verdict is listed with both reason codes. Speedups are compared
only where both gradings passed: per implementation and per problem the natural log of
re-graded / original speedup, and the Spearman rank correlation over implementations. A
speedup measured in CPU preview is never comparable with one measured on a GPU: the report
says so (``speedups_comparable``).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from engine.analysis.stats import spearman

PASSING = ("pass", "preview")


@dataclass(frozen=True)
class Pair:
    """One implementation: what it is, its feedback in the bundle and here (None: not
    re-graded, ``skipped`` says why)."""

    label: dict[str, Any]  # model, problem, dsl, arm, replicate, purpose, n
    original: dict[str, Any]
    regraded: dict[str, Any] | None
    skipped: str | None = None


def verdict_class(verdict: str | None) -> str:
    return "pass" if verdict in PASSING else str(verdict or "none")


def _verdicts(pairs: list[Pair]) -> dict[str, Any]:
    compared = [p for p in pairs if p.regraded is not None]
    changed = [
        {
            **p.label,
            "original": {"verdict": p.original.get("verdict"), "reason": p.original.get("reason")},
            "regraded": {"verdict": p.regraded.get("verdict"), "reason": p.regraded.get("reason")},
        }
        for p in compared
        if p.regraded is not None
        and verdict_class(p.original.get("verdict")) != verdict_class(p.regraded.get("verdict"))
    ]
    agree = len(compared) - len(changed)
    return {
        "compared": len(compared),
        "agree": agree,
        "agreement": agree / len(compared) if compared else None,
        "changed": changed,
        "not_regraded": [
            {**p.label, "why": p.skipped or "not graded"} for p in pairs if p.regraded is None
        ],
    }


def _speedups(pairs: list[Pair]) -> dict[str, Any]:
    rows = []
    for p in pairs:
        if p.regraded is None:
            continue
        old, new = p.original.get("speedup"), p.regraded.get("speedup")
        both = (
            verdict_class(p.original.get("verdict")) == "pass"
            and verdict_class(p.regraded.get("verdict")) == "pass"
        )
        if (
            both
            and isinstance(old, (int, float))
            and isinstance(new, (int, float))
            and old > 0
            and new > 0
        ):
            rows.append(
                {**p.label, "original": old, "regraded": new, "log_ratio": math.log(new / old)}
            )
    by_problem: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_problem[str(r["problem"])].append(float(r["log_ratio"]))
    per_problem = [
        {
            "problem": pid,
            "n": len(v),
            "mean_log_ratio": statistics.fmean(v),
            "ratio": math.exp(statistics.fmean(v)),
        }
        for pid, v in sorted(by_problem.items())
    ]
    return {
        "n": len(rows),
        "per_implementation": rows,
        "per_problem": per_problem,
        "spearman": spearman([r["original"] for r in rows], [r["regraded"] for r in rows]),
    }


def agreement(
    pairs: list[Pair],
    *,
    original_preview: bool,
    regrade_preview: bool,
    original_devices: list[str],
    regrade_device: str,
) -> dict[str, Any]:
    """Verdict agreement and speedup comparison over every implementation pair."""
    comparable = original_preview == regrade_preview and (
        original_preview or original_devices == [regrade_device]
    )
    return {
        "implementations": len(pairs),
        "verdicts": _verdicts(pairs),
        "speedups": _speedups(pairs),
        "speedups_comparable": comparable,
        "speedups_note": ""
        if comparable
        else (
            "the two gradings ran on different devices (or one in CPU preview): speedup "
            "ratios describe the hosts, not the implementations"
        ),
    }
