"""Grading targets (problems/targets.py): resolution against a host report, the B200 row
against NVIDIA's published figures, and the solutions' ``ARCHS`` declarations."""

from __future__ import annotations

import pytest

from problems.sol import B200, hardware_for
from problems.targets import (
    TARGETS,
    TargetMismatchError,
    declared_archs,
    resolve,
    target,
    target_for_device,
    undeclared_target,
)


def test_each_target_has_its_arch_and_sol_row() -> None:
    assert {k: (t.arch, t.hardware.name) for k, t in TARGETS.items()} == {
        "b200": ("sm_100a", "NVIDIA B200"),
        "h200": ("sm_90a", "NVIDIA H200"),
        "h100": ("sm_90a", "NVIDIA H100"),
    }
    for t in TARGETS.values():
        assert hardware_for(t.name) is t.hardware


def test_the_b200_row_is_nvidias_hgx_b200_figures() -> None:
    """NVIDIA's HGX B200 per-GPU figures (GB200 NVL72 / HGX B200 specification table): FP8
    9 PFLOPS and FP16/BF16 4.5 PFLOPS with sparsity (dense: half), FP32 75 TFLOPS, 180 GB
    HBM3E at 7.7 TB/s."""
    assert B200.peaks["fp8"] == 9e15 / 2 and B200.peaks["bf16"] == B200.peaks["fp16"] == 4.5e15 / 2
    assert B200.peaks["fp32"] == 75e12 and B200.bandwidth == 7.7e12
    assert TARGETS["b200"].memory_bytes == 180e9


@pytest.mark.parametrize(
    ("setting", "hosts", "expected"),
    [
        ("auto", ["NVIDIA B200", "NVIDIA B200"], "b200"),
        ("auto", ["NVIDIA H100 80GB HBM3"], "h100"),
        ("auto", [], "h200"),  # no GPU (CPU preview): the default
        ("b200", [], "b200"),  # a preview host accepts any target
        ("h200", ["NVIDIA H200"], "h200"),
    ],
)
def test_resolve(setting: str, hosts: list[str], expected: str) -> None:
    assert resolve(setting, hosts).key == expected


@pytest.mark.parametrize(
    ("setting", "hosts", "message"),
    [
        (
            "b200",
            ["NVIDIA H200"],
            'gpu = "b200" (NVIDIA B200 (Blackwell, sm_100a)), but the '
            "grading host reports NVIDIA H200",
        ),
        ("auto", ["NVIDIA A100-SXM4-80GB"], "none of the grading targets"),
        ("auto", ["NVIDIA H200", "NVIDIA B200"], "reports different GPUs"),
        ("x", [], "use one of b200, h200, h100, auto"),
    ],
)
def test_resolve_refuses(setting: str, hosts: list[str], message: str) -> None:
    with pytest.raises(TargetMismatchError) as err:
        resolve(setting, hosts)
    assert message in str(err.value)


def test_lookup_errors_name_the_choices() -> None:
    with pytest.raises(KeyError, match="use one of b200, h200, h100"):
        target("a100")
    assert target_for_device("NVIDIA GeForce RTX 4090") is None


SOURCE = 'import torch\n\nARCHS = ("sm_90a",)  # WGMMA\n\ndef solve(x):\n    return x\n'


def test_declared_archs_and_the_graders_check() -> None:
    assert declared_archs(SOURCE) == ("sm_90a",)
    assert declared_archs("def solve(x):\n    return x\n") is None
    assert undeclared_target(SOURCE, TARGETS["h200"]) is None
    why = undeclared_target(SOURCE, TARGETS["b200"])
    assert why is not None and "declares ARCHS = ('sm_90a',), not sm_100a" in why
    assert "NVIDIA B200" in why and "nothing was timed" in why
    assert undeclared_target("def solve(x):\n    return x\n", TARGETS["b200"]) is None


@pytest.mark.parametrize(
    "bad", ['ARCHS = ("sm_80",)\n', "ARCHS = archs()\n", "ARCHS = ()\n", 'ARCHS = "sm_90a"\n']
)
def test_bad_declarations_are_reported(bad: str) -> None:
    with pytest.raises(ValueError, match="ARCHS"):
        declared_archs(bad)
    why = undeclared_target(bad, TARGETS["h200"])
    assert why is not None and why.startswith("the solution's ARCHS cannot be read")
