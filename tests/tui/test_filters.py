"""The Attempts filter language: column tokens (quoted values allowed) and free text."""

from __future__ import annotations

from screens.filters import parse_filter
from storage.queries import Contains


def test_columns_and_free_text() -> None:
    filters, search = parse_filter("state:running problem:p28 fused m:gpt")
    assert filters == {"state": "running", "problem_id": ("p28",), "model": Contains("gpt")}
    assert search == "fused"
    assert parse_filter("") == ({}, None)
    assert parse_filter("weird:x") == ({}, "weird:x")


def test_quoted_values_keep_their_spaces() -> None:
    assert parse_filter('family:"MLP & Norm"') == ({"family": "MLP & Norm"}, None)
    assert parse_filter("family:'kv cache' x") == ({"family": "KV Cache"}, "x")
    assert parse_filter('family:"MLP & No') == ({"family": Contains("MLP & No")}, None)
    assert parse_filter('"two words" dsl:cute') == ({"dsl": "cute"}, "two words")
    assert parse_filter("model:") == ({}, None)  # still being typed


def test_problems_by_number_id_slug_or_part_of_a_slug() -> None:
    for text in ("problem:28", "problem:p28", "p:fused_add_rmsnorm_h4096_llama31_8b_bf16"):
        assert parse_filter(text)[0] == {"problem_id": ("p28",)}
    part = parse_filter("problem:gqa_paged_decode")[0]["problem_id"]
    assert isinstance(part, tuple) and "p01" in part and "p28" not in part
    assert parse_filter("problem:p99x")[0] == {"problem_id": ("p99x",)}  # matches nothing
