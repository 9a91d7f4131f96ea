"""The memory model of a grading, from the sizes of one traced draw (no torch, no data).

:class:`DrawSizes` (what one draw's tensors weigh, traced by :mod:`problems.memory` or read
from the stored plans, :mod:`problems.memory_store`) gives, phase by phase, what each process
of a grading holds on the card (:func:`judge_peak`, :func:`runner_peak`,
:func:`plan_from_sizes`), and where the float64 anchor runs on a card of a given size
(:func:`placed_plan`): on the device when the grading fits beside it, else on the host; and
where a checked draw waits while the references run: on the device when the grading fits with
it there (no host round trip of the inputs, which on p51's 12.9 GB took most of a grading's two
minutes on an H100), else on the host. The model is described in ``docs/grading.md``, "GPU
memory of a grading".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

CONTEXT_BYTES = 600e6  # one process's CUDA context with torch's kernels loaded
HEADROOM_BYTES = 2e9  # kept free on the card beyond the plan (allocator fragmentation)
COMPARE_CHUNK_ELEMENTS = 1 << 22  # the judge compares outputs on the device this many at a time
# the judge's device workspace of one chunk: u, v, z in float64 and their masks and differences
COMPARE_WORKSPACE_BYTES = 12 * 8 * COMPARE_CHUNK_ELEMENTS
# The host anchor's speed, for its time estimate: float64 matrix products measured on one core
# of this project's CPU machine (AMD EPYC, 2048^3 torch.matmul, 51-52 GFLOP/s of CPU time,
# 2026-12-07), times the cores of a grading host (16). An estimate, not a measurement.
HOST_F64_FLOPS_PER_CORE = 51e9
HOST_ANCHOR_CORES = 16
ANCHORS = ("device", "host")
DRAWS = ("host", "device")  # where a checked draw waits while the references run


@dataclass(frozen=True)
class DrawSizes:
    """What one draw's tensors weigh, in bytes (one reference run each way)."""

    inputs: float  # the inputs at their own dtypes
    inplace_inputs: float  # the inputs a declared in-place output updates
    promoted: list[float]  # per input leaf: its float64 copy (others: a plain copy)
    input_leaves: list[float]  # per input leaf at its own dtype
    outputs: float  # the reference's outputs at the original dtypes (the submission's too)
    anchor_outputs: float  # the anchor's outputs (float64)
    reference_peak: float  # one reference run beyond its inputs, its outputs included
    anchor_peak: float  # one anchor run beyond its promoted inputs, its outputs included
    largest_output: int  # elements of the largest output compared in float64 (bounds a chunk)
    assumed: int = 0  # data-dependent scalars of large tensors the trace assumed (the tracer)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DrawSizes:
        """The sizes stored by :meth:`as_dict` (KeyError/TypeError/ValueError when malformed)."""
        names = {f.name for f in fields(cls)}
        if set(data) != names:
            raise KeyError(f"stored sizes have fields {sorted(data)}, not {sorted(names)}")
        return cls(
            inputs=float(data["inputs"]),
            inplace_inputs=float(data["inplace_inputs"]),
            promoted=[float(x) for x in data["promoted"]],
            input_leaves=[float(x) for x in data["input_leaves"]],
            outputs=float(data["outputs"]),
            anchor_outputs=float(data["anchor_outputs"]),
            reference_peak=float(data["reference_peak"]),
            anchor_peak=float(data["anchor_peak"]),
            largest_output=int(data["largest_output"]),
            assumed=int(data["assumed"]),
        )


def promotion_peak(sizes: DrawSizes) -> float:
    """The judge's float64 copies made leaf by leaf from the host: the copies so far, and the
    current leaf at its own dtype on its way to float64."""
    done, peak = 0.0, 0.0
    for own, promoted in zip(sizes.input_leaves, sizes.promoted):
        peak = max(peak, done + own + promoted)
        done += promoted
    return peak


def anchor_run(sizes: DrawSizes) -> float:
    """One anchor run where it runs: its promoted inputs (made leaf by leaf) and its peak."""
    return max(promotion_peak(sizes), sum(sizes.promoted) + sizes.anchor_peak)


def judge_peak(
    sizes: DrawSizes, device: str = "cuda", anchor: str = "device", draw_on: str = "host"
) -> float:
    """The judge's peak on ``device`` (its CUDA context aside).

    On a GPU the judge holds a draw (its inputs and its copy of the outputs) only while it
    checks the call; for the anchor the draw and each reference's outputs wait on the host
    (``draw_on="host"``) or on the device (``"device"``: no host round trip, the references'
    fresh copies made device to device) and each reference run gets a fresh device copy of the
    inputs; outputs are compared on the device one chunk at a time. With ``anchor="host"`` the
    float64 anchor runs on the host (:func:`host_anchor_bytes`) and only its compared chunks
    reach the device. On the CPU, host and device are one memory: the draw and the outputs
    held on the host count too, as they do on a GPU with the draw on the device.
    """
    draw = sizes.inputs + sizes.outputs
    call = draw + sizes.inplace_inputs
    eager = draw
    v_run = sizes.inputs + sizes.reference_peak
    z_run = anchor_run(sizes) if anchor == "device" or device == "cpu" else 0.0
    compare = compare_workspace(sizes)
    if device == "cpu" or (draw_on == "device" and anchor == "device"):
        v_run += draw
        z_run += draw + sizes.outputs
        compare += draw + sizes.outputs + sizes.anchor_outputs
    return max(call, eager, v_run, z_run, compare)


def host_anchor_bytes(sizes: DrawSizes) -> float:
    """The judge's host memory while the anchor runs there: the draw and the reference's
    outputs waiting, the promoted inputs and the anchor run's own peak."""
    return sizes.inputs + 2 * sizes.outputs + anchor_run(sizes)


def compare_workspace(sizes: DrawSizes) -> float:
    """The judge's workspace for one compared chunk (no larger than the largest output)."""
    return COMPARE_WORKSPACE_BYTES * min(sizes.largest_output, COMPARE_CHUNK_ELEMENTS) / (
        COMPARE_CHUNK_ELEMENTS
    )


def runner_peak(sizes: DrawSizes) -> float:
    """A runner's peak (the reference runner's, and the submission's as planned): its copy of
    the inputs and one reference run (outputs and workspace; a submission's own workspace is
    not known, the eager reference's stands for it)."""
    return sizes.inputs + sizes.reference_peak


def host_anchor_seconds(flops: float, cores: int = HOST_ANCHOR_CORES) -> float:
    """Estimated seconds of one float64 anchor run on the host: the problem's FLOPs at the
    float64 matrix-product rate of :data:`HOST_F64_FLOPS_PER_CORE` on ``cores`` cores."""
    return flops / (HOST_F64_FLOPS_PER_CORE * cores)


@dataclass(frozen=True)
class MemoryPlan:
    """The card memory a grading of one problem plans for, and how it was found."""

    total_bytes: float | None  # the grading's peak on one card, CUDA contexts included
    judge_bytes: float | None = None
    runner_bytes: float | None = None
    sizes: DrawSizes | None = None
    method: str = "traced"  # traced | stored | measured (a GPU peak, measured.json) | unknown
    note: str = ""
    anchor: str = "device"  # where the float64 anchor runs: device | host
    host_bytes: float | None = None  # the judge's host memory for a host anchor
    anchor_s: float | None = None  # estimated seconds of one host anchor run
    draw: str = "host"  # where a checked draw waits while the references run: host | device

    def fits(self, capacity_bytes: float, headroom: float = HEADROOM_BYTES) -> bool | None:
        """Whether the plan fits a card of ``capacity_bytes`` with ``headroom`` kept free
        (None: unknown)."""
        if self.total_bytes is None:
            return None
        return self.total_bytes + headroom <= capacity_bytes


def plan_from_sizes(
    sizes: DrawSizes,
    anchor: str = "device",
    flops: float | None = None,
    method: str = "traced",
    draw: str = "host",
) -> MemoryPlan:
    """The grading's peak on one card: the eager phase (the judge shipping a draw, the
    reference runner, three CUDA contexts with the submission's runner started ahead) or the
    checks (the judge and the submission's runner, two contexts), whichever is larger; with
    the anchor on the device or the host (``flops``: the problem's, for the host's time) and
    a checked draw waiting on the host or, with the anchor on the device, on the device."""
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {ANCHORS}, not {anchor!r}")
    if draw not in DRAWS or (draw == "device" and anchor != "device"):
        raise ValueError(f"a draw waits on the device only beside a device anchor, not {draw!r}")
    judge, runner = judge_peak(sizes, "cuda", anchor, draw), runner_peak(sizes)
    eager = sizes.inputs + sizes.outputs + runner_peak(sizes) + 3 * CONTEXT_BYTES
    checks = judge + runner + 2 * CONTEXT_BYTES
    if anchor == "device":
        return MemoryPlan(max(eager, checks), judge, runner, sizes, method, draw=draw)
    seconds = None if flops is None else host_anchor_seconds(flops)
    return MemoryPlan(
        max(eager, checks), judge, runner, sizes, method,
        anchor="host", host_bytes=host_anchor_bytes(sizes), anchor_s=seconds,
    )


def placed_plan(
    sizes: DrawSizes,
    capacity: float | None,
    flops: float | None = None,
    headroom: float = HEADROOM_BYTES,
    method: str = "traced",
) -> MemoryPlan:
    """The plan on a card of ``capacity`` bytes: the anchor and the checked draw on the device
    when that fits; else the anchor on the device with the draw on the host when that fits (or
    the card's size is unknown); else the anchor on the host (the smaller plan, fitting or
    not)."""
    resident = plan_from_sizes(sizes, "device", method=method, draw="device")
    if capacity is not None and resident.fits(capacity, headroom):
        return resident
    on_device = plan_from_sizes(sizes, "device", method=method)
    if capacity is None or on_device.fits(capacity, headroom):
        return on_device
    return plan_from_sizes(sizes, "host", flops, method)


def measured_plan(problem_id: str, scale: str, why: str) -> MemoryPlan:
    """The peak measured on a GPU for a problem that cannot be traced, else unknown."""
    if scale == "full":
        from problems.measured import measured

        row = measured(problem_id)
        if row and row.get("peak_gpu_gb") is not None:
            peak = float(row["peak_gpu_gb"]) * 1e9
            note = f"not traceable ({why}): peak measured on the {row['device']}"
            return MemoryPlan(peak + 2 * CONTEXT_BYTES, method="measured", note=note)
    return MemoryPlan(None, method="unknown", note=f"not traceable ({why}), never measured")
