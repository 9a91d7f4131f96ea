"""The judge's checks of one call's outputs: memory (inputs untouched, aliasing as declared),
stability (nothing changes after the report), the float64 anchor, and the sampled comparison
with the eager output of the same draw."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.grading.judge import anchor
from engine.grading.judge.anchor import equal_bytes, stand_ins, to_host
from engine.grading.judge.state import Evaluation
from engine.grading.verdict import Rejected

SAMPLE_FULL = 1 << 16  # leaves up to this many elements are kept whole for the timed checks
SAMPLE_POSITIONS = 4096  # otherwise this many secret positions
TIMED_BOUND_FACTOR = 2.0  # |u − v| ≤ 2 · max allowance of the correctness draws (≥ 4/3 needed)


@dataclass
class Draw:
    """One call's inputs (the judge's pristine copy) and the judge's copy of its outputs.
    The caller keeps only this object, so that :meth:`OutputChecks.check_anchor` can move
    both to the host and free their device memory before the references run."""

    out: Any
    inputs: list[Any]


@dataclass
class Expected:
    """The eager output of one draw, reduced to what the timed checks need."""

    structure: Any  # the output with tensors replaced by (dtype, shape, device) markers
    samples: list[tuple[Any, Any] | None]  # per leaf: (positions or None = whole, values)


class OutputChecks:
    """Checks on judge-owned copies of a runner's outputs, for one evaluation. ``fetch``
    asks the submission's runner again for its last outputs (a judge-owned copy first)."""

    def __init__(self, evaluation: Evaluation, fetch: Callable[[], tuple[Any, ...]]) -> None:
        import torch

        self.evaluation = evaluation
        self.fetch = fetch
        # the secret positions of the timed checks
        self.rng = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
        self.allowances: dict[int, float] = {}  # per output leaf: the correctness draws' widest

    def reduce(self, out: Any) -> Expected:
        """The eager output of one draw reduced to what the timed checks need."""
        import torch

        from problems.compare import leaves

        samples: list[tuple[Any, Any] | None] = []
        for leaf in leaves(out):
            if not isinstance(leaf, torch.Tensor):
                samples.append(None)
                continue
            flat = leaf.reshape(-1)
            if flat.numel() <= SAMPLE_FULL:
                samples.append((None, flat.clone()))
            else:
                positions = torch.randint(flat.numel(), (SAMPLE_POSITIONS,), generator=self.rng)
                positions = positions.to(flat.device)
                samples.append((positions, flat[positions].clone()))
        return Expected(_skeleton(out, torch), samples)

    def check_memory(
        self, out: Any, described: list[dict[str, Any]], shipment: Any, inputs: list[Any]
    ) -> Any:
        """Inputs unchanged (except declared in-place outputs, taken from the input memory),
        no undeclared aliasing."""
        import torch

        from problems.compare import leaves

        problem, inplace = self.evaluation.problem, self.evaluation.inplace
        # the runner numbers input leaves; inputs are named and declared in place per argument
        slot_of_leaf = [slot for slot, x in enumerate(inputs) for _ in leaves([x])]
        tensor_inputs = [
            slot
            for slot, leaf in zip(slot_of_leaf, leaves(inputs))
            if isinstance(leaf, torch.Tensor)
        ]
        declared = {j: k for k, j in inplace.items()}
        out_leaves = leaves(out)
        aliased: list[set[int]] = []
        for k, desc in enumerate(described):
            aliases = desc.get("aliases") or []
            if not isinstance(aliases, list) or not all(
                type(i) is int and 0 <= i < len(slot_of_leaf) for i in aliases
            ):
                raise Rejected("runner.protocol", "malformed alias list")
            slots = {slot_of_leaf[i] for i in aliases}
            aliased.append(slots)
            for slot in slots:
                if inplace.get(k) == slot:
                    continue
                raise Rejected(
                    "correctness.aliasing",
                    f"output {k} shares memory with input {problem.inputs[slot]}",
                )
        for k, j in inplace.items():
            if j not in (aliased[k] if k < len(aliased) else set()):
                raise Rejected(
                    "correctness.structure",
                    f"output {problem.outputs[k]} must be input {problem.inputs[j]} "
                    "updated in place (declared in-place output)",
                )
        updated: dict[int, Any] = {}
        for slot, (live, pristine) in zip(tensor_inputs, shipment.views):
            if slot in declared:
                updated[declared[slot]] = live.clone()
                continue
            if not equal_bytes(live, pristine):
                name = problem.inputs[slot]
                raise Rejected("correctness.input_mutated", f"input {name} was modified")
        if not updated:
            return out
        from engine.grading.judge.wire import tensor_from_bytes

        replaced = list(out_leaves)
        for k, raw in updated.items():
            source = inputs[inplace[k]]
            desc = {
                "dtype": str(source.dtype).removeprefix("torch."),
                "shape": list(source.shape),
                "stride": list(source.stride()),
                "offset": source.storage_offset(),
            }
            replaced[k] = tensor_from_bytes(raw, desc)
        return _rebuild(out, iter(replaced))

    def check_stable(self, out: Any, described: list[dict[str, Any]]) -> None:
        """Output memory read again after the checks must not have changed (deferred work).

        On a GPU the judge re-reads the runner's allocations through its IPC mappings; on
        CPU it asks for a second report (a fresh copy of the same output memory)."""
        import torch

        from engine.grading.judge.wire import raw_bytes
        from problems.compare import leaves

        evaluation = self.evaluation
        assert evaluation.runner is not None
        if evaluation.cuda:
            again = [evaluation.transport.reread(desc) for desc in described]
        else:
            second = self.fetch()[0]
            again = [raw_bytes(x) if isinstance(x, torch.Tensor) else None for x in leaves(second)]
        for leaf, now in zip(leaves(out), again):
            if now is None or not isinstance(leaf, torch.Tensor):
                continue
            if not equal_bytes(raw_bytes(leaf), now):
                raise Rejected(
                    "timing.deferred_work",
                    "an output changed after the runner reported the call done",
                )

    # -- comparisons --------------------------------------------------------------------------
    def check_anchor(self, draw: Draw, kind: str, index: int) -> bool:
        """The whole output against the float64 anchor; records the draw. The draw moves to
        the host first unless the plan keeps it on the card (:mod:`.anchor`: only the
        reference runs and the compared chunks are on the device)."""
        problem = self.evaluation.problem
        shapes = stand_ins(draw.out)
        on_host = self.evaluation.job.get("anchor") == "host"  # the plan's placement
        if on_host:  # the supervisor stops the submission's clock (supervise.HOST_ANCHOR)
            self.evaluation.phase("host_anchor")
        start = time.monotonic()
        ok, structure, leaf_checks = self.anchored(draw, shapes, on_host)
        if on_host:  # the judge's own time, not the submission's: its limit moves on, and
            spent = time.monotonic() - start
            self.evaluation.deadline += spent
            self.evaluation.channel.send("judge_time", round(spent, 3))  # the clock resumes
        names = problem.outputs
        if kind == "correctness":
            for c in leaf_checks:
                if c.allowance is not None and math.isfinite(c.allowance):
                    self.allowances[c.index] = max(self.allowances.get(c.index, 0.0), c.allowance)
        self.evaluation.draws.append(
            {
                "kind": kind,
                "index": index,
                "passed": ok,
                "structure": structure,
                "outputs": [
                    {
                        **c.as_dict(),
                        "name": names[c.index] if c.index < len(names) else str(c.index),
                    }
                    for c in leaf_checks
                ],
            }
        )
        return ok

    def anchored(self, draw: Draw, shapes: Any, on_host: bool) -> Any:
        """:func:`.anchor.check_anchor` of ``draw`` where the plan keeps it: on the card
        (``job["draw"] == "device"``) or on the host. A draw kept on the card that meets the
        card's limit (the plan fell short) goes to the host and is checked again there, as is
        every later draw of the grading; the result counts it (``draw_fallbacks``)."""
        evaluation = self.evaluation
        reference, device = evaluation.problem.reference, evaluation.device
        if not on_host and evaluation.job.get("draw") == "device":
            try:
                return anchor.check_anchor(
                    reference, draw.out, shapes, draw.inputs, device, resident=True
                )
            except Exception as exc:
                if not out_of_memory(exc):
                    raise
            # here the failed run's tensors, held by the traceback, are free
            evaluation.job["draw"] = "host"
            fallbacks = int(evaluation.result.get("draw_fallbacks", 0)) + 1
            evaluation.result["draw_fallbacks"] = fallbacks
            release_cached()
        draw.out, draw.inputs = to_host(draw.out), to_host(draw.inputs)
        return anchor.check_anchor(
            reference, draw.out, shapes, draw.inputs, device, "cpu" if on_host else None
        )

    def check_sampled(self, out: Any, expected: Expected, kind: str, index: int) -> None:
        """The output against the eager output of the same draw at the secret positions."""
        import torch

        from problems.compare import is_discrete, leaves, structure_mismatch

        outputs = self.evaluation.problem.outputs
        mismatch = structure_mismatch(out, _from_skeleton(expected.structure, torch))
        if mismatch:
            raise Rejected("correctness.structure", f"{kind} call {index}: {mismatch}")
        for k, (u, sample) in enumerate(zip(leaves(out), expected.samples)):
            if sample is None:
                continue
            positions, v = sample
            flat = u.reshape(-1)
            got = flat if positions is None else flat[positions]
            name = outputs[k] if k < len(outputs) else str(k)
            if is_discrete(v.dtype):
                a, b = (
                    (got.view(torch.uint8), v.view(torch.uint8))
                    if v.dtype.is_floating_point
                    else (got, v)
                )
                if not torch.equal(a, b):
                    raise Rejected(
                        "correctness.recheck",
                        f"{kind} call {index}: {name}: differs from the reference",
                    )
                continue
            g, e = got.double(), v.double()
            if bool(torch.isnan(g).any()):
                raise Rejected("correctness.nan", f"{kind} call {index}: {name}: NaN in output")
            inf = ~torch.isfinite(e)
            if not torch.equal(g[inf], e[inf]) or not bool(torch.isfinite(g[~inf]).all()):
                raise Rejected(
                    "correctness.recheck", f"{kind} call {index}: {name}: infinite values differ"
                )
            bound = TIMED_BOUND_FACTOR * self.allowances.get(k, 0.0)
            err = float((g[~inf] - e[~inf]).abs().max()) if bool((~inf).any()) else 0.0
            if err > bound:
                raise Rejected(
                    "correctness.recheck",
                    f"{kind} call {index}: {name}: error {err:.3e} vs the eager output of the "
                    f"same draw exceeds {bound:.3e}",
                )

    def rejection_for(self, kind: str) -> Rejected:
        """The rejection for the last draw the anchor failed."""
        record = self.evaluation.draws[-1]
        if record["structure"] or any(o["kind"] == "structure" for o in record["outputs"]):
            detail = record["structure"] or next(
                o["detail"] for o in record["outputs"] if o["kind"] == "structure"
            )
            return Rejected("correctness.structure", detail)
        bad = next(o for o in record["outputs"] if not o["passed"])
        detail = f"{bad['name']}: {bad['detail']}"
        if "NaN" in bad["detail"] or "infinite" in bad["detail"]:
            return Rejected("correctness.nan", detail)
        if kind == "recheck":
            return Rejected("correctness.recheck", f"timed call {record['index']}: {detail}")
        return Rejected("correctness.tolerance", f"draw {record['index']}: {detail}")


def _skeleton(node: Any, torch: Any) -> Any:
    """The output's structure with each tensor as a (dtype, shape, device) marker."""
    if isinstance(node, torch.Tensor):
        return ("tensor", node.dtype, tuple(node.shape), node.device.type)
    if isinstance(node, (list, tuple)):
        return type(node)(_skeleton(x, torch) for x in node)
    return ("value", node)


def _rebuild(template: Any, leaves_iter: Any) -> Any:
    if isinstance(template, (list, tuple)):
        return type(template)(_rebuild(x, leaves_iter) for x in template)
    return next(leaves_iter)


def _from_skeleton(node: Any, torch: Any) -> Any:
    """The expected structure with zero-stride stand-ins for tensors (no real memory)."""
    if isinstance(node, tuple) and len(node) == 4 and node[0] == "tensor":
        _, dtype, shape, device = node
        return torch.zeros((), dtype=dtype, device=device).expand(shape)
    if isinstance(node, tuple) and len(node) == 2 and node[0] == "value":
        return node[1]
    if isinstance(node, (list, tuple)):
        return type(node)(_from_skeleton(x, torch) for x in node)
    return node


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's out-of-device-memory error (not a host ``MemoryError``, which
    :func:`engine.grading.verdict.out_of_memory` counts too: moving the draw to the host would
    not mend that)."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


def release_cached() -> None:
    """Give the allocator's cached blocks back to the device (after an out-of-memory)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
