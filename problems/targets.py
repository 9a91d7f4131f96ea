"""Grading targets: the GPUs an experiment can be graded on, and what each one implies.

``[grading] gpu = "b200" | "h200" | "h100" | "auto"`` names one of :data:`TARGETS`. A target
decides the architecture kernels are compiled for (``sm_100a`` on the B200, ``sm_90a`` on
the Hopper GPUs), the hardware row of :mod:`problems.sol` (speed of light) and the memory a
workload may use. ``auto`` is what the grading host reports (:func:`resolve`); a setting the
grading host contradicts is refused (:class:`TargetMismatchError`).

Reference solutions declare the architectures they support with a module-level
``ARCHS = ("sm_90a", "sm_100a")``; :func:`undeclared_target` is the check a grader runs
before timing anything (a file without ``ARCHS`` declares nothing and always passes).

Plain data: imports nothing of ours beyond :mod:`problems.sol`.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from problems.sol import B200, H100, H200, Hardware

GPU_SETTINGS = ("b200", "h200", "h100", "auto")
#: what ``auto`` resolves to when the grading host reports no GPU (CPU preview, simulated)
DEFAULT_GPU = "h200"


@dataclass(frozen=True)
class Target:
    """One grading GPU: its setting key, CUDA architecture, SOL row and memory."""

    key: str
    arch: str
    hardware: Hardware
    memory_bytes: float  # HBM capacity as NVIDIA publishes it (decimal GB)
    generation: str
    #: tensor-core features only this generation has (named in compile errors)
    features: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.hardware.name

    def describe(self) -> str:
        """e.g. ``NVIDIA B200 (Blackwell, sm_100a)``."""
        return f"{self.name} ({self.generation}, {self.arch})"


#: HBM capacities: H200 SXM 141 GB, H100 SXM 80 GB, HGX B200 180 GB per GPU (NVIDIA's
#: product pages; docs/catalog.md cites them). nvidia-smi shows somewhat more (the H200 here:
#: 143,771 MiB = 150.8 GB), so a workload that fits the published figure fits the card.
TARGETS: dict[str, Target] = {
    "b200": Target("b200", "sm_100a", B200, 180e9, "Blackwell", ("tcgen05 MMA (UMMA)", "TMEM")),
    "h200": Target("h200", "sm_90a", H200, 141e9, "Hopper", ("WGMMA (warpgroup MMA)",)),
    "h100": Target("h100", "sm_90a", H100, 80e9, "Hopper", ("WGMMA (warpgroup MMA)",)),
}
ARCHS = tuple(sorted({t.arch for t in TARGETS.values()}))  # ("sm_100a", "sm_90a")


class TargetMismatchError(ValueError):
    """The configured GPU and what the grading host reports disagree (or cannot be matched)."""


def target(key: str) -> Target:
    """The target of a concrete setting (``b200``, ``h200``, ``h100``); ``auto`` is resolved
    by :func:`resolve`."""
    try:
        return TARGETS[key]
    except KeyError:
        raise KeyError(f"unknown GPU {key!r}; use one of {', '.join(TARGETS)} (or auto)") from None


def concrete_gpu(setting: str) -> str:
    """A concrete target key for a setting (``auto`` before the host was asked: the default)."""
    return DEFAULT_GPU if setting == "auto" else target(setting).key


def target_for_device(device_name: str) -> Target | None:
    """The target a CUDA device name belongs to (``NVIDIA H100 80GB HBM3`` → h100), or None."""
    upper = device_name.upper()
    for t in TARGETS.values():
        if t.hardware.name.split()[-1] in upper:
            return t
    return None


def resolve(setting: str, host_gpus: Sequence[str], where: str = "the grading host") -> Target:
    """The target an experiment is graded on: ``setting`` checked against the GPU names
    ``where`` reports (empty: no GPU there, a CPU preview, which accepts any target; ``auto``
    then means :data:`DEFAULT_GPU`). Raises :class:`TargetMismatchError` when a reported GPU
    is unknown, the hosts disagree among themselves, or they contradict ``setting``."""
    if setting not in GPU_SETTINGS:
        raise TargetMismatchError(
            f"[grading] gpu = {setting!r}: use one of {', '.join(GPU_SETTINGS)}"
        )
    reports = f"{where} {'report' if where.endswith('s') else 'reports'}"
    found = {name: target_for_device(name) for name in host_gpus}
    unknown = sorted(name for name, t in found.items() if t is None)
    if unknown:
        raise TargetMismatchError(
            f"{reports} {', '.join(unknown)}, which is none of the grading targets "
            f"({', '.join(t.name for t in TARGETS.values())})"
        )
    kinds = sorted({t.key for t in found.values() if t is not None})
    if len(kinds) > 1:
        raise TargetMismatchError(
            f"{reports} different GPUs ({', '.join(sorted(found))}); grade an "
            "experiment on one kind of GPU"
        )
    if setting == "auto":
        return TARGETS[kinds[0]] if kinds else TARGETS[DEFAULT_GPU]
    chosen = TARGETS[setting]
    if kinds and kinds[0] != setting:
        raise TargetMismatchError(
            f'[grading] gpu = "{setting}" ({chosen.describe()}), but {reports} '
            f"{', '.join(sorted(found))} ({TARGETS[kinds[0]].describe()}); set gpu = "
            f'"{kinds[0]}" or "auto", or grade on {chosen.name} hosts'
        )
    return chosen


def declared_archs(source: str) -> tuple[str, ...] | None:
    """The module-level ``ARCHS`` tuple of a solution's source, or None when it has none.

    Raises ValueError when ``ARCHS`` is not a literal tuple/list of known architecture
    strings."""
    tree = ast.parse(source)
    for node in tree.body:
        value = None
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "ARCHS" for t in node.targets)
            or (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "ARCHS"
            )
        ):
            value = node.value
        if value is None:
            continue
        try:
            archs = ast.literal_eval(value)
        except ValueError:
            raise ValueError("ARCHS must be a literal tuple of strings") from None
        if not isinstance(archs, (tuple, list)) or not all(isinstance(a, str) for a in archs):
            raise ValueError("ARCHS must be a literal tuple of strings")
        bad = sorted(set(archs) - set(ARCHS))
        if bad or not archs:
            raise ValueError(f"ARCHS names unknown architectures {bad}; use {list(ARCHS)}")
        return tuple(archs)
    return None


def undeclared_target(source: str, gpu: Target) -> str | None:
    """Why ``source`` must not be graded on ``gpu`` (it declares ``ARCHS`` without the GPU's
    architecture, or declares them badly), or None. A source without ``ARCHS`` passes."""
    try:
        archs = declared_archs(source)
    except (SyntaxError, ValueError) as exc:
        return f"the solution's ARCHS cannot be read: {exc}"
    if archs is None or gpu.arch in archs:
        return None
    return (
        f"the solution declares ARCHS = {archs!r}, not {gpu.arch}: it was not written for "
        f"the grading GPU {gpu.describe()}; nothing was timed"
    )
