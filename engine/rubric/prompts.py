"""Annotator prompts, reply schemas and reply validation for the three rubric tasks.

Each task has a ``*_messages`` builder (system + user chat messages) and a ``parse_*`` function
that turns a reply's text into validated labels or raises :class:`ReplyError` with a message
that is sent back to the annotator on retry. Replies are one JSON object; a fenced code block
around it is tolerated, anything else (prose, refusals) is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from engine.rubric.model import (
    ABSENT,
    CAUSE_CATEGORY,
    PRESENT,
    PROPAGATION_CATEGORY,
    UPTAKE_CATEGORY,
    Rubric,
)

TRAJECTORY_CHARS = 24_000
SOURCE_CHARS = 16_000
SKILL_CHARS = 12_000


class ReplyError(ValueError):
    """An annotator reply that does not satisfy the task's schema."""


@dataclass(frozen=True)
class Label:
    """One validated label, ready for ``storage.writes.add_label``."""

    category: str
    value: str
    evidence: str


SYSTEM = (
    "You are a careful annotator for a GPU-kernel benchmark study. You label material "
    "strictly by the rubric given, quote evidence verbatim from the material, and reply with "
    "exactly one JSON object matching the schema, with no text before or after it."
)


def extract_json(text: str) -> dict[str, Any]:
    """The single JSON object in a reply (optionally inside a ```json fence)."""
    stripped = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", stripped, flags=re.DOTALL)
    if fence:
        stripped = fence.group(1)
    if not stripped.startswith("{"):
        raise ReplyError("the reply is not a JSON object (it must start with '{')")
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"the reply is not valid JSON: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(data, dict):
        raise ReplyError("the reply must be a JSON object")
    return data


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


def _quoted_in(evidence: str, material: str) -> bool:
    """Evidence counts as quoted when each '...'-separated piece occurs in the material."""
    pieces = [p for p in re.split(r"\.\.\.|…", evidence) if p.strip()]
    hay = _normalise(material)
    return bool(pieces) and all(_normalise(p.strip(" \"'")) in hay for p in pieces)


def _string(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise ReplyError(f"{key!r} must be a string")
    return value.strip()


# -- task 1: skill content -----------------------------------------------------------------
def skill_schema(rubric: Rubric) -> dict[str, Any]:
    entry = {
        "type": "object",
        "properties": {"present": {"type": "boolean"}, "evidence": {"type": "string"}},
        "required": ["present", "evidence"],
    }
    return {
        "type": "object",
        "properties": {
            "labels": {
                "type": "object",
                "properties": {t.key: entry for t in rubric.categories},
                "required": [t.key for t in rubric.categories],
            }
        },
        "required": ["labels"],
    }


def skill_messages(rubric: Rubric, skill_text: str) -> list[dict[str, str]]:
    lines = [
        "Label the SKILL below for each rubric category. A category is present when at least "
        "one statement in the skill matches its criterion. Judge the claims and the evidence "
        "the skill states; do not verify them. For a present category, 'evidence' is a "
        "verbatim quote from the skill (you may join pieces with '...'); for an absent one, "
        "an empty string.",
        "",
        "CATEGORIES (key: name — criterion)",
    ]
    for t in rubric.categories:
        lines += [f"- {t.key}: {t.name} — {t.criterion}",
                  f"  present, e.g.: {t.positive}", f"  absent, e.g.: {t.negative}"]
    lines += ["", "Reply schema (JSON Schema):", json.dumps(skill_schema(rubric)), "",
              "SKILL", "-----", _clip(skill_text, SKILL_CHARS)]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def parse_skill(rubric: Rubric, text: str, skill_text: str) -> list[Label]:
    data = extract_json(text)
    labels = data.get("labels")
    if not isinstance(labels, dict):
        raise ReplyError("'labels' must be an object keyed by category key")
    missing = [t.key for t in rubric.categories if t.key not in labels]
    if missing:
        raise ReplyError(f"'labels' lacks categories {missing}")
    unknown = sorted(set(labels) - {t.key for t in rubric.categories})
    if unknown:
        raise ReplyError(f"'labels' has unknown categories {unknown}")
    out: list[Label] = []
    for t in rubric.categories:
        entry = labels[t.key]
        if not isinstance(entry, dict) or not isinstance(entry.get("present"), bool):
            raise ReplyError(f"labels.{t.key} must be an object with a boolean 'present'")
        evidence = _string(entry, "evidence")
        if entry["present"]:
            if not evidence:
                raise ReplyError(f"labels.{t.key} is present but has no evidence quote")
            if not _quoted_in(evidence, skill_text):
                raise ReplyError(f"labels.{t.key}: the evidence is not a verbatim quote from "
                                 "the skill")
        out.append(Label(t.name, PRESENT if entry["present"] else ABSENT, evidence))
    return out


# -- task 2: uptake and propagation ---------------------------------------------------------
def uptake_schema(rubric: Rubric) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "uptake": {"enum": [t.key for t in rubric.uptake]},
            "uptake_evidence": {"type": "string"},
            "propagation": {"type": "boolean"},
            "propagation_evidence": {"type": "string"},
        },
        "required": ["uptake", "uptake_evidence", "propagation", "propagation_evidence"],
    }


@dataclass(frozen=True)
class UptakeMaterial:
    """What the uptake annotator sees about one skill-conditioned attempt."""

    source_skill: str
    trajectory: str
    implementation: str
    own_skill: str


def uptake_messages(rubric: Rubric, material: UptakeMaterial) -> list[dict[str, str]]:
    lines = [
        "A coding agent wrote a GPU kernel in a target DSL with a SOURCE SKILL (notes written by "
        "an earlier attempt in another DSL) appended to its instructions. Rate how its "
        "implemented design took up the source skill, and whether a false or unverified "
        "claim of the source skill reappears in the attempt's OWN SKILL.",
        "",
        "UPTAKE RATINGS (key: name — criterion)",
        *[f"- {t.key}: {t.name} — {t.criterion}" for t in rubric.uptake],
        "",
        f"PROPAGATION — {rubric.propagation.criterion}",
        "",
        "Give short evidence for both judgements (quote or cite steps).",
        "Reply schema (JSON Schema):", json.dumps(uptake_schema(rubric)), "",
        "SOURCE SKILL", "------------", _clip(material.source_skill, SKILL_CHARS), "",
        "TRAJECTORY", "----------", _clip(material.trajectory, TRAJECTORY_CHARS), "",
        "FINAL IMPLEMENTATION", "--------------------",
        _clip(material.implementation or "(none collected)", SOURCE_CHARS), "",
        "OWN SKILL", "---------", _clip(material.own_skill or "(the attempt left no skill)",
                                       SKILL_CHARS),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def parse_uptake(rubric: Rubric, text: str, *, has_own_skill: bool) -> list[Label]:
    data = extract_json(text)
    keys = {t.key: t.name for t in rubric.uptake}
    rating = data.get("uptake")
    if rating not in keys:
        raise ReplyError(f"'uptake' must be one of {sorted(keys)}")
    flag = data.get("propagation")
    if not isinstance(flag, bool):
        raise ReplyError("'propagation' must be true or false")
    yes, no = rubric.propagation_values
    prop_evidence = _string(data, "propagation_evidence")
    if not has_own_skill:  # the rubric's rule: no own skill, no propagation
        flag, prop_evidence = False, "the attempt left no skill of its own"
    return [
        Label(UPTAKE_CATEGORY, keys[rating], _string(data, "uptake_evidence")),
        Label(PROPAGATION_CATEGORY, yes if flag else no, prop_evidence),
    ]


# -- task 3: failure cause -----------------------------------------------------------------
def cause_schema(rubric: Rubric) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "target_side_failure": {"type": "boolean"},
            "applicable": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"cause": {"enum": [t.key for t in rubric.causes]},
                                   "evidence": {"type": "string"}},
                    "required": ["cause", "evidence"],
                },
            },
        },
        "required": ["target_side_failure", "applicable"],
    }


def cause_messages(rubric: Rubric, summary: str, material: UptakeMaterial,
                   baseline: str) -> list[dict[str, str]]:
    lines = [
        "A skill-conditioned attempt (TREATMENT) did worse than the same model's attempt "
        "without the skill (BASELINE). Decide whether the treatment shows a target-side "
        "failure, and list every failure class that applies with evidence. Classes in "
        "precedence order (the first applicable one becomes the primary cause):",
        *[f"{i}. {t.key}: {t.name} — {t.criterion}" for i, t in enumerate(rubric.causes, 1)],
        "If there is no target-side failure, set target_side_failure to false and leave "
        "'applicable' empty.",
        "Reply schema (JSON Schema):", json.dumps(cause_schema(rubric)), "",
        "COMPARISON", "----------", summary, "",
        "BASELINE", "--------", _clip(baseline, 2_000), "",
        "SOURCE SKILL", "------------", _clip(material.source_skill, SKILL_CHARS), "",
        "TREATMENT TRAJECTORY", "--------------------",
        _clip(material.trajectory, TRAJECTORY_CHARS), "",
        "TREATMENT FINAL IMPLEMENTATION", "------------------------------",
        _clip(material.implementation or "(none collected)", SOURCE_CHARS), "",
        "TREATMENT OWN SKILL", "-------------------",
        _clip(material.own_skill or "(none)", SKILL_CHARS),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def parse_cause(rubric: Rubric, text: str) -> list[Label]:
    data = extract_json(text)
    failure = data.get("target_side_failure")
    if not isinstance(failure, bool):
        raise ReplyError("'target_side_failure' must be true or false")
    applicable = data.get("applicable")
    if not isinstance(applicable, list):
        raise ReplyError("'applicable' must be a list")
    keys = {t.key: t.name for t in rubric.causes}
    found: dict[str, str] = {}
    for i, item in enumerate(applicable, 1):
        if not isinstance(item, dict) or item.get("cause") not in keys:
            raise ReplyError(f"applicable[{i}].cause must be one of {sorted(keys)}")
        found.setdefault(keys[item["cause"]], _string(item, "evidence"))
    if not failure:
        if found:
            raise ReplyError("'applicable' must be empty when target_side_failure is false")
        return [Label(CAUSE_CATEGORY, rubric.no_failure, "")]
    primary = rubric.primary_cause(found)
    if primary is None:
        raise ReplyError("a target-side failure needs at least one applicable cause")
    others = [name for name in rubric.cause_names if name in found and name != primary]
    evidence = found[primary] + (f" [also: {', '.join(others)}]" if others else "")
    return [Label(CAUSE_CATEGORY, primary, evidence)]
