"""`mkb problems list/show/check` through app.cli.main."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from problems.check import select


def _catalog_ids():
    return sorted(p.id for p in select().problems)


def test_list_json_has_catalog_fields(capsys):
    assert main(["problems", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["id"] for r in rows) == _catalog_ids()
    p28 = next(r for r in rows if r["id"] == "p28")
    assert p28["family"] == "MLP & Norm" and p28["origin"] == "flashinfer"
    assert p28["slug"].startswith("fused_add_rmsnorm")
    assert all({"id", "slug", "family", "source", "license", "origin"} <= set(r) for r in rows)


def test_list_family_filter_and_table(capsys):
    assert main(["problems", "list", "--family", "mlp_norm"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("p")]
    assert lines and all("MLP & Norm" in line for line in lines)
    assert any(line.startswith("p28 ") for line in lines)
    assert main(["problems", "list", "--family", "vision"]) == 2


def test_show_full_workload_shapes_cost_and_sol(capsys):
    assert main(["problems", "show", "28"]) == 0
    out = capsys.readouterr().out
    assert "fused_add_rmsnorm" in out and "Apache-2.0" in out
    assert "hidden_states: bfloat16[14509, 4096]" in out  # the full workload, not smoke
    assert "output: bfloat16[14509, 4096]" in out
    assert "SOL on NVIDIA H200" in out and "memory-bound" in out


def test_show_json_matches_sol_formula(capsys):
    from problems.registry import load_problem
    from problems.sol import H200

    assert main(["problems", "show", "p28", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    problem = load_problem(next(p for p in select(["p28"]).problems).path)
    cost = problem.cost("full")
    expected = max(
        sum(v / H200.peaks[k] for k, v in cost.flops.items()), cost.bytes / H200.bandwidth
    )
    assert data["sol"]["sol_us"] == expected * 1e6
    assert data["shapes_scale"] == "full"
    assert [i["name"] for i in data["inputs"]] == list(problem.inputs)


def test_show_unknown_problem_is_usage_error(capsys):
    assert main(["problems", "show", "p99"]) == 2
    assert "unknown problem" in capsys.readouterr().err


@pytest.mark.slow
def test_check_passes_p28_and_fails_broken_file(write_problem, capsys):
    assert main(["problems", "check", "p28"]) == 0
    assert "PASS" in capsys.readouterr().out
    broken = write_problem(
        {
            "    dt = compute_dtype(x, weight)\n    s = x.to(dt)\n": (
                "    dt = compute_dtype(x, weight)\n    s = x.to(dt) + residual.to(dt)\n"
            )
        }
    )
    assert main(["problems", "check", str(broken), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)[0]
    assert not report["passed"]
    assert [c["name"] for c in report["checks"] if not c["passed"]] == ["mutants"]


def test_check_usage_errors(capsys):
    assert main(["problems", "check", "p28", "--draws", "1"]) == 2
    assert main(["problems", "check", "no_such_slug"]) == 2


def test_show_prints_measured_eager_time_when_recorded(capsys) -> None:  # type: ignore[no-untyped-def]
    from app.cli import main
    from problems.measured import measured

    assert main(["problems", "show", "p28"]) == 0
    out = capsys.readouterr().out
    row = measured("p28")
    assert row is not None and row["eager_median_ms"] > 0
    assert f"eager median {row['eager_median_ms']:.3f} ms" in out
    assert measured("p99") is None
