"""The rubric vocabulary for the label dialog and views, taken from the default rubric
(``engine/rubric/default_rubric.toml`` via :func:`engine.rubric.default_rubric`)."""

from __future__ import annotations

from engine.rubric import default_rubric

_RUBRIC = default_rubric()

SKILL_CATEGORIES: tuple[str, ...] = _RUBRIC.category_names
UPTAKE_VALUES: tuple[str, ...] = _RUBRIC.uptake_names
PROPAGATION_VALUES: tuple[str, ...] = _RUBRIC.propagation_values
CAUSES: tuple[str, ...] = (*_RUBRIC.cause_names, _RUBRIC.no_failure)
# task → (subject type, category choices, value choices)
TASKS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "skill": ("skill", SKILL_CATEGORIES, ("present", "absent")),
    "uptake": ("attempt", ("uptake",), UPTAKE_VALUES),
    "cause": ("comparison", ("cause",), CAUSES),
}


def values_for(task: str, category: str) -> tuple[str, ...]:
    """Allowed values of one task/category (e.g. uptake/propagation → yes, no)."""
    return _RUBRIC.allowed_values(task, category)
