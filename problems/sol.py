"""Speed-of-light (SOL) estimates from a problem's cost and the target GPU's peaks.

``T_SOL = max(Σ_type flops_type / peak_type, bytes / bandwidth)``: the time a kernel needs at
best, either compute-bound on the math units its FLOPs run on or bound by DRAM traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from problems.spec import Cost


@dataclass(frozen=True)
class Hardware:
    """Peak throughputs of one GPU: FLOP/s per math type and DRAM bytes/s."""

    name: str
    peaks: Mapping[str, float]
    bandwidth: float


#: NVIDIA H200 SXM dense peaks. Tensor cores for bf16/fp16/fp8; float32 (and integer work,
#: by the same count of CUDA-core lanes) on CUDA cores; HBM3e bandwidth.
H200 = Hardware(
    name="NVIDIA H200",
    peaks={
        "bf16": 989e12,
        "fp16": 989e12,
        "fp8": 1979e12,
        "fp32": 67e12,
        "int": 67e12,
    },
    bandwidth=4.8e12,
)


#: NVIDIA H100 SXM dense peaks (the same tensor-core rates as the H200, less bandwidth).
H100 = Hardware(
    name="NVIDIA H100",
    peaks={"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "fp32": 67e12, "int": 67e12},
    bandwidth=3.35e12,
)

#: NVIDIA B200 (HGX, 1,000 W) dense peaks: NVIDIA's sheet lists sparse tensor rates, halved here.
B200 = Hardware(
    name="NVIDIA B200",
    peaks={"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "fp32": 75e12, "int": 75e12},
    bandwidth=7.7e12,
)

#: The documented table, matched against the device name CUDA reports.
KNOWN_HARDWARE: tuple[Hardware, ...] = (H200, H100, B200)


def hardware_for(device_name: str) -> Hardware | None:
    """The table entry for a CUDA device name (e.g. "NVIDIA H200"), or None when unknown."""
    name = device_name.upper()
    for hw in KNOWN_HARDWARE:
        if hw.name.split()[-1] in name:
            return hw
    return None


def share_of_sol(sol_ms: float | None, runtime_ms: float | None) -> float | None:
    """The SOL time as a percentage of a measured runtime (None when either is missing)."""
    if not sol_ms or not runtime_ms:
        return None
    return 100.0 * sol_ms / runtime_ms


@dataclass(frozen=True)
class SolEstimate:
    """The SOL time and its two bounds (seconds)."""

    compute_s: float
    memory_s: float
    by_type_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"

    def as_dict(self) -> dict[str, object]:
        return {
            "sol_us": self.seconds * 1e6,
            "compute_us": self.compute_s * 1e6,
            "memory_us": self.memory_s * 1e6,
            "bound": self.bound,
        }


def sol_estimate(cost: Cost, hardware: Hardware = H200) -> SolEstimate:
    """The SOL estimate of ``cost`` on ``hardware``."""
    by_type = {k: float(v) / hardware.peaks[k] for k, v in cost.flops.items()}
    return SolEstimate(
        compute_s=sum(by_type.values()),
        memory_s=float(cost.bytes) / hardware.bandwidth,
        by_type_s=by_type,
    )
