"""The default rubric's content and validation of user rubric files."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.rubric.model import DEFAULT_RUBRIC_PATH, RubricError, load_rubric, parse_rubric

DEFAULT_TEXT = DEFAULT_RUBRIC_PATH.read_text()


def test_default_rubric_has_the_design_vocabulary() -> None:
    rubric = load_rubric()
    assert rubric.category_names == (
        "workload facts", "verified reformulation", "measured evidence", "work partitioning",
        "bounded failure diagnosis", "verification recipe", "applicability conditions",
        "unsupported closure", "agenda handoff", "ambition capping", "source-DSL detail")
    assert all(t.positive and t.negative and t.positive != t.negative
               for t in rubric.categories)
    assert rubric.uptake_names == ("followed fully", "followed partially", "ignored",
                                   "contradicted", "not applicable")
    assert rubric.cause_names[0] == "rule violation"
    assert rubric.cause_names[-1] == "search truncation"
    assert rubric.report_cause("tolerance-edge loss") == "rule and precision failure"
    assert rubric.report_cause("rule violation") == "rule and precision failure"
    assert rubric.report_cause("faulty execution") == "faulty execution"
    assert len(rubric.reported_causes) == 6


def test_precedence_picks_the_earliest_applicable_cause() -> None:
    rubric = load_rubric()
    assert rubric.primary_cause({"search truncation", "unverified adoption"}) == \
        "unverified adoption"
    assert rubric.primary_cause(["tolerance-edge loss", "rule violation"]) == "rule violation"
    assert rubric.primary_cause([]) is None


def test_hash_tracks_content() -> None:
    base = parse_rubric(DEFAULT_TEXT)
    same = parse_rubric("# a comment\n" + DEFAULT_TEXT)
    changed = parse_rubric(DEFAULT_TEXT.replace("Cites a measured number", "Cites a number"))
    assert base.hash == same.hash != changed.hash


def test_check_label_rejects_values_outside_the_rubric() -> None:
    rubric = load_rubric()
    rubric.check_label("skill", "agenda handoff", "present")
    rubric.check_label("uptake", "propagation", "no")
    rubric.check_label("cause", "cause", rubric.no_failure)
    with pytest.raises(RubricError, match="unknown skill category"):
        rubric.check_label("skill", "vibes", "present")
    with pytest.raises(RubricError, match="not a value"):
        rubric.check_label("uptake", "uptake", "mostly")
    with pytest.raises(RubricError, match="unknown task"):
        rubric.check_label("mood", "x", "y")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("[propagation]", "[propagationx]"), "missing section \\[propagation\\]"),
    (lambda t: t.replace('key = "agenda_handoff"', 'key = "Agenda Handoff"'), "snake_case"),
    (lambda t: t.replace('name = "agenda handoff"', 'name = "workload facts"'),
     "duplicate name 'workload facts'"),
    (lambda t: t.replace('members = ["rule_violation", "tolerance_edge_loss"]',
                         'members = ["rule_violation", "nope"]'), "unknown cause key 'nope'"),
    (lambda t: t.replace('positive = "The hidden size',
                         'colour = "x"\npositive = "The hidden size'),
     "unknown fields \\['colour'\\]"),
    (lambda t: t + "\n[[[broken", "not valid TOML"),
])
def test_malformed_rubrics_get_clear_errors(edit, message, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mine.toml"
    path.write_text(edit(DEFAULT_TEXT))
    with pytest.raises(RubricError, match=message) as info:
        load_rubric(path)
    assert str(path) in str(info.value)


def test_missing_rubric_file(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match="cannot read rubric"):
        load_rubric(tmp_path / "absent.toml")


def test_a_smaller_custom_rubric_loads(tmp_path: Path) -> None:
    text = """
[[categories]]
key = "facts"
name = "facts"
criterion = "States facts."
positive = "N is 4096."
negative = "It is fast."

[uptake]
ratings = [{ key = "used", name = "used", criterion = "Used it." },
           { key = "unused", name = "unused", criterion = "Did not." }]

[propagation]
name = "propagation"
criterion = "Claims reappear."

[causes]
no_failure = "none"
classes = [{ key = "bug", name = "bug", criterion = "A bug." }]
"""
    path = tmp_path / "small.toml"
    path.write_text(text)
    rubric = load_rubric(path)
    assert rubric.category_names == ("facts",)
    assert rubric.propagation_values == ("yes", "no")
    assert rubric.reported_causes == ("bug",)
