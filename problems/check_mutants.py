"""The ``mutants`` check: wrong implementations that must fail and right ones that must pass.

:class:`MutantTally` runs every mutant of :mod:`problems.mutants` on each draw through the
grading comparison (:func:`problems.compare.check_outputs`) and remembers the verdicts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from problems import mutants
from problems.check_draws import Draw, float_indices, leaf_names
from problems.check_report import CheckResult, describe_error
from problems.compare import check_outputs, clone_inputs, leaves, reference_numerics
from problems.spec import Problem


def _finer_than_bf16(dtype: torch.dtype) -> bool:
    return torch.finfo(dtype).eps < torch.finfo(torch.bfloat16).eps


class MutantTally:
    """Runs the mutants draw by draw and remembers which were rejected or accepted."""

    def __init__(self, problem: Problem, exact: set[str]) -> None:
        self.problem = problem
        self.exact = exact
        self.problems_found: list[str] = []
        self.not_applicable: set[str] = set()
        self.rejected: set[str] = set()
        self.accepted: set[str] = set()

    @staticmethod
    def _verdict(v: Any, z: Any, u: Any) -> tuple[bool, str]:
        try:
            ok, structure, results = check_outputs(u, v, z)
        except ValueError as exc:  # the eager reference overflowed: a generator bug
            return False, str(exc)
        if structure:
            return False, structure
        return ok, next((r.detail for r in results if not r.passed), "")

    def _must_fail(self, label: str, d: Draw, make: Callable[[], Any], discrete_only: bool) -> None:
        try:
            u = make()
        except Exception as exc:  # noqa: BLE001 - a crashing mutant is a broken problem
            self.problems_found.append(f"{label} raised {describe_error(exc)}")
            return
        if u is None or (discrete_only and mutants.outputs_equal(u, d.v)):
            self.not_applicable.add(label)
            return
        ok, _ = self._verdict(d.v, d.z, u)
        if ok:
            self.problems_found.append(f"{label} passed but must fail")
        else:
            self.rejected.add(label)

    def _must_pass(self, label: str, d: Draw, make: Callable[[], Any]) -> None:
        try:
            u = make()
        except Exception as exc:  # noqa: BLE001
            self.problems_found.append(f"{label} raised {describe_error(exc)}")
            return
        ok, reason = self._verdict(d.v, d.z, u)
        if ok:
            self.accepted.add(label)
        else:
            self.problems_found.append(f"{label} must pass: {reason}")

    def add(self, d: Draw, other_v: Any | None) -> None:
        """Run every mutant on draw ``d``; ``other_v`` is the reference output of another seed."""
        problem, inputs = self.problem, d.inputs
        float_idx = float_indices(d.v)
        names = leaf_names(problem, d.v)
        discrete_only = not float_idx
        self._must_pass("reference", d, lambda: d.v)
        self._must_pass("rounded_anchor", d, lambda: mutants.rounded_anchor(d.z, d.v))
        reordered = problem.reordered
        if reordered is not None:

            def run_reordered() -> Any:
                with reference_numerics():
                    return reordered(*clone_inputs(inputs))

            self._must_pass("reordered", d, run_reordered)
        for i in float_idx:
            self._must_fail(
                f"zeros[{names[i]}]", d, functools.partial(mutants.zeroed, d.v, i), discrete_only
            )
        self._must_fail("echoed_input", d, lambda: mutants.echoed_input(d.v, inputs), discrete_only)

        def run_dropped() -> Any:
            with reference_numerics():
                return problem.dropped_term(*clone_inputs(inputs))

        self._must_fail("dropped_term", d, run_dropped, discrete_only)
        leaf_values = leaves(d.v)
        bf16_applicable = any(
            names[i] not in self.exact and _finer_than_bf16(leaf_values[i].dtype) for i in float_idx
        )
        if bf16_applicable or discrete_only:
            self._must_fail(
                "bf16_accumulation",
                d,
                lambda: mutants.bf16_accumulation(problem.reference, inputs, d.v),
                discrete_only,
            )
        else:
            self.not_applicable.add("bf16_accumulation")
        if other_v is not None:
            self._must_fail("other_seed", d, lambda: other_v, discrete_only)

    def result(self) -> CheckResult:
        name = "mutants"
        if self.problems_found:
            unique = list(dict.fromkeys(self.problems_found))
            return CheckResult(name, False, "; ".join(unique[:4]))
        detail = (
            f"rejected: {', '.join(sorted(self.rejected))}; "
            f"accepted: {', '.join(sorted(self.accepted))}"
        )
        not_applicable = self.not_applicable - self.rejected
        if not_applicable:
            detail += f"; not applicable: {', '.join(sorted(not_applicable))}"
        return CheckResult(name, True, detail)
