"""Calibration through the real scheduler (benchmarks/noise_calibration_engine.py): a tiny
experiment run by the engine with the simulated agent and the simulated grader (the stand-in for
a GPU grader: no GPU here) into a real SQLite store, read by the real paired analysis. The
stand-in's per-host speed, noise, outliers and scattered placement are checked first."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path

import pytest

from benchmarks.noise_calibration_engine import (
    Scenario,
    clopper_pearson,
    run_experiment,
    summarize,
)
from engine.grading.api import GradeRequest
from engine.standins.simulated import SimulatedBackend

SOURCE = "# f\n# sim: runtime_ms=1.0\n"


def _grade_all(backend: SimulatedBackend, slots: list[str], dsl: str = "cute") -> list:
    async def run() -> list:
        return [
            await backend.grade(GradeRequest("p01", dsl, SOURCE, request_id=f"r{i}", slot=slot))
            for i, slot in enumerate(slots)
        ]

    return asyncio.run(run())


def test_the_stand_in_has_per_host_speed_noise_and_placement() -> None:
    backend = SimulatedBackend(
        slots=2, hosts=("hA", "hB"), host_speed={"hB": 1.1}, host_noise={"hB": 0.0},
        noise_cv={"default": 0.05}, dsl_cv={"tirx": 0.0},
    )  # fmt: skip
    on_b = _grade_all(backend, ["hB:sim1"] * 20)  # a named slot is honoured
    assert {f.host for f in on_b} == {"hB:sim1"}
    assert all(f.impl_median_ms == 1.1 for f in on_b)  # 10 % slower, no noise there
    on_a = _grade_all(backend, ["hA:sim0"] * 40)
    sd = statistics.stdev(math.log(f.impl_median_ms) for f in on_a)
    assert 0.03 < sd < 0.07  # CV 5 % on host A
    assert {f.impl_median_ms for f in _grade_all(backend, ["hA:sim0"] * 3, "tirx")} == {1.0}
    spread = SimulatedBackend(slots=2, hosts=("hA", "hB"), scatter=True)
    hosts = [f.host for f in _grade_all(spread, ["hA:sim0"] * 20)]
    assert 5 <= hosts.count("hB:sim1") <= 15  # the named slot ignored
    assert hosts == [f.host for f in _grade_all(spread, [""] * 20)]  # drawn from the request
    outliers = SimulatedBackend(slots=1, outlier_rate=0.5, outlier_factor=2.0)
    assert {f.impl_median_ms for f in _grade_all(outliers, [""] * 30)} == {1.0, 2.0}


def test_a_tiny_experiment_through_the_engine(tmp_path: Path) -> None:
    """Null comparisons at CV 3 % on one host, k = 3 (deterministic: the noise is keyed by
    request): none called beyond noise; a 2× help called help in every comparison. Adaptive on
    two hosts 10 % apart (its stops depend on which bands exist yet, so only the clear effect
    is asserted): the 2× help called help, the jobs cheaper than 5 pairs each. Spread over two
    hosts: no null called, a cross_host comparison never called."""
    truth = {"p01": 1.0, "p02": 1.0, "p03": 2.0}
    fixed = run_experiment(Scenario("one", 0.03), "fixed_k3", truth, 2, 1, tmp_path / "k3.sqlite")
    calls = set(fixed["calls"])
    assert {s for _, _, s in calls} == {"paired"}
    assert {c for c, rho, _ in calls if rho == 1.0} == {"within"}
    assert {c for c, rho, _ in calls if rho == 2.0} == {"help"}
    assert summarize([fixed])["gradings_per_comparison"] == 6
    two = Scenario("two hosts", 0.03, ("host0", "host1"), {"host1": 1.10})
    adaptive = run_experiment(two, "adaptive_max5", truth, 2, 1, tmp_path / "ad.sqlite")
    assert {c for c, rho, _ in adaptive["calls"] if rho == 2.0} == {"help"}
    assert adaptive["gradings"] < 10 * len(adaptive["calls"])
    rr = Scenario("spread", 0.03, ("host0", "host1"), scatter=True)
    crossed = run_experiment(rr, "fixed_k3", truth, 1, 1, tmp_path / "rr.sqlite")
    # each repeat on either host: a pair split over the two is left out, a comparison with
    # none on one slot is cross_host, and neither the nulls nor a cross_host one is called
    assert {s for _, _, s in crossed["calls"]} <= {"paired", "cross_host"}
    assert all(c not in ("help", "harm") for c, _, s in crossed["calls"] if s == "cross_host")
    assert all(c not in ("help", "harm") for c, rho, _ in crossed["calls"] if rho == 1.0)


def test_the_summary_pools_the_fdr_with_an_exact_interval_and_gives_standard_errors() -> None:
    """Where calls are rare the mean of per-experiment FDPs is one experiment's luck (one false
    call out of one reads 100 %); the pooled share of wrong calls, with its Clopper–Pearson
    interval, says how little is known. Standard errors come from the spread across
    experiments."""
    null_call = ("help", 1.0, "paired")
    quiet = [("within", 1.0, "paired")] * 3 + [("within", 1.3, "paired")]
    lone = {"calls": [null_call, *quiet[1:]], "gradings": 24, "null_ps": [0.004, 0.3]}
    right = {"calls": [*quiet[:3], ("help", 1.3, "paired")], "gradings": 40, "null_ps": [0.02]}
    none = {"calls": quiet, "gradings": 40}
    s = summarize([lone, right, none, none])
    assert s["fdr"] == pytest.approx(0.25)  # (1 + 0 + 0 + 0) / 4
    assert s["fdr_se"] == pytest.approx(0.25)  # SD 0.5 over 4 experiments
    assert (s["calls"], s["wrong_calls"], s["pooled_fdr"]) == (2, 1, 0.5)
    low, high = s["pooled_fdr_ci95"]
    assert low == pytest.approx(0.01258, abs=1e-4) and high == pytest.approx(0.98742, abs=1e-4)
    assert s["false_call_rate"] == pytest.approx(1 / 12)
    assert s["gradings_per_comparison"] == pytest.approx(144 / 16)
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(0.30850, abs=1e-4))
    assert clopper_pearson(0, 0) is None
    assert s["null_p_below"] == pytest.approx({"0.01": 1 / 3, "0.025": 2 / 3, "0.05": 2 / 3})
