"""The rubric: skill-content categories, uptake ratings, propagation flag and failure causes.

A rubric is a TOML file (``default_rubric.toml`` is the default). Labels are stored under the
display names (``category`` and ``value`` columns of the ``labels`` table); the snake-case keys
name the fields of annotator replies. :func:`load_rubric` validates a file and raises
:class:`RubricError` with a message naming the offending entry.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_RUBRIC_PATH = Path(__file__).resolve().parent / "default_rubric.toml"
PRESENT, ABSENT = "present", "absent"
UPTAKE_CATEGORY = "uptake"
PROPAGATION_CATEGORY = "propagation"
CAUSE_CATEGORY = "cause"
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


class RubricError(ValueError):
    """A rubric file is missing, unreadable or malformed; the message says where."""


@dataclass(frozen=True)
class Term:
    """One named entry of the rubric (a category, a rating or a cause class)."""

    key: str
    name: str
    criterion: str
    positive: str = ""
    negative: str = ""


@dataclass(frozen=True)
class CauseGroup:
    """Cause classes reported together (e.g. "rule and precision failure")."""

    name: str
    members: tuple[str, ...]  # cause keys


@dataclass(frozen=True)
class Rubric:
    name: str
    categories: tuple[Term, ...]
    uptake: tuple[Term, ...]
    propagation: Term
    propagation_values: tuple[str, str]  # (yes, no)
    causes: tuple[Term, ...]  # in precedence order, highest first
    no_failure: str
    cause_groups: tuple[CauseGroup, ...]
    source: str  # the TOML text it was loaded from

    @property
    def hash(self) -> str:
        """Stable digest of the rubric's content (stored with every label)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "categories": [asdict(t) for t in self.categories],
            "uptake": [asdict(t) for t in self.uptake],
            "propagation": asdict(self.propagation),
            "propagation_values": list(self.propagation_values),
            "causes": [asdict(t) for t in self.causes],
            "no_failure": self.no_failure,
            "cause_groups": [{"name": g.name, "members": list(g.members)}
                             for g in self.cause_groups],
        }

    # -- names ---------------------------------------------------------------------------
    @property
    def category_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.categories)

    @property
    def uptake_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.uptake)

    @property
    def cause_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.causes)

    def primary_cause(self, names: Iterable[str]) -> str | None:
        """The applicable cause that comes first in precedence order (None if none apply)."""
        chosen = set(names)
        return next((t.name for t in self.causes if t.name in chosen), None)

    def report_cause(self, name: str) -> str:
        """The name a cause is reported under (its group's name, if it is in a group)."""
        key = next((t.key for t in self.causes if t.name == name), None)
        for group in self.cause_groups:
            if key in group.members:
                return group.name
        return name

    @property
    def reported_causes(self) -> tuple[str, ...]:
        """Reporting classes in precedence order of their first member."""
        out: list[str] = []
        for term in self.causes:
            name = self.report_cause(term.name)
            if name not in out:
                out.append(name)
        return tuple(out)

    def allowed_values(self, task: str, category: str) -> tuple[str, ...]:
        """Values a label of ``task``/``category`` may take; raises RubricError otherwise."""
        if task == "skill":
            if category not in self.category_names:
                raise RubricError(f"unknown skill category {category!r}; expected one of "
                                  f"{', '.join(self.category_names)}")
            return (PRESENT, ABSENT)
        if task == "uptake":
            if category == UPTAKE_CATEGORY:
                return self.uptake_names
            if category == PROPAGATION_CATEGORY:
                return self.propagation_values
            raise RubricError(f"uptake labels have category {UPTAKE_CATEGORY!r} or "
                              f"{PROPAGATION_CATEGORY!r}, not {category!r}")
        if task == "cause":
            if category != CAUSE_CATEGORY:
                raise RubricError(f"cause labels have category {CAUSE_CATEGORY!r}")
            return (*self.cause_names, self.no_failure)
        raise RubricError(f"unknown task {task!r}; expected skill, uptake or cause")

    def check_label(self, task: str, category: str, value: str) -> None:
        allowed = self.allowed_values(task, category)
        if value not in allowed:
            raise RubricError(f"{value!r} is not a value of {task}/{category}; expected one of "
                              f"{', '.join(allowed)}")


SUBJECT_TYPES = {"skill": "skill", "uptake": "attempt", "cause": "comparison"}


# -- loading -------------------------------------------------------------------------------
def _text(entry: dict[str, Any], field: str, where: str, *, required: bool = True) -> str:
    value = entry.get(field, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise RubricError(f"{where}: {field!r} must be a non-empty string")
    return value.strip()


def _terms(raw: Any, where: str, *, examples: bool) -> tuple[Term, ...]:
    if not isinstance(raw, list) or not raw:
        raise RubricError(f"{where}: expected a non-empty list of tables")
    terms: list[Term] = []
    for i, entry in enumerate(raw, 1):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise RubricError(f"{at}: expected a table")
        allowed = {"key", "name", "criterion"} | ({"positive", "negative"} if examples else set())
        unknown = set(entry) - allowed
        if unknown:
            raise RubricError(f"{at}: unknown fields {sorted(unknown)}")
        key = _text(entry, "key", at)
        if not _KEY.match(key):
            raise RubricError(f"{at}: key {key!r} must be snake_case (a-z, 0-9, _)")
        term = Term(
            key=key,
            name=_text(entry, "name", at),
            criterion=_text(entry, "criterion", at),
            positive=_text(entry, "positive", at) if examples else "",
            negative=_text(entry, "negative", at) if examples else "",
        )
        terms.append(term)
    for attr in ("key", "name"):
        seen: set[str] = set()
        for term in terms:
            value = getattr(term, attr)
            if value in seen:
                raise RubricError(f"{where}: duplicate {attr} {value!r}")
            seen.add(value)
    return tuple(terms)


def parse_rubric(text: str, where: str = "rubric") -> Rubric:
    """Validate TOML text into a :class:`Rubric`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{where}: not valid TOML: {exc}") from exc
    for section in ("categories", "uptake", "propagation", "causes"):
        if section not in data:
            raise RubricError(f"{where}: missing section [{section}]")
    categories = _terms(data["categories"], f"{where}: categories", examples=True)
    uptake_raw = data["uptake"]
    if not isinstance(uptake_raw, dict) or "ratings" not in uptake_raw:
        raise RubricError(f"{where}: [uptake] needs a 'ratings' list")
    uptake = _terms(uptake_raw["ratings"], f"{where}: uptake.ratings", examples=False)
    prop = data["propagation"]
    if not isinstance(prop, dict):
        raise RubricError(f"{where}: [propagation] must be a table")
    prop_term = Term(key="propagation", name=_text(prop, "name", f"{where}: propagation"),
                     criterion=_text(prop, "criterion", f"{where}: propagation"))
    values = prop.get("values", ["yes", "no"])
    if (not isinstance(values, list) or len(values) != 2
            or not all(isinstance(v, str) and v for v in values) or values[0] == values[1]):
        raise RubricError(f"{where}: propagation.values must be two distinct strings (yes, no)")
    causes_raw = data["causes"]
    if not isinstance(causes_raw, dict) or "classes" not in causes_raw:
        raise RubricError(f"{where}: [causes] needs a 'classes' list (in precedence order)")
    causes = _terms(causes_raw["classes"], f"{where}: causes.classes", examples=False)
    no_failure = _text(causes_raw, "no_failure", f"{where}: causes")
    if no_failure in {c.name for c in causes}:
        raise RubricError(f"{where}: causes.no_failure must differ from every class name")
    groups: list[CauseGroup] = []
    keys = {c.key for c in causes}
    grouped: set[str] = set()
    for i, g in enumerate(causes_raw.get("groups", []), 1):
        at = f"{where}: causes.groups[{i}]"
        if not isinstance(g, dict):
            raise RubricError(f"{at}: expected a table")
        members = g.get("members")
        if not isinstance(members, list) or len(members) < 2:
            raise RubricError(f"{at}: 'members' must list at least two cause keys")
        for m in members:
            if m not in keys:
                raise RubricError(f"{at}: unknown cause key {m!r}")
            if m in grouped:
                raise RubricError(f"{at}: cause {m!r} is already in another group")
            grouped.add(m)
        groups.append(CauseGroup(name=_text(g, "name", at), members=tuple(members)))
    return Rubric(
        name=str(data.get("name", "rubric")),
        categories=categories,
        uptake=uptake,
        propagation=prop_term,
        propagation_values=(values[0], values[1]),
        causes=causes,
        no_failure=no_failure,
        cause_groups=tuple(groups),
        source=text,
    )


def load_rubric(path: str | Path | None = None) -> Rubric:
    """Load and validate a rubric file (the default rubric when ``path`` is None)."""
    p = Path(path) if path else DEFAULT_RUBRIC_PATH
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricError(f"{p}: cannot read rubric: {exc.strerror or exc}") from exc
    return parse_rubric(text, str(p))


_default: Rubric | None = None


def default_rubric() -> Rubric:
    """The packaged default rubric (loaded once)."""
    global _default
    if _default is None:
        _default = load_rubric()
    return _default
