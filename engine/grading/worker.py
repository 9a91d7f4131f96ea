"""The grading child: one evaluation of one submission, in a fresh process.

Run as ``python -m engine.grading.worker --result-fd N`` with the job (JSON) on stdin, or
entered through :func:`run_job` in a child forked from a warm parent. Results go back over
the inherited ``N`` as nonce-tagged JSON lines; stdout and stderr are only a log, so lines a
submission prints there are never read as results.

Order: eager reference timing (before the submission exists in the process), then guards and
DSL hooks, import, correctness draws, warmup, timed calls (with rechecks), DSL launch and
bypass checks. Only torch, numpy, the DSLs and this repository's ``problems`` and
``engine.grading`` modules are imported here.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_write = os.write  # bound before any submission code runs
_monotonic = time.monotonic

MAX_ERROR_CHARS = 2000


class Channel:
    """Nonce-tagged JSON lines on a private file descriptor."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._fd = fd
        self._nonce = nonce

    def send(self, kind: str, data: Any) -> None:
        line = json.dumps({"nonce": self._nonce, "kind": kind, "data": data}, default=str)
        payload = (line + "\n").encode()
        while payload:
            written = _write(self._fd, payload)
            payload = payload[written:]


class Rejected(Exception):
    """The submission failed a check; ``code`` is the stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def trimmed_traceback(exc: BaseException, filename: str | None = None) -> str:
    """The exception with only the submission's frames (or the last ones), capped in size."""
    frames = traceback.extract_tb(exc.__traceback__)
    if filename:
        own = [f for f in frames if f.filename == filename]
        frames = traceback.StackSummary.from_list(own or frames[-3:])
    else:
        frames = traceback.StackSummary.from_list(frames[-3:])
    text = "".join(frames.format()) + "".join(traceback.format_exception_only(type(exc), exc))
    if filename:
        text = text.replace(filename, "submission.py")
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def is_memory_error(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return (
        type(exc).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in text
        or ("out of memory" in text)
    )


def _vm_size_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def limit_address_space(extra_mb: int) -> None:
    """Cap virtual memory at the current size plus ``extra_mb`` (CPU preview only)."""
    import resource

    limit = _vm_size_bytes() + extra_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class Evaluation:
    """One evaluation, driven by the job dictionary the parent sent."""

    def __init__(self, job: dict[str, Any], channel: Channel) -> None:
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
        self.counter: Any = None
        self.guards: Any = None
        self.launches: list[int] = []
        self.calls = 0
        self.filename: str | None = None
        self.result: dict[str, Any] = {
            "import_ok": None,
            "findings": [],
            "draws": self.draws,
            "timings_s": self.timings,
            "scale": self.scale,
        }

    # -- helpers ----------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.channel.send("phase", name)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def inputs(self, seed: int) -> list[Any]:
        return self.problem.make_inputs(seed, self.device, self.scale)

    def timed(self, name: str, start: float) -> None:
        self.timings[name] = round(self.timings.get(name, 0.0) + _monotonic() - start, 4)

    # -- phases -----------------------------------------------------------------------------
    def time_eager(self, timer: Any) -> list[float]:
        from problems.compare import reference_numerics

        seeds = self.job["seeds"]
        samples: list[float] = []
        with reference_numerics():
            for seed in seeds["warmup"]:
                timer.time_call(self.problem.reference, self.inputs(seed))
            for seed in seeds["timed"]:
                _, ms = timer.time_call(self.problem.reference, self.inputs(seed))
                samples.append(ms)
        return samples

    def import_submission(self) -> Callable[..., Any]:
        workdir = self.job.get("workdir") or tempfile.mkdtemp(prefix="mkb-sub-")
        path = os.path.join(workdir, "submission.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.job["source"])
        self.filename = path
        spec = importlib.util.spec_from_file_location("mkb_submission", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["mkb_submission"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - SystemExit included
            code = "memory" if is_memory_error(exc) else "import.failed"
            self.result["import_error"] = trimmed_traceback(exc, path)
            raise Rejected(code, f"import failed: {type(exc).__name__}: {exc}") from exc
        solve = getattr(module, "solve", None)
        if not callable(solve):
            self.result["import_error"] = "the module defines no callable solve(*inputs)"
            raise Rejected("import.failed", "the module defines no callable solve(*inputs)")
        return solve  # type: ignore[no-any-return]

    def call(self, solve: Callable[..., Any], seed: int, timer: Any = None) -> tuple:
        """Run one call with guards; returns (outputs, pristine inputs, ms or None)."""
        from problems.compare import clone_inputs

        inputs = self.inputs(seed)
        pristine = clone_inputs(inputs)
        native = self.guards.native_threads() if self.calls > 0 else None
        before = self.counter.count if self.counter is not None else 0
        ms = None
        try:
            if timer is not None:
                out, ms = timer.time_call(solve, inputs)
            else:
                out = solve(*inputs)
                self.sync()
        except Rejected:
            raise
        except BaseException as exc:  # noqa: BLE001
            if is_memory_error(exc):
                raise Rejected("memory", f"out of memory in solve(): {exc}") from exc
            self.result["error"] = trimmed_traceback(exc, self.filename)
            raise Rejected("crash", f"solve() raised {type(exc).__name__}: {exc}") from exc
        self.calls += 1
        self.check_guards(native)
        if self.counter is not None:
            launches = self.counter.count - before
            self.launches.append(launches)
            if launches < 1:
                raise Rejected(
                    "dsl.no_launch", f"call {self.calls} launched no {self.job['dsl']} kernel"
                )
        self.check_aliasing(out, inputs)
        self.check_inputs(inputs, pristine)
        return out, pristine, ms

    def check_guards(self, native: int | None = None) -> None:
        from engine.grading.guards import GuardViolation

        try:
            self.guards.check_all(native)
        except GuardViolation as exc:
            raise Rejected(exc.code, str(exc)) from exc
        if self.counter is not None and not self.counter.intact():
            raise Rejected("guard.timer_tampered", "the DSL launch hooks were removed")

    def check_inputs(self, inputs: Sequence[Any], pristine: Sequence[Any]) -> None:
        from problems.compare import leaves, structure_mismatch

        torch = self.torch
        for index, (now, before) in enumerate(zip(inputs, pristine)):
            if index in self.inplace.values():
                continue
            name = self.problem.inputs[index]
            if structure_mismatch(now, before, name):
                raise Rejected("correctness.input_mutated", f"input {name} was changed")
            for a, b in zip(leaves(now), leaves(before)):
                if isinstance(a, torch.Tensor):
                    same = torch.equal(a, b)
                    if not same and a.is_floating_point():
                        same = bool(((a == b) | (a.isnan() & b.isnan())).all())
                    if not same:
                        raise Rejected("correctness.input_mutated", f"input {name} was modified")

    def check_aliasing(self, out: Any, inputs: Sequence[Any]) -> None:
        from problems.compare import leaves

        torch = self.torch

        def span(t: Any) -> tuple[int, int] | None:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                return None
            storage = t.untyped_storage()
            return storage.data_ptr(), storage.data_ptr() + storage.nbytes()

        input_spans = [(i, span(x)) for i, v in enumerate(inputs) for x in leaves(v)]
        out_leaves = leaves(out)
        for k, j in self.inplace.items():
            leaf = out_leaves[k] if k < len(out_leaves) else None
            own, target = span(leaf), span(inputs[j])
            if (
                own is not None
                and target is not None
                and not (own[0] < target[1] and target[0] < own[1])
            ):
                raise Rejected(
                    "correctness.structure",
                    f"output {self.problem.outputs[k]} must be input {self.problem.inputs[j]} "
                    "updated in place (declared in-place output)",
                )
        for k, leaf in enumerate(out_leaves):
            s = span(leaf)
            if s is None or s[0] == s[1]:
                continue
            for i, other in input_spans:
                if other is None or other[0] == other[1]:
                    continue
                if self.inplace.get(k) == i:
                    continue
                if s[0] < other[1] and other[0] < s[1]:
                    raise Rejected(
                        "correctness.aliasing",
                        f"output {k} shares memory with input {self.problem.inputs[i]}",
                    )

    def check_outputs(self, out: Any, pristine: Sequence[Any], kind: str, index: int) -> bool:
        """Compare against the anchored reference; records the draw; False when it fails."""
        from problems.compare import check_outputs, clone_inputs, promote, reference_numerics

        self.check_guards()  # the reference must run in an untouched torch
        gc_was_enabled = gc.isenabled()
        gc.disable()  # no finalizer of the submission's garbage may run inside the reference
        try:
            with reference_numerics():
                v = self.problem.reference(*clone_inputs(pristine))
                z = self.problem.reference(*promote(clone_inputs(pristine)))
        finally:
            if gc_was_enabled:
                gc.enable()
        self.check_guards()
        ok, structure, leaf_checks = check_outputs(out, v, z)
        names = self.problem.outputs
        record = {
            "kind": kind,
            "index": index,
            "passed": ok,
            "structure": structure,
            "outputs": [
                {**c.as_dict(), "name": names[c.index] if c.index < len(names) else str(c.index)}
                for c in leaf_checks
            ],
        }
        self.draws.append(record)
        return ok

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

    def bypass_test(self, solve: Callable[..., Any]) -> str:
        """Skip DSL launches, NaN-fill fresh memory: the outputs must stop passing."""
        from problems.compare import clone_inputs

        torch = self.torch
        det = torch.utils.deterministic
        saved = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            det.fill_uninitialized_memory,
        )
        inputs = self.inputs(self.job["seeds"]["bypass"])
        pristine = clone_inputs(inputs)
        self.counter.bypass = True
        torch.use_deterministic_algorithms(True, warn_only=True)
        det.fill_uninitialized_memory = True
        try:
            out = solve(*inputs)
            self.sync()
        except Exception:  # noqa: BLE001 - failing without the DSL is the good outcome
            return "outputs_failed"
        finally:
            self.counter.bypass = False
            torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
            det.fill_uninitialized_memory = saved[2]
        still = self.check_outputs(out, pristine, "bypass", 0)
        return "still_valid" if still else "outputs_failed"

    def flag(self, name: str) -> None:
        """Mark the result for exclusion rules in the analysis (never changes the verdict)."""
        flags = self.result.setdefault("flags", [])
        if name not in flags:
            flags.append(name)

    def speed_of_light(self) -> None:
        """The problem's SOL on this GPU (documented table); faster than SOL is impossible."""
        from problems.sol import hardware_for, sol_estimate

        hardware = hardware_for(str(self.result.get("device") or "")) if self.cuda else None
        if hardware is None:
            return
        sol_ms = sol_estimate(self.problem.cost(self.scale), hardware).seconds * 1e3
        self.result.update(sol_ms=sol_ms, sol_hardware=hardware.name)
        impl = self.result.get("impl_median_ms")
        if impl is not None and impl < sol_ms:
            self.flag("sol.faster_than_sol")

    def audit_kernels(self, solve: Callable[..., Any]) -> None:
        """Profile one more call: the hooked launches must have run compiled DSL kernels."""
        from engine.grading.kernel_audit import cross_check, profiled_kernel_names

        mode = self.job.get("kernel_audit", "report")
        if mode == "off":
            return
        self.phase("kernel_audit")
        start = _monotonic()
        before = self.counter.count
        seen = None
        if self.cuda:
            seed = self.job["seeds"]["warmup"][0]
            seen = profiled_kernel_names(lambda: self.call(solve, seed))
        observed, control_seen = seen if seen is not None else (None, False)
        audit = cross_check(
            self.counter.kernel_names, observed, control_seen, self.counter.count - before
        )
        audit["mode"] = mode
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

    # -- the whole evaluation ---------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from engine.grading import dsl_hooks
        from engine.grading.guards import Guards
        from engine.grading.timing import CpuTimer, CudaTimer, speedup, summarize

        torch = self.torch
        seeds = self.job["seeds"]
        result = self.result
        timer: Any = CudaTimer() if self.cuda else CpuTimer()
        result["timer"] = timer.kind
        result["device"] = torch.cuda.get_device_name() if self.cuda else "cpu (preview)"
        if not self.cuda:
            torch.set_num_threads(1)  # preview timing: one thread for eager and submission alike

        self.phase("eager")
        # torch._dynamo re-wraps torch functions (manual_seed, ...) when something imports it
        # lazily (use_deterministic_algorithms does); import it before the guard snapshot.
        import torch._dynamo  # noqa: F401

        start = _monotonic()
        eager = self.time_eager(timer)
        result["eager_median_ms"], result["eager_iqr_ms"] = summarize(eager)
        self.timed("eager", start)
        self.sync()
        self.phase("eager_done")

        if self.job.get("dsl_checks", self.cuda):
            self.counter = dsl_hooks.install(self.job["dsl"])
            if self.counter is None:
                result.update(
                    verdict="error",
                    reason="crash",
                    message=f"the {self.job['dsl']} DSL is not importable on this host",
                )
                return result
        self.guards = Guards([self.problem.module], timer.bound() if self.cuda else None)
        limit = self.job.get("memory_limit_mb")
        if limit and not self.cuda:
            limit_address_space(int(limit))

        self.phase("import")
        start = _monotonic()
        solve = self.import_submission()
        result["import_ok"] = True
        self.check_guards()
        self.timed("import", start)

        self.phase("correctness")
        start = _monotonic()
        for i, seed in enumerate(seeds["correctness"]):
            out, pristine, _ = self.call(solve, seed)
            if not self.check_outputs(out, pristine, "correctness", i):
                raise self.rejection_for("correctness")
        self.timed("correctness", start)

        self.phase("warmup")
        start = _monotonic()
        for seed in seeds["warmup"]:
            self.call(solve, seed)
        self.timed("warmup", start)

        self.phase("timing")
        start = _monotonic()
        samples: list[float] = []
        rechecks = set(self.job.get("recheck", []))
        for i, seed in enumerate(seeds["timed"]):
            out, pristine, ms = self.call(solve, seed, timer)
            samples.append(ms)
            if i in rechecks and not self.check_outputs(out, pristine, "recheck", i):
                raise self.rejection_for("recheck")
        self.timed("timing", start)
        impl_median, impl_iqr = summarize(samples)
        result.update(
            impl_median_ms=impl_median,
            impl_iqr_ms=impl_iqr,
            speedup=speedup(result["eager_median_ms"], impl_median),
            samples_ms=samples,
        )

        self.speed_of_light()
        if self.counter is None:
            result["bypass"] = "skipped: no GPU"
            result["dsl_launches_per_call"] = None
        else:
            result["dsl_launches_per_call"] = sum(self.launches) / max(1, len(self.launches))
            self.audit_kernels(solve)
            self.phase("bypass")
            start = _monotonic()
            result["bypass"] = self.bypass_test(solve)
            self.timed("bypass", start)
            if result["bypass"] == "still_valid":
                raise Rejected(
                    "dsl.bypass_still_valid",
                    "outputs still pass with the DSL "
                    "launches skipped: the DSL kernels do not produce the outputs",
                )
        result["verdict"] = "pass" if self.cuda else "preview"
        result["reason"] = None
        result["message"] = (
            "scored pass"
            if self.cuda
            else "CPU PREVIEW: every check that can run without a GPU passed (not a scored pass)"
        )
        return result


def run_job(job: dict[str, Any], result_fd: int) -> None:
    """Evaluate ``job`` and send the result on ``result_fd`` (the whole child's work)."""
    channel = Channel(result_fd, job["nonce"])
    evaluation: Evaluation | None = None
    try:
        evaluation = Evaluation(job, channel)
        result = evaluation.run()
    except Rejected as exc:
        result = evaluation.result if evaluation is not None else {}
        result.update(verdict="fail", reason=exc.code, message=str(exc))
    except BaseException as exc:  # noqa: BLE001 - report anything as a crash
        result = evaluation.result if evaluation is not None else {}
        code = "memory" if is_memory_error(exc) else "crash"
        result.update(
            verdict="fail" if evaluation and evaluation.calls else "error",
            reason=code,
            message=f"{type(exc).__name__}: {exc}",
            error=trimmed_traceback(exc),
        )
        if code == "memory":
            result["verdict"] = "fail"
    channel.send("result", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.grading.worker")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the job (seeds, nonce) is gone from stdin before any import
    os.close(devnull)
    os.set_inheritable(args.result_fd, False)
    run_job(job, args.result_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
