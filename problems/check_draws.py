"""One draw of a problem (inputs, eager reference ``v``, float64 anchor ``z``) and the
helpers the checks use to look into outputs and compare tensors bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from problems import mutants
from problems.check_report import CheckOptions
from problems.compare import (
    bit_pattern,
    clone_inputs,
    is_discrete,
    leaves,
    promoted_copies,
    reference_numerics,
)
from problems.spec import Problem


@dataclass
class Draw:
    """One seed's inputs and the outputs of the eager reference (v) and the anchor (z)."""

    seed: int
    inputs: list[Any]
    v: Any
    z: Any
    v_inputs: list[Any]  # the (cloned) inputs the eager reference ran on, after the call


def run_draw(problem: Problem, seed: int, opts: CheckOptions) -> Draw:
    """Make the inputs of ``seed`` and run the reference on copies, eagerly and in float64."""
    inputs = problem.make_inputs(seed, opts.device, opts.scale)
    v_inputs = clone_inputs(inputs)
    with reference_numerics():
        v = problem.reference(*v_inputs)
        z = problem.reference(*promoted_copies(inputs))
    return Draw(seed, inputs, v, z, v_inputs)


def leaf_names(problem: Problem, v: Any) -> list[str]:
    """The OUTPUTS names of the leaves of ``v`` (positional names if they do not match)."""
    items = leaves(v)
    if len(items) == len(problem.outputs):
        return list(problem.outputs)
    return [f"output[{i}]" for i in range(len(items))]


def float_indices(v: Any) -> list[int]:
    return [i for i, x in enumerate(leaves(v)) if mutants.is_float_leaf(x)]


def discrete_indices(v: Any) -> list[int]:
    return [
        i for i, x in enumerate(leaves(v)) if isinstance(x, torch.Tensor) and is_discrete(x.dtype)
    ]


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def tensor_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(torch.equal(bit_pattern(a), bit_pattern(b)))
    return bool(torch.equal(a, b))


def inputs_equal(a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.device != y.device or not tensor_equal(x, y):
                return False
        elif isinstance(x, (list, tuple)):
            if not inputs_equal(list(x), list(y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
