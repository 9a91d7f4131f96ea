"""What a judge started ahead of its job takes off the job's clock (the CUDA context and a
reference runner), made by the warm parent's child before the job comes."""

from __future__ import annotations

from dataclasses import dataclass

from engine.grading.judge.runner_proc import RunnerProcess


@dataclass
class Prepared:
    """What a judge started ahead of its job takes off the job's clock: the CUDA context
    and a reference runner (forked first, CUDA ready, not yet given a problem)."""

    device: str
    reference: RunnerProcess


def prepare(device: str) -> Prepared:
    """Fork the reference runner (before this process touches CUDA), then warm CUDA here."""
    import torch

    reference = RunnerProcess.fork_reference(device, None)
    if device == "cuda":
        square = torch.ones(64, 64, dtype=torch.float64, device="cuda")
        float((square @ square).sum())  # context and the BLAS handle the anchors use
    reference.wait_ready()
    return Prepared(device, reference)
