"""The judge refuses, before timing anything, a solution whose ARCHS leave out its GPU."""

from __future__ import annotations

import pytest

from engine.grading.judge.judge import check_target
from engine.grading.verdict import Rejected, decide

HOPPER_ONLY = 'ARCHS = ("sm_90a",)\n\ndef solve(x):\n    return x\n'


def test_a_hopper_only_solution_on_a_b200_is_rejected_naming_the_arch() -> None:
    with pytest.raises(Rejected) as caught:
        check_target("NVIDIA B200", HOPPER_ONLY)
    verdict, reason, message = decide(caught.value)
    assert (verdict, reason) == ("fail", "target.undeclared_arch")
    assert "sm_100a" in message and "nothing was timed" in message


def test_the_declared_gpu_and_undeclared_files_pass() -> None:
    check_target("NVIDIA H200", HOPPER_ONLY)
    check_target("NVIDIA B200", "def solve(x):\n    return x\n")  # an agent's file: no ARCHS
    check_target("some unknown GPU", HOPPER_ONLY)  # not a target we know: nothing to check
