"""SOL estimates: the slower of the compute bound and the memory bound."""

from __future__ import annotations

import pytest

from problems.sol import H200, Hardware, sol_estimate
from problems.spec import Cost


def test_compute_bound_sums_math_types():
    hw = Hardware("toy", {"bf16": 100.0, "fp32": 10.0}, bandwidth=1000.0)
    est = sol_estimate(Cost(flops={"bf16": 200.0, "fp32": 30.0}, bytes=500.0), hw)
    assert est.compute_s == pytest.approx(2.0 + 3.0)
    assert est.memory_s == pytest.approx(0.5)
    assert est.seconds == pytest.approx(5.0) and est.bound == "compute"


def test_memory_bound_on_h200():
    cost = Cost(flops={"fp32": 1e6}, bytes=H200.bandwidth * 1e-3)
    est = sol_estimate(cost)
    assert est.bound == "memory"
    assert est.seconds == pytest.approx(1e-3)
    assert est.as_dict()["sol_us"] == pytest.approx(1000.0)


def test_every_math_type_has_a_peak():
    from problems.spec import MATH_TYPES

    assert set(MATH_TYPES) <= set(H200.peaks)
    assert H200.peaks["fp8"] > H200.peaks["bf16"] > H200.peaks["fp32"]


def test_device_names_map_to_the_documented_table() -> None:
    from problems.sol import B200, H100, hardware_for

    assert hardware_for("NVIDIA H200") is H200
    assert hardware_for("NVIDIA H100 80GB HBM3") is H100
    assert hardware_for("NVIDIA B200") is B200
    assert hardware_for("NVIDIA GeForce RTX 4090") is None
    assert hardware_for("cpu (preview)") is None
