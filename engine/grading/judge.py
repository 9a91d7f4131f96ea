"""The trusted judge: one evaluation, with the submission kept in another process.

The judge owns the problem, input generation, references and float64 anchors, tolerances,
every comparison, the clock and the verdict. The submission runs in an untrusted runner
(:mod:`engine.grading.runner`, jailed) that only calls ``solve()`` and reports raw data; the
eager reference runs in a reference runner forked from the judge, so both sides of the
speedup take the same path.

Order: reference runner forked (before the judge touches CUDA), eager timing (warmup and
timed draws; reduced copies of its outputs kept), runner calibration (no-op round trips),
import, correctness draws (whole outputs against the anchor), warmup and timed calls (every
output against the eager output of the same draw at secret positions, three secret timed
calls against the anchor in full), the timing cross-check, launch evidence, the kernel audit
and the bypass call. Run as ``python -m engine.grading.judge --result-fd N`` with the job on
stdin, or through :func:`run_job` in a child forked from the warm parent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.grading.runner_proc import (
    RunnerDied,
    RunnerMemory,
    RunnerOptions,
    RunnerProcess,
    RunnerTimeout,
)

MAX_ERROR_CHARS = 2000
SAMPLE_FULL = 1 << 16  # leaves up to this many elements are kept whole for the timed checks
SAMPLE_POSITIONS = 4096  # otherwise this many secret positions
CALIBRATION_CALLS = 40
CALIBRATION_SKIP = 6  # first round trips warm the path
BOUND_QUANTILE = 0.9  # robust to a scheduling hiccup during calibration
TIMED_BOUND_FACTOR = 2.0  # |u − v| ≤ 2 · max allowance of the correctness draws (≥ 4/3 needed)
CLOCK_FLOOR_MS = {"cuda": 0.05, "cpu": 0.5}
_monotonic = time.monotonic


class Rejected(Exception):
    """The submission failed a check; ``code`` is the stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Channel:
    """JSON lines to the process that started the judge (phases, then one result)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._fd = fd
        self._nonce = nonce

    def send(self, kind: str, data: Any) -> None:
        line = json.dumps({"nonce": self._nonce, "kind": kind, "data": data}, default=str)
        payload = (line + "\n").encode()
        while payload:
            payload = payload[os.write(self._fd, payload) :]


@dataclass
class Expected:
    """The eager output of one draw, reduced to what the timed checks need."""

    structure: Any  # the output with tensors replaced by (dtype, shape, device) markers
    samples: list[tuple[Any, Any] | None]  # per leaf: (positions or None = whole, values)


class Judge:
    """One evaluation, driven by the job dictionary the parent sent."""

    def __init__(
        self,
        job: dict[str, Any],
        channel: Channel,
        spare: RunnerProcess | None = None,
        prepared: Prepared | None = None,
    ):
        import torch

        from problems.registry import get, load_problem

        self.torch = torch
        self.job = job
        self.channel = channel
        path = job.get("problem_path")
        self.problem = load_problem(Path(path)) if path else get(job["problem_id"])
        self.cuda = job["device"] == "cuda"
        self.device = "cuda" if self.cuda else "cpu"
        self.scale = job.get("scale", "full" if self.cuda else "smoke")
        self.inplace = self.problem.inplace_input_indices()
        self.timings: dict[str, float] = {}
        self.draws: list[dict[str, Any]] = []
        self.spare = spare
        self.prepared = prepared
        self.runner: RunnerProcess | None = None
        self.transport: Any = None
        self.deadline = math.inf
        self.calls = 0
        self.launches: list[int] = []
        self.gaps: list[float] = []
        self.judge_ms: list[float] = []  # release of each timed call to its outputs' report
        self.report_ms = 0.0
        self.scored_judge_ms = 0.0
        self.runner_ms: list[float] = []
        self.allowances: dict[int, float] = {}
        self.base_threads: int | None = None
        self.rng = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
        self.result: dict[str, Any] = {
            "import_ok": None,
            "findings": [],
            "draws": self.draws,
            "timings_s": self.timings,
            "scale": self.scale,
            "timer": "judge_clock+runner_events" if self.cuda else "judge_clock+perf_counter",
        }

    # -- helpers ----------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.channel.send("phase", name)

    def timed(self, name: str, start: float) -> None:
        self.timings[name] = round(self.timings.get(name, 0.0) + _monotonic() - start, 4)

    def inputs(self, seed: int) -> list[Any]:
        return self.problem.make_inputs(seed, self.device, self.scale)

    # -- eager ------------------------------------------------------------------------------
    def run_eager(self, reference: RunnerProcess) -> dict[int, Expected]:
        """Time the reference in its runner; keep reduced copies of its outputs per seed."""
        from engine.grading.wire import Transport

        seeds = self.job["seeds"]
        transport = Transport(self.cuda, lambda m: reference.request(m, _monotonic() + 600)[0])
        deadline = _monotonic() + float(self.job.get("eager_timeout_s", 600.0))
        expected: dict[int, Expected] = {}
        samples: list[float] = []
        events: list[float] = []
        eager_gaps: list[float] = []
        try:
            reference.wait_ready()
            clock = self.calibrate(reference, transport)
            self.result["eager_clock"] = clock
            armed, _ = reference.request({"op": "arm"}, deadline)
            if armed.get("op") != "armed":
                raise RuntimeError(f"the reference runner did not arm: {armed}")
            for kind, seed in [("warmup", s) for s in seeds["warmup"]] + [
                ("timed", s) for s in seeds["timed"]
            ]:
                shipment = transport.ship(self.inputs(seed))
                reference.request(
                    {"op": "stage", "inputs": shipment.layout}, deadline, shipment.fds
                )
                shipment.close()
                reply, _, judge_ms = reference.timed({"op": "call", "id": seed}, deadline)
                if reply.get("op") != "done":
                    raise RuntimeError(f"the eager reference failed: {reply.get('error')}")
                report, fds, report_ms = reference.timed({"op": "report"}, deadline)
                judge_ms += report_ms  # the clock runs until the outputs are described
                out, _ = transport.fetch(report.get("outputs"), fds)
                for fd in fds:
                    os.close(fd)
                expected[seed] = self.reduce(out)
                del out, shipment
                if kind == "timed":
                    samples.append(scored_ms(judge_ms, clock))
                    events.append(float(reply["ms"]))
                    eager_gaps.append(judge_ms - float(reply["ms"]))
        finally:
            transport.close()
        from engine.grading.timing import summarize

        # the reference runner is trusted: its own figure (CUDA events or perf_counter around
        # the call) is the eager time; its gap to the judge's clock on real calls is what an
        # honest runner's clock misses, and sets the floor of the submission's score
        self.result["eager_median_ms"], self.result["eager_iqr_ms"] = summarize(events)
        self.result["eager_event_median_ms"] = statistics.median(events)
        clock["judge_median_ms"] = round(statistics.median(samples), 4)
        clock["real_call_gap_ms"] = round(statistics.median(eager_gaps), 4)
        return expected

    def reduce(self, out: Any) -> Expected:
        from problems.compare import leaves

        torch = self.torch

        def skeleton(node: Any) -> Any:
            if isinstance(node, torch.Tensor):
                return ("tensor", node.dtype, tuple(node.shape), node.device.type)
            if isinstance(node, (list, tuple)):
                return type(node)(skeleton(x) for x in node)
            return ("value", node)

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
        return Expected(skeleton(out), samples)

    # -- the submission runner --------------------------------------------------------------
    def start_runner(self) -> RunnerProcess:
        options = RunnerOptions(
            device=self.device,
            preload_dsls=bool(self.job.get("preload_dsls", True)),
            jail=not self.job.get("unsafe_no_jail", False),
            memory_limit_mb=self.job.get("memory_limit_mb") or self.job.get("rss_limit_mb"),
        )
        self.result["jailed"] = options.jail
        runner = self.spare if self.spare is not None else RunnerProcess.spawn(options)
        runner.memory_limit_mb = options.memory_limit_mb
        self.spare = None
        self.runner = runner
        try:
            runner.wait_ready()
        except (RunnerDied, RunnerTimeout) as exc:
            raise InfrastructureError(f"the runner did not start: {exc}") from exc
        return runner

    def calibrate(self, runner: RunnerProcess, transport: Any) -> dict[str, float]:
        """No-op calls through the whole path, inputs staged by the judge first as in a real
        call (so a GPU context switch is included). Returns the round trip the judge's clock
        adds to every call (median, p99 of ``judge − runner figure`` and of the whole no-op)."""
        torch = self.torch
        probe = [torch.zeros(1024, dtype=torch.float32, device=self.device)]
        gaps: list[float] = []
        trips: list[float] = []
        deadline = _monotonic() + 120
        for i in range(CALIBRATION_CALLS):
            probe[0].add_(1.0)
            shipment = transport.ship(probe)
            runner.request({"op": "stage", "inputs": shipment.layout}, deadline, shipment.fds)
            shipment.close()
            reply, _, judge_ms = runner.timed({"op": "call", "id": f"c{i}"}, deadline)
            if reply.get("op") != "done":
                raise InfrastructureError(f"runner calibration failed: {str(reply)[:200]}")
            _, fds, report_ms = runner.timed({"op": "report"}, deadline)
            for fd in fds:
                os.close(fd)
            gaps.append(judge_ms - float(reply["ms"]))
            trips.append(judge_ms + report_ms)
        gaps, trips = sorted(gaps[CALIBRATION_SKIP:]), sorted(trips[CALIBRATION_SKIP:])
        return {
            "round_trip_median_ms": round(statistics.median(trips), 4),
            "round_trip_p99_ms": round(_quantile(trips, 0.99), 4),
            "gap_median_ms": round(statistics.median(gaps), 4),
            "bound_ms": round(2 * _quantile(gaps, BOUND_QUANTILE) + CLOCK_FLOOR_MS[self.device], 4),
        }

    def load(self, runner: RunnerProcess) -> None:
        source_fd = os.memfd_create("mkb-src")
        os.write(source_fd, self.job["source"].encode())
        os.lseek(source_fd, 0, os.SEEK_SET)
        message = {
            "op": "load",
            "dsl": self.job["dsl"],
            "dsl_checks": bool(self.job.get("dsl_checks")),
            "memory_limit_mb": None if self.cuda else self.job.get("memory_limit_mb"),
        }
        try:
            reply, _ = runner.request(message, self.deadline, [source_fd])
        finally:
            os.close(source_fd)
        if reply.get("op") != "loaded":
            raise Rejected(
                "runner.protocol",
                "the runner answered the import with junk: "
                + str(reply.get("error", reply))[-300:],
            )
        if reply.get("unavailable"):
            raise InfrastructureError(f"the {self.job['dsl']} DSL is not importable on this host")
        if not reply.get("ok"):
            error = str(reply.get("error", ""))[:MAX_ERROR_CHARS]
            self.result["import_error"] = error
            code = "memory" if reply.get("memory") else "import.failed"
            last = error.strip().splitlines()[-1] if error.strip() else "import failed"
            raise Rejected(code, f"import failed: {last}")
        self.result["import_ok"] = True
        if isinstance(reply.get("threads"), int):
            self.base_threads = reply["threads"]

    # -- one call ---------------------------------------------------------------------------
    def call(self, seed: int, timed: bool = False) -> tuple[Any, list[Any]]:
        """Run one call in the runner; returns (judge-owned outputs, pristine inputs)."""

        assert self.runner is not None
        inputs = self.inputs(seed)
        shipment = self.transport.ship(inputs)
        staged, _ = self.runner.request(
            {"op": "stage", "inputs": shipment.layout}, self.deadline, shipment.fds
        )
        shipment.close()
        if staged.get("op") != "staged":
            raise Rejected("runner.protocol", "the runner did not stage the inputs")
        call_id = os.urandom(8).hex()
        reply, _, judge_ms = self.runner.timed({"op": "call", "id": call_id}, self.deadline)
        op = reply.get("op")
        if op == "error" and reply.get("id") == call_id:
            self.result["error"] = str(reply.get("error", ""))[:MAX_ERROR_CHARS]
            code = "memory" if reply.get("memory") else "crash"
            last = str(reply.get("error", "")).strip().splitlines()[-1:] or ["?"]
            raise Rejected(code, f"solve() raised: {last[0][:300]}")
        if op != "done" or reply.get("id") != call_id:
            raise Rejected("runner.protocol", "the runner's answer does not match the call")
        out, described, report = self.fetch_outputs()
        # the score's clock runs from releasing the call until the outputs are described: work
        # a patched runner does after "done" (in its report, a signal handler) is counted
        self.scored_judge_ms = judge_ms + self.report_ms
        reply["threads"] = max(_int(reply.get("threads")), _int(report.get("threads")))
        self.calls += 1
        self.check_evidence(reply, judge_ms, timed)
        out = self.check_memory(out, described, shipment, inputs)
        self.check_stable(out, described)
        return out, inputs

    def fetch_outputs(self) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
        """Ask the runner where the last outputs lie; judge-owned copies of them."""
        from engine.grading.wire import ProtocolError

        assert self.runner is not None
        report, fds, self.report_ms = self.runner.timed({"op": "report"}, self.deadline)
        try:
            if report.get("op") != "outputs":
                raise Rejected("runner.protocol", "the runner did not report its outputs")
            out, described = self.transport.fetch(report.get("outputs"), fds)
        except ProtocolError as exc:
            raise Rejected("runner.protocol", f"unusable output description: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        return out, described, report

    def check_evidence(self, reply: dict[str, Any], judge_ms: float, timed: bool) -> None:
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise Rejected("runner.protocol", "the runner's timing figure is not a time")
        if timed:
            self.gaps.append(judge_ms - float(ms))
            self.judge_ms.append(self.scored_judge_ms)
            self.runner_ms.append(float(ms))
        threads = reply.get("threads")
        if (
            isinstance(threads, int)
            and self.base_threads is not None
            and threads > self.base_threads
        ):
            raise Rejected("guard.threads", "a thread started by the submission is still running")
        py_threads = reply.get("py_threads")
        base_py = self.runner.ready.get("py_threads") if self.runner is not None else None
        if isinstance(py_threads, int) and isinstance(base_py, int) and py_threads > base_py:
            raise Rejected(
                "guard.threads", "a Python thread the submission started is still running"
            )
        if self.job.get("dsl_checks"):
            launches = reply.get("launches")
            if type(launches) is not int or launches < 1:
                raise Rejected(
                    "dsl.no_launch", f"call {self.calls} launched no {self.job['dsl']} kernel"
                )
            self.launches.append(launches)

    def check_memory(
        self, out: Any, described: list[dict[str, Any]], shipment: Any, inputs: list[Any]
    ) -> Any:
        """Inputs unchanged (except declared in-place outputs, taken from the input memory),
        no undeclared aliasing."""
        from problems.compare import leaves

        torch = self.torch
        # the runner numbers input leaves; inputs are named and declared in place per argument
        slot_of_leaf = [slot for slot, x in enumerate(inputs) for _ in leaves([x])]
        tensor_inputs = [
            slot
            for slot, leaf in zip(slot_of_leaf, leaves(inputs))
            if isinstance(leaf, torch.Tensor)
        ]
        declared = {j: k for k, j in self.inplace.items()}
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
                if self.inplace.get(k) == slot:
                    continue
                raise Rejected(
                    "correctness.aliasing",
                    f"output {k} shares memory with input {self.problem.inputs[slot]}",
                )
        for k, j in self.inplace.items():
            if j not in (aliased[k] if k < len(aliased) else set()):
                raise Rejected(
                    "correctness.structure",
                    f"output {self.problem.outputs[k]} must be input {self.problem.inputs[j]} "
                    "updated in place (declared in-place output)",
                )
        updated: dict[int, Any] = {}
        for slot, (live, pristine) in zip(tensor_inputs, shipment.views):
            if slot in declared:
                updated[declared[slot]] = live.clone()
                continue
            if not torch.equal(live, pristine):
                name = self.problem.inputs[slot]
                raise Rejected("correctness.input_mutated", f"input {name} was modified")
        if not updated:
            return out
        from engine.grading.wire import tensor_from_bytes

        replaced = list(out_leaves)
        for k, raw in updated.items():
            source = inputs[self.inplace[k]]
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
        from engine.grading.wire import raw_bytes
        from problems.compare import leaves

        torch = self.torch
        assert self.runner is not None
        if self.cuda:
            again = [self.transport.reread(desc) for desc in described]
        else:
            second, _, _ = self.fetch_outputs()
            again = [raw_bytes(x) if isinstance(x, torch.Tensor) else None for x in leaves(second)]
        for leaf, now in zip(leaves(out), again):
            if now is None or not isinstance(leaf, torch.Tensor):
                continue
            first = raw_bytes(leaf)
            if first.numel() != now.numel() or not torch.equal(first, now):
                raise Rejected(
                    "timing.deferred_work",
                    "an output changed after the runner reported the call done",
                )

    # -- comparisons --------------------------------------------------------------------------
    def check_anchor(self, out: Any, pristine: list[Any], kind: str, index: int) -> bool:
        """The whole output against the float64 anchor; records the draw."""
        from problems.compare import check_outputs, clone_inputs, promote, reference_numerics

        with reference_numerics():
            v = self.problem.reference(*clone_inputs(pristine))
            z = self.problem.reference(*promote(clone_inputs(pristine)))
        ok, structure, leaf_checks = check_outputs(out, v, z)
        names = self.problem.outputs
        if kind == "correctness":
            for c in leaf_checks:
                if c.allowance is not None and math.isfinite(c.allowance):
                    self.allowances[c.index] = max(self.allowances.get(c.index, 0.0), c.allowance)
        self.draws.append(
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

    def check_sampled(self, out: Any, expected: Expected, kind: str, index: int) -> None:
        """The output against the eager output of the same draw at the secret positions."""
        from problems.compare import is_discrete, leaves, structure_mismatch

        torch = self.torch
        mismatch = structure_mismatch(out, _from_skeleton(expected.structure, torch))
        if mismatch:
            raise Rejected("correctness.structure", f"{kind} call {index}: {mismatch}")
        for k, (u, sample) in enumerate(zip(leaves(out), expected.samples)):
            if sample is None:
                continue
            positions, v = sample
            flat = u.reshape(-1)
            got = flat if positions is None else flat[positions]
            name = self.problem.outputs[k] if k < len(self.problem.outputs) else str(k)
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
        record = self.draws[-1]
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

    # -- timing, SOL, launch evidence --------------------------------------------------------
    def settle_timing(self) -> None:
        """Score with the judge's clock; reject a runner figure that disagrees with it."""
        from engine.grading.timing import speedup, summarize

        clock = self.result["clock"]
        bound = clock["bound_ms"]
        gap = statistics.median(self.gaps)
        clock.update(median_gap_ms=round(gap, 4), judge_median_ms=statistics.median(self.judge_ms))
        if gap > bound:
            detail = (
                f"the runner's timing figure is {gap:.3f} ms below the judge's clock (median); "
                f"the calibrated round trip allows {bound:.3f} ms"
            )
            if self.cuda:
                raise Rejected("timing.mismatch", detail)
            # CPU preview: a loaded host preempts the runner between its clock and its
            # answer; scores use the judge's clock anyway, so record it instead of failing
            self.flag("timing.mismatch")
            clock["mismatch"] = detail
        # The runner's figure is the finer number, used where the judge's clock agrees: the
        # judge's median less the trusted reference runner's gap on real calls is a floor
        # that shaving the figure (by up to the bound above) cannot get under.
        real_gap = self.result["eager_clock"]["real_call_gap_ms"]
        floor = max(statistics.median(self.judge_ms) - real_gap, 1e-3)
        if statistics.median(self.runner_ms) >= floor:
            samples, scored_by = list(self.runner_ms), "runner_figure"
        else:
            samples = [max(ms - real_gap, 1e-3) for ms in self.judge_ms]
            scored_by = "judge_floor"
            self.flag("timing.judge_floor")
        clock.update(judge_floor_ms=round(floor, 4), scored_by=scored_by)
        median, iqr = summarize(samples)
        self.result.update(
            impl_median_ms=median,
            impl_iqr_ms=iqr,
            impl_event_median_ms=statistics.median(self.runner_ms),
            speedup=speedup(self.result["eager_median_ms"], median),
            samples_ms=samples,
        )

    def speed_of_light(self) -> None:
        from problems.sol import hardware_for, sol_estimate

        hardware = hardware_for(str(self.result.get("device") or "")) if self.cuda else None
        if hardware is None:
            return
        sol_ms = sol_estimate(self.problem.cost(self.scale), hardware).seconds * 1e3
        self.result.update(sol_ms=sol_ms, sol_hardware=hardware.name)
        impl = self.result.get("impl_median_ms")
        if impl is not None and impl < sol_ms:
            self.flag("sol.faster_than_sol")

    def flag(self, name: str) -> None:
        flags = self.result.setdefault("flags", [])
        if name not in flags:
            flags.append(name)

    def audit_kernels(self) -> None:
        from engine.grading.kernel_audit import cross_check

        mode = self.job.get("kernel_audit", "report")
        if mode == "off":
            return
        assert self.runner is not None
        self.phase("kernel_audit")
        start = _monotonic()
        reply, _ = self.runner.request({"op": "audit"}, self.deadline)
        if reply.get("op") != "audited":
            raise Rejected("runner.protocol", "the runner answered the audit with junk")
        observed = reply.get("observed")
        compiled = [str(n)[:200] for n in (reply.get("compiled") or [])][:64]
        observed_names = (
            [str(n)[:200] for n in observed][:256] if isinstance(observed, list) else None
        )
        launches = _int(reply.get("launches"))
        audit = cross_check(compiled, observed_names, bool(reply.get("control")), launches)
        audit["mode"] = mode
        if isinstance(reply.get("threads"), int):  # the profiler's own threads are ours
            self.base_threads = max(self.base_threads or 0, reply["threads"])
        self.result["kernel_audit"] = audit
        if audit["status"] == "unconfirmed":
            self.flag("kernel_audit.unconfirmed")
        self.timed("kernel_audit", start)
        if audit["status"] == "unconfirmed" and mode == "enforce":
            raise Rejected(
                "dsl.launch_unconfirmed",
                f"{audit['hooked_launches']} {self.job['dsl']} launches were counted but the "
                "profiler saw none of the kernels the DSL compiled in this process",
            )

    def bypass_test(self) -> str:
        """The same call message with the launch hooks skipping: outputs must stop passing."""
        assert self.runner is not None
        seed = self.job["seeds"]["bypass"]
        self.runner.switch[0] = 1
        try:
            out, pristine = self.call(seed)
        except Rejected as exc:
            if exc.code in ("crash", "correctness.structure", "correctness.nan", "dsl.no_launch"):
                return "outputs_failed"
            raise
        finally:
            self.runner.switch[0] = 0
        return "still_valid" if self.check_anchor(out, pristine, "bypass", 0) else "outputs_failed"

    # -- the whole evaluation ---------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from engine.grading.wire import Transport

        torch = self.torch
        seeds = self.job["seeds"]
        result = self.result
        reference = self.reference_runner()
        try:
            result["device"] = torch.cuda.get_device_name() if self.cuda else "cpu (preview)"
            if not self.cuda:
                torch.set_num_threads(1)
            self.phase("eager")
            start = _monotonic()
            expected = self.run_eager(reference)
            self.timed("eager", start)
        finally:
            reference.close()
        self.phase("eager_done")
        self.deadline = _monotonic() + float(self.job.get("timeout_s", 600.0))

        runner = self.start_runner()
        self.transport = Transport(self.cuda, lambda m: runner.request(m, self.deadline)[0])
        self.result["clock"] = self.calibrate(runner, self.transport)
        self.base_threads = runner.ready.get("threads")
        self.phase("import")
        start = _monotonic()
        self.load(runner)
        self.timed("import", start)

        self.phase("correctness")
        start = _monotonic()
        for i, seed in enumerate(seeds["correctness"]):
            out, pristine = self.call(seed)
            if not self.check_anchor(out, pristine, "correctness", i):
                raise self.rejection_for("correctness")
        self.timed("correctness", start)

        self.phase("warmup")
        start = _monotonic()
        for i, seed in enumerate(seeds["warmup"]):
            out, _ = self.call(seed)
            self.check_sampled(out, expected[seed], "warmup", i)
        self.timed("warmup", start)

        self.phase("timing")
        start = _monotonic()
        rechecks = set(self.job.get("recheck", []))
        for i, seed in enumerate(seeds["timed"]):
            out, pristine = self.call(seed, timed=True)
            self.check_sampled(out, expected[seed], "timed", i)
            if i in rechecks and not self.check_anchor(out, pristine, "recheck", i):
                raise self.rejection_for("recheck")
        self.timed("timing", start)
        self.settle_timing()

        self.speed_of_light()
        if not self.job.get("dsl_checks"):
            result["bypass"] = "skipped: no GPU"
            result["dsl_launches_per_call"] = None
        else:
            result["dsl_launches_per_call"] = sum(self.launches) / max(1, len(self.launches))
            self.audit_kernels()
            self.phase("bypass")
            start = _monotonic()
            result["bypass"] = self.bypass_test()
            self.timed("bypass", start)
            if result["bypass"] == "still_valid":
                raise Rejected(
                    "dsl.bypass_still_valid",
                    "outputs still pass with the DSL "
                    "launches skipped: the DSL kernels do not produce the outputs",
                )
        if self.cuda:
            result["judge_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["verdict"] = "pass" if self.cuda else "preview"
        result["reason"] = None
        result["message"] = (
            "scored pass"
            if self.cuda
            else "CPU PREVIEW: every check that can run without a GPU passed (not a scored pass)"
        )
        return result

    def reference_runner(self) -> RunnerProcess:
        """The prepared reference runner armed with this problem, or a freshly forked one."""
        prepared, self.prepared = self.prepared, None
        self.result["judge_started_ahead"] = prepared is not None and prepared.device == self.device
        if prepared is None or prepared.device != self.device:
            if prepared is not None:
                prepared.reference.close()
            return RunnerProcess.fork_reference(self.device, self.problem.reference)
        message = {"op": "reference", "problem_id": self.job.get("problem_id")}
        if self.job.get("problem_path"):
            message["problem_path"] = self.job["problem_path"]
        reply, _ = prepared.reference.request(message, _monotonic() + 120)
        if reply.get("op") != "referenced":
            prepared.reference.close()
            raise InfrastructureError(f"the reference runner did not load the problem: {reply}")
        return prepared.reference

    def close(self) -> None:
        if self.prepared is not None:
            self.prepared.reference.close()
        if self.transport is not None:
            with contextlib.suppress(Exception):  # a broken CUDA context must not hide the verdict
                self.transport.close()
        for proc in (self.runner, self.spare):
            if proc is not None:
                tail = proc.log_tail()
                if tail:
                    sys.stderr.write("--- the runner's output (untrusted) ---\n" + tail + "\n")
                    sys.stderr.flush()
                proc.close()


class InfrastructureError(Exception):
    """Something of ours failed (not the submission): the verdict is ``error``."""


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


def scored_ms(judge_ms: float, clock: dict[str, float]) -> float:
    """A call's time on the judge's clock less the calibrated no-op round trip (≥ 1 µs)."""
    return max(judge_ms - clock["round_trip_median_ms"], 1e-3)


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def trimmed_traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def run_job(
    job: dict[str, Any],
    result_fd: int,
    spare: RunnerProcess | None = None,
    prepared: Prepared | None = None,
) -> None:
    """Judge ``job`` and send the result on ``result_fd``."""
    channel = Channel(result_fd, job["nonce"])
    judge: Judge | None = None
    try:
        judge = Judge(job, channel, spare, prepared)
        spare = prepared = None
        result = judge.run()
    except Rejected as exc:
        result = judge.result if judge is not None else {}
        result.update(verdict="fail", reason=exc.code, message=str(exc))
    except RunnerTimeout:
        result = judge.result if judge is not None else {}
        result.update(verdict="fail", reason="timeout", message="time limit exceeded")
    except RunnerMemory:
        result = judge.result if judge is not None else {}
        result.update(
            verdict="fail", reason="memory", message="killed for exceeding the memory limit"
        )
    except RunnerDied as exc:
        result = judge.result if judge is not None else {}
        ran = judge is not None and judge.result.get("import_ok") is not None
        result.update(
            verdict="fail" if ran else "error",
            reason="crash",
            message=f"the runner died: {exc}",
        )
    except InfrastructureError as exc:
        result = judge.result if judge is not None else {}
        result.update(verdict="error", reason="crash", message=str(exc))
    except BaseException as exc:  # noqa: BLE001 - our own failure: an error, never a pass
        result = judge.result if judge is not None else {}
        result.update(
            verdict="error",
            reason="crash",
            message=f"judge error: {type(exc).__name__}: {exc}",
            error=trimmed_traceback(exc),
        )
    finally:
        if judge is not None:
            judge.close()
        if spare is not None:
            spare.close()
        if prepared is not None:
            prepared.reference.close()
    channel.send("result", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.judge")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.set_inheritable(args.result_fd, False)
    run_job(job, args.result_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
