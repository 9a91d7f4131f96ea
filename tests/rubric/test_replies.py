"""Reply validation for the three annotation tasks."""

from __future__ import annotations

import json

import pytest

from engine.rubric.model import load_rubric
from engine.rubric.prompts import (
    ReplyError,
    UptakeMaterial,
    extract_json,
    parse_cause,
    parse_skill,
    parse_uptake,
    skill_messages,
    uptake_messages,
)

RUBRIC = load_rubric()
SKILL = "Rows are 4096 wide. One block per row with 128 threads; it ran 5.7x faster than eager."


def skill_reply(**present: str) -> str:
    return json.dumps({"labels": {
        t.key: {"present": t.key in present, "evidence": present.get(t.key, "")}
        for t in RUBRIC.categories}})


def test_skill_reply_becomes_one_label_per_category() -> None:
    labels = parse_skill(RUBRIC, skill_reply(workload_facts="Rows are 4096 wide",
                                             measured_evidence="it ran 5.7x ... than eager"),
                         SKILL)
    by_name = {label.category: label for label in labels}
    assert list(by_name) == list(RUBRIC.category_names)
    assert by_name["workload facts"].value == "present"
    assert by_name["measured evidence"].evidence == "it ran 5.7x ... than eager"
    assert by_name["agenda handoff"].value == "absent"


@pytest.mark.parametrize(("reply", "message"), [
    ("I'm sorry, I cannot help with that.", "not a JSON object"),
    ('{"labels": {', "not valid JSON"),
    ('{"labels": []}', "must be an object"),
    ('{"labels": {"workload_facts": {"present": true, "evidence": "Rows"}}}', "lacks categories"),
    (skill_reply(workload_facts="Columns are 8192 wide"), "not a verbatim quote"),
    (skill_reply(workload_facts=""), "no evidence quote"),
])
def test_bad_skill_replies_are_rejected(reply: str, message: str) -> None:
    with pytest.raises(ReplyError, match=message):
        parse_skill(RUBRIC, reply, SKILL)


def test_a_fenced_reply_is_accepted() -> None:
    assert extract_json('```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ReplyError):
        extract_json('Here you go: {"a": 1}')


def test_uptake_reply_and_the_no_own_skill_rule() -> None:
    reply = json.dumps({"uptake": "contradicted", "uptake_evidence": "It tested the claim.",
                        "propagation": True, "propagation_evidence": "repeated"})
    with_skill = parse_uptake(RUBRIC, reply, has_own_skill=True)
    assert [(x.category, x.value) for x in with_skill] == [("uptake", "contradicted"),
                                                          ("propagation", "yes")]
    without = parse_uptake(RUBRIC, reply, has_own_skill=False)
    assert without[1].value == "no"
    with pytest.raises(ReplyError, match="'uptake' must be one of"):
        parse_uptake(RUBRIC, reply.replace("contradicted", "mostly"), has_own_skill=True)
    with pytest.raises(ReplyError, match="true or false"):
        parse_uptake(RUBRIC, reply.replace("true", '"yes"'), has_own_skill=True)


def test_cause_reply_applies_precedence() -> None:
    reply = json.dumps({"target_side_failure": True, "applicable": [
        {"cause": "search_truncation", "evidence": "kept the design"},
        {"cause": "tolerance_edge_loss", "evidence": "draw 4 at 1.1x the allowance"},
        {"cause": "faulty_execution", "evidence": "masking bug"}]})
    [label] = parse_cause(RUBRIC, reply)
    assert label.value == "faulty execution"
    assert label.evidence.startswith("masking bug")
    assert "tolerance-edge loss" in label.evidence and "search truncation" in label.evidence


def test_cause_reply_without_target_side_failure() -> None:
    [label] = parse_cause(RUBRIC, '{"target_side_failure": false, "applicable": []}')
    assert label.value == RUBRIC.no_failure
    with pytest.raises(ReplyError, match="must be empty"):
        parse_cause(RUBRIC, json.dumps({"target_side_failure": False, "applicable": [
            {"cause": "rule_violation", "evidence": "x"}]}))
    with pytest.raises(ReplyError, match="at least one"):
        parse_cause(RUBRIC, '{"target_side_failure": true, "applicable": []}')
    with pytest.raises(ReplyError, match="cause must be one of"):
        parse_cause(RUBRIC, json.dumps({"target_side_failure": True, "applicable": [
            {"cause": "bad luck", "evidence": "x"}]}))


def test_prompts_carry_the_rubric_and_the_material() -> None:
    [_, user] = skill_messages(RUBRIC, SKILL)
    for term in RUBRIC.categories:
        assert term.key in user["content"] and term.criterion in user["content"]
    assert SKILL in user["content"]
    material = UptakeMaterial("SRC-SKILL", "x" * 50_000, "def solve(): ...", "")
    [_, user] = uptake_messages(RUBRIC, material)
    assert "SRC-SKILL" in user["content"] and "characters omitted" in user["content"]
    assert "(the attempt left no skill)" in user["content"]
