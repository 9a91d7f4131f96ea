"""Skill rubric and annotation: rubric files, LLM and human labels, agreement and views."""

from engine.rubric.model import (
    Rubric,
    RubricError,
    default_rubric,
    load_rubric,
    parse_rubric,
)

__all__ = ["Rubric", "RubricError", "default_rubric", "load_rubric", "parse_rubric"]
