"""Input and output shapes of a problem without allocating its data.

The full workload is traced under PyTorch's fake-tensor mode (shapes and dtypes only, no
memory). Generators whose sizes depend on drawn values (ragged lengths, routing) cannot be
traced; then the shapes come from the smoke workload and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from problems.compare import leaves
from problems.spec import Problem


@dataclass(frozen=True)
class Arg:
    """One input or output: its name and a description (dtype and shape, or a value)."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None  # None for Python scalars
    value: str = ""

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.name}: {self.dtype} = {self.value}"
        return f"{self.name}: {self.dtype}[{', '.join(str(s) for s in self.shape)}]"

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "dtype": self.dtype}
        data["shape"] = list(self.shape) if self.shape is not None else None
        if self.value:
            data["value"] = self.value
        return data


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs of a problem at one scale."""

    scale: str
    inputs: list[Arg]
    outputs: list[Arg]
    note: str = ""


def _arg(name: str, x: Any) -> Arg:
    if isinstance(x, torch.Tensor):
        return Arg(name, str(x.dtype).removeprefix("torch."), tuple(int(s) for s in x.shape))
    return Arg(name, type(x).__name__, None, repr(x))


def _signature(problem: Problem, scale: str) -> tuple[list[Arg], list[Arg]]:
    inputs = problem.make_inputs(0, "cpu", scale)
    out = problem.reference(*inputs)
    outs = leaves(out)
    names = (
        list(problem.outputs)
        if len(outs) == len(problem.outputs)
        else [f"output[{i}]" for i in range(len(outs))]
    )
    return (
        [_arg(n, x) for n, x in zip(problem.inputs, inputs)],
        [_arg(n, x) for n, x in zip(names, outs)],
    )


def signature(problem: Problem) -> Signature:
    """Full-workload shapes if they can be traced without data, else smoke-scale shapes."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            ins, outs = _signature(problem, "full")
        return Signature("full", ins, outs)
    except Exception as exc:  # noqa: BLE001 - data-dependent generators cannot be traced
        reason = f"{type(exc).__name__}"
    ins, outs = _signature(problem, "smoke")
    note = (
        f"shapes at the smoke workload: the full workload's generator cannot be traced "
        f"without data ({reason}); see WORKLOAD for the full sizes"
    )
    return Signature("smoke", ins, outs, note)
