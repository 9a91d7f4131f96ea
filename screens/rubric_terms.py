"""The default rubric vocabulary (DESIGN.md, "Rubric"), used by the label dialog and views.

Hook: when the rubric/annotation module lands (``engine/rubric``), it should be the single
source of these lists; replace the constants below with an import from it.
"""

from __future__ import annotations

SKILL_CATEGORIES = (
    "workload facts",
    "verified reformulation",
    "measured evidence",
    "work partitioning",
    "bounded failure diagnosis",
    "verification recipe",
    "applicability conditions",
    "unsupported closure",
    "agenda handoff",
    "ambition capping",
    "source-DSL detail",
)
UPTAKE_VALUES = ("followed fully", "followed partially", "ignored", "contradicted",
                 "not applicable")
CAUSES = (
    "rule violation",
    "faulty execution",
    "budget & artifact mismanagement",
    "toolchain friction",
    "unverified adoption",
    "tolerance-edge loss",
    "search truncation",
)
# task → (subject type, category choices, value choices)
TASKS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "skill": ("skill", SKILL_CATEGORIES, ("present", "absent")),
    "uptake": ("attempt", ("uptake",), UPTAKE_VALUES),
    "cause": ("comparison", ("cause",), CAUSES),
}
