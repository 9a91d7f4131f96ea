"""Can CUPTI's first-use cost (the first torch profiler region) overlap with a runner's imports?

    PYTHONPATH=. python3 benchmarks/cupti_start_gpu.py --out cupti.jsonl
    PYTHONPATH=. python3 benchmarks/cupti_start_gpu.py --variants baseline,cupti_ctypes_thread \
        --repeats 3 --timeout 180

In a fresh process on an H200 host the first ``torch.profiler.profile`` region with CUDA
activity took 4.5 s (the second none), after ``import torch`` (3.5 s) and the CUDA context
(0.4 s). This script asks whether that first-use cost is CUPTI's own start (so that starting
CUPTI early through ctypes, in a thread while torch and the DSLs import, leaves torch's
profiler cheap), or something in torch's profiler, and whether the profiler start overlaps with
the DSL imports when it runs in a thread.

Each variant runs in a fresh child process (``python -c``, which loads this file and calls
``child_main``), ``--repeats`` times, interleaved. Variants:

- ``baseline``: import torch; CUDA context; first profiler region around ``x.add_(1)``
  (``profiler_1``, split into ``.enter``, ``.kernel`` and ``.exit``); a second (``profiler_2``).
- ``cupti_ctypes_first``: before torch, load libcupti and libcuda with ctypes, ``cuInit``,
  register activity buffer callbacks, enable and disable CONCURRENT_KERNEL activity and flush
  (``cupti_ctypes``, with sub-steps); then the baseline steps.
- ``cupti_ctypes_thread``: the same CUPTI start in a thread while the main thread imports
  torch; join (``join_wait``); then the baseline steps.
- ``torch_profiler_thread``: import torch; a thread makes the CUDA context and opens the first
  profiler region while the main thread imports cutlass, cutlass.cute, tvm and tvm_ffi; join;
  then ``profiler_2`` on the main thread.
- ``dsl_serial``: the serial reference for ``torch_profiler_thread``: import torch and the DSLs,
  CUDA context, ``profiler_1``, ``profiler_2``.
- ``env_lazy``: baseline with ``CUDA_MODULE_LOADING=LAZY`` and ``KINETO_LOG_LEVEL=5``.

Every variant reports ``wall_to_profiler_1``: seconds from the child's start (after the
interpreter is up) until the first profiler region is done (and, in the threaded variants, the
thread joined). One JSON line per run on stdout (and appended to ``--out``):
``{"variant", "repeat", "steps", "total_s", "error"?, "info", "rc"}``, where ``total_s`` is the
child process's wall time as seen by this script and ``info`` holds the libcupti path used,
CUPTI and driver return codes, the libcupti files mapped in the process and the environment.

Without a GPU (no ``/dev/nvidiactl`` nor ``/proc/driver/nvidia/version``) every child stops at
once with ``"error": "no CUDA: ..."``; ``--no-precheck`` skips that check. A median summary
goes to stderr. Uses only the standard library here; torch is imported in the children only.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

VARIANTS = (
    "baseline",
    "cupti_ctypes_first",
    "cupti_ctypes_thread",
    "torch_profiler_thread",
    "dsl_serial",
    "env_lazy",
)
VARIANT_ENV = {"env_lazy": {"CUDA_MODULE_LOADING": "LAZY", "KINETO_LOG_LEVEL": "5"}}
RECORDED_ENV = (
    "CUDA_MODULE_LOADING",
    "KINETO_LOG_LEVEL",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)
DSL_MODULES = ("cutlass", "cutlass.cute", "tvm", "tvm_ffi")
NO_PRECHECK_ENV = "CUPTI_BENCH_NO_PRECHECK"

CUPTI_SUCCESS = 0
CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10
CUPTI_BUFFER_SIZE = 1 << 20

# The child: load this file as a module (not through sys.path) and run one variant.
CHILD_CODE = (
    "import importlib.util\n"
    "spec = importlib.util.spec_from_file_location('_cupti_start_child', {path!r})\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod.child_main({variant!r})\n"
)


# --------------------------------------------------------------------------- child side


class NoCuda(Exception):
    """No GPU or driver: the variant stops here."""


class CuptiFailure(Exception):
    """The ctypes CUPTI start failed; the variant goes on with the baseline steps."""


class Run:
    """Step timings, facts and errors of one child run."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.steps: dict[str, float] = {}
        self.info: dict[str, Any] = {}
        self.errors: list[str] = []

    def step(self, name: str, seconds: float) -> None:
        self.steps[name] = round(seconds, 4)
        # Progress on stderr, so that a child killed by the timeout still tells how far it got.
        print(f"[step] {name} {seconds:.4f}", file=sys.stderr, flush=True)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.step(name, time.perf_counter() - t0)

    def since_start(self, name: str) -> None:
        self.step(name, time.perf_counter() - self.start)

    def emit(self) -> None:
        payload = {"steps": self.steps, "info": self.info, "errors": self.errors}
        sys.stdout.write("\n" + json.dumps(payload, default=str) + "\n")
        sys.stdout.flush()


def cuda_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def import_torch(run: Run) -> Any:
    t0 = time.perf_counter()
    try:
        import torch
    except ImportError as exc:
        raise NoCuda(f"no CUDA: torch not importable: {exc}") from exc
    run.step("import_torch", time.perf_counter() - t0)
    run.info["torch"] = torch.__version__
    run.info["torch_cuda"] = torch.version.cuda
    return torch


def cuda_context(run: Run, torch: Any, name: str = "cuda_context") -> Any:
    t0 = time.perf_counter()
    try:
        x = torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    except Exception as exc:
        raise NoCuda(f"no CUDA: {type(exc).__name__}: {exc}") from exc
    run.step(name, time.perf_counter() - t0)
    return x


def profiler_region(run: Run, torch: Any, x: Any, name: str) -> Any:
    """One CUDA-activity profiler region around a tiny kernel, split into its parts."""
    t0 = time.perf_counter()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t_in = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        t_kernel = time.perf_counter()
    t_out = time.perf_counter()
    run.step(f"{name}.enter", t_in - t0)
    run.step(f"{name}.kernel", t_kernel - t_in)
    run.step(f"{name}.exit", t_out - t_kernel)
    run.step(name, t_out - t0)
    return prof


def record_profiles(run: Run, profiles: dict[str, Any]) -> None:
    """After all timing: how many CUDA events each region saw (0 would mean CUPTI broke)."""
    for name, prof in profiles.items():
        try:
            events = prof.events()
            run.info[f"{name}.cuda_events"] = sum(
                1 for e in events if "CUDA" in str(getattr(e, "device_type", ""))
            )
            run.info[f"{name}.events"] = len(events)
        except Exception as exc:
            run.info[f"{name}.events_error"] = f"{type(exc).__name__}: {exc}"[:300]


def mapped_libraries(*needles: str) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {n: set() for n in needles}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                for n in needles:
                    if n in os.path.basename(path):
                        found[n].add(path)
    except OSError:
        pass
    return {n: sorted(paths) for n, paths in found.items()}


def import_dsls(run: Run, should_stop: Callable[[], bool] | None = None) -> None:
    for module in DSL_MODULES:
        if should_stop is not None and should_stop():
            run.info["dsl_imports_skipped_from"] = module
            break
        t0 = time.perf_counter()
        try:
            importlib.import_module(module)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"[:300]
            run.info.setdefault("dsl_import_failures", {})[module] = message
            run.errors.append(f"import {module} failed: {message}")
        run.step(f"import_{module}", time.perf_counter() - t0)


# ------------------------------------------------------------ CUPTI through ctypes


def torch_cuda_major() -> str | None:
    """torch's CUDA major version read from torch/version.py, without importing torch."""
    for entry in sys.path:
        version_py = os.path.join(entry or ".", "torch", "version.py")
        if os.path.isfile(version_py):
            with open(version_py) as f:
                match = re.search(r"^cuda\b[^=\n]*=\s*['\"](\d+)", f.read(), re.MULTILINE)
            return match.group(1) if match else None
    return None


def cupti_candidates(run: Run) -> list[str]:
    """libcupti files: torch's pip neighbours first (its CUDA major first), then ldconfig,
    then CUDA_HOME/extras/CUPTI/lib64; deduplicated by real path."""
    major = torch_cuda_major()
    run.info["torch_cuda_major"] = major
    site: list[str] = []
    for entry in sys.path:
        base = entry or "."
        if os.path.isdir(os.path.join(base, "nvidia")):
            site += glob.glob(os.path.join(base, "nvidia", "**", "libcupti.so*"), recursive=True)
        site += glob.glob(os.path.join(base, "torch", "lib", "libcupti.so*"))
    wanted = f"libcupti.so.{major}" if major else "libcupti.so."
    site.sort(key=lambda p: (not os.path.basename(p).startswith(wanted), len(p), p))

    ldconfig: list[str] = []
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            if "libcupti.so" in line and "=>" in line:
                ldconfig.append(line.split("=>", 1)[1].strip())
        break

    cuda_home: list[str] = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cuda_home += sorted(
                glob.glob(os.path.join(root, "extras", "CUPTI", "lib64", "libcupti.so*"))
            )

    seen: set[str] = set()
    result: list[str] = []
    for path in site + ldconfig + cuda_home:
        real = os.path.realpath(path)
        if os.path.isfile(real) and real not in seen:
            seen.add(real)
            result.append(path)
    run.info["cupti_candidates"] = result[:12]
    return result


_REQUEST_T = ctypes.CFUNCTYPE(
    None,
    ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
)
_COMPLETE_T = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.c_uint32,
    ctypes.POINTER(ctypes.c_uint8),
    ctypes.c_size_t,
    ctypes.c_size_t,
)
_CALLBACKS: list[Any] = []  # the ctypes callbacks, alive as long as CUPTI may call them
_BUFFERS: list[Any] = []  # every buffer handed to CUPTI
_COMPLETED: list[int] = []  # validSize of each buffer CUPTI gave back


def _buffer_requested(buffer_pp: Any, size_p: Any, max_records_p: Any) -> None:
    raw = ctypes.create_string_buffer(CUPTI_BUFFER_SIZE + 8)
    _BUFFERS.append(raw)
    aligned = (ctypes.addressof(raw) + 7) & ~7
    buffer_pp[0] = ctypes.cast(aligned, ctypes.POINTER(ctypes.c_uint8))
    size_p[0] = CUPTI_BUFFER_SIZE
    max_records_p[0] = 0


def _buffer_completed(ctx: Any, stream_id: int, buffer: Any, size: int, valid_size: int) -> None:
    _COMPLETED.append(valid_size)


def cupti_init(run: Run, prefix: str) -> None:
    """Start CUPTI through ctypes; failures go to the run's errors, never raise."""
    t0 = time.perf_counter()
    try:
        _cupti_init(run, prefix)
    except CuptiFailure as exc:
        run.errors.append(f"{prefix}: {exc}")
    except Exception as exc:
        run.errors.append(f"{prefix}: {type(exc).__name__}: {exc}")
    finally:
        run.step(prefix, time.perf_counter() - t0)
        run.info[f"{prefix}.buffers_requested"] = len(_BUFFERS)
        run.info[f"{prefix}.buffers_completed"] = len(_COMPLETED)


def _cupti_init(run: Run, prefix: str) -> None:
    codes: dict[str, int] = {}
    run.info[f"{prefix}.rc"] = codes

    with run.timed(f"{prefix}.locate"):
        candidates = cupti_candidates(run)
    if not candidates:
        raise CuptiFailure("libcupti not found (sys.path nvidia/**, ldconfig -p, CUDA_HOME)")

    cupti = None
    load_errors: list[str] = []
    with run.timed(f"{prefix}.load"):
        for path in candidates:
            try:
                cupti = ctypes.CDLL(path)
            except OSError as exc:
                load_errors.append(f"{path}: {exc}")
                continue
            run.info["cupti_path"] = path
            break
    if load_errors:
        run.info[f"{prefix}.load_errors"] = load_errors[:5]
    if cupti is None:
        raise CuptiFailure(f"no libcupti loadable: {load_errors[:3]}")

    with run.timed(f"{prefix}.cuInit"):
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CuptiFailure(f"no CUDA: libcuda.so.1 not loadable: {exc}") from exc
        cuda.cuInit.argtypes = [ctypes.c_uint]
        cuda.cuInit.restype = ctypes.c_int
        codes["cuInit"] = cuda.cuInit(0)
    if codes["cuInit"] != 0:
        raise CuptiFailure(f"no CUDA: cuInit returned CUresult {codes['cuInit']}")
    driver = ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(driver)) == 0:
        run.info["cuda_driver_version"] = driver.value

    cupti.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    cupti.cuptiGetResultString.restype = ctypes.c_int

    def check(name: str, result: int) -> None:
        codes[name] = result
        if result != CUPTI_SUCCESS:
            text = ctypes.c_char_p()
            cupti.cuptiGetResultString(result, ctypes.byref(text))
            message = (text.value or b"").decode(errors="replace")
            raise CuptiFailure(f"{name} returned CUptiResult {result} ({message})")

    version = ctypes.c_uint32()
    cupti.cuptiGetVersion.argtypes = [ctypes.POINTER(ctypes.c_uint32)]
    cupti.cuptiGetVersion.restype = ctypes.c_int
    if cupti.cuptiGetVersion(ctypes.byref(version)) == CUPTI_SUCCESS:
        run.info["cupti_api_version"] = version.value

    request, complete = _REQUEST_T(_buffer_requested), _COMPLETE_T(_buffer_completed)
    _CALLBACKS.extend((request, complete))
    cupti.cuptiActivityRegisterCallbacks.argtypes = [_REQUEST_T, _COMPLETE_T]
    cupti.cuptiActivityRegisterCallbacks.restype = ctypes.c_int
    for fn in (cupti.cuptiActivityEnable, cupti.cuptiActivityDisable):
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
    cupti.cuptiActivityFlushAll.argtypes = [ctypes.c_uint32]
    cupti.cuptiActivityFlushAll.restype = ctypes.c_int

    kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
    with run.timed(f"{prefix}.register"):
        check(
            "cuptiActivityRegisterCallbacks",
            cupti.cuptiActivityRegisterCallbacks(request, complete),
        )
    with run.timed(f"{prefix}.enable"):
        check("cuptiActivityEnable", cupti.cuptiActivityEnable(kind))
    with run.timed(f"{prefix}.disable"):
        check("cuptiActivityDisable", cupti.cuptiActivityDisable(kind))
    with run.timed(f"{prefix}.flush"):
        check("cuptiActivityFlushAll", cupti.cuptiActivityFlushAll(0))


# -------------------------------------------------------------------------- variants


def baseline_steps(run: Run, torch: Any) -> None:
    x = cuda_context(run, torch)
    p1 = profiler_region(run, torch, x, "profiler_1")
    run.since_start("wall_to_profiler_1")
    p2 = profiler_region(run, torch, x, "profiler_2")
    record_profiles(run, {"profiler_1": p1, "profiler_2": p2})


def v_baseline(run: Run) -> None:
    baseline_steps(run, import_torch(run))


def v_cupti_ctypes_first(run: Run) -> None:
    cupti_init(run, "cupti_ctypes")
    baseline_steps(run, import_torch(run))


def v_cupti_ctypes_thread(run: Run) -> None:
    thread = threading.Thread(target=cupti_init, args=(run, "cupti_thread"), daemon=True)
    thread.start()
    try:
        torch = import_torch(run)
    finally:
        with run.timed("join_wait"):
            thread.join()
    baseline_steps(run, torch)


def v_torch_profiler_thread(run: Run) -> None:
    torch = import_torch(run)
    box: dict[str, Any] = {}

    def body() -> None:
        t0 = time.perf_counter()
        try:
            box["x"] = cuda_context(run, torch, "thread.cuda_context")
            box["p1"] = profiler_region(run, torch, box["x"], "thread.profiler_1")
        except BaseException as exc:
            box["error"] = exc
        finally:
            run.step("thread_total", time.perf_counter() - t0)

    thread = threading.Thread(target=body, name="profiler-start", daemon=True)
    thread.start()
    import_dsls(run, should_stop=lambda: isinstance(box.get("error"), NoCuda))
    with run.timed("join_wait"):
        thread.join()
    if "error" in box:
        raise box["error"]
    run.since_start("wall_to_profiler_1")
    p2 = profiler_region(run, torch, box["x"], "profiler_2")
    record_profiles(run, {"thread.profiler_1": box["p1"], "profiler_2": p2})


def v_dsl_serial(run: Run) -> None:
    torch = import_torch(run)
    import_dsls(run)
    baseline_steps(run, torch)


VARIANT_FUNCS: dict[str, Callable[[Run], None]] = {
    "baseline": v_baseline,
    "cupti_ctypes_first": v_cupti_ctypes_first,
    "cupti_ctypes_thread": v_cupti_ctypes_thread,
    "torch_profiler_thread": v_torch_profiler_thread,
    "dsl_serial": v_dsl_serial,
    "env_lazy": v_baseline,
}


def child_main(variant: str) -> None:
    run = Run()
    run.info["env"] = {k: os.environ[k] for k in RECORDED_ENV if k in os.environ}
    try:
        if os.environ.get(NO_PRECHECK_ENV) != "1" and not cuda_present():
            raise NoCuda("no CUDA: neither /dev/nvidiactl nor /proc/driver/nvidia/version")
        VARIANT_FUNCS[variant](run)
    except NoCuda as exc:
        run.errors.append(str(exc))
    except BaseException as exc:
        run.errors.append(f"{type(exc).__name__}: {exc}")
        run.info["traceback"] = traceback.format_exc()[-2000:]
    run.since_start("child_total")
    run.info["mapped"] = mapped_libraries("libcupti", "libcuda.so")
    run.emit()
    sys.stderr.flush()
    # Skip interpreter and CUDA/CUPTI teardown: it is not what we time, and must not hang.
    os._exit(0)


# ------------------------------------------------------------------------ parent side


def parse_progress(stderr: str) -> dict[str, float]:
    steps: dict[str, float] = {}
    for line in stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "[step]":
            with suppress(ValueError):
                steps[parts[1]] = float(parts[2])
    return steps


def as_text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def run_child(variant: str, repeat: int, timeout: float, precheck: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(VARIANT_ENV.get(variant, {}))
    if not precheck:
        env[NO_PRECHECK_ENV] = "1"
    code = CHILD_CODE.format(path=str(Path(__file__).resolve()), variant=variant)
    record: dict[str, Any] = {"variant": variant, "repeat": repeat, "steps": {}}
    errors: list[str] = []
    rc: int | None = None
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        stdout, stderr, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr = as_text(exc.stdout), as_text(exc.stderr)
        errors.append(f"timeout after {timeout:g} s")
    record["total_s"] = round(time.perf_counter() - t0, 4)

    payload: dict[str, Any] | None = None
    lines = [line for line in stdout.splitlines() if line.strip()]
    if lines:
        try:
            payload = json.loads(lines[-1])
        except json.JSONDecodeError:
            payload = None
    if payload is not None:
        record["steps"] = payload.get("steps", {})
        errors += payload.get("errors", [])
        record["info"] = payload.get("info", {})
    else:
        record["steps"] = parse_progress(stderr)
        if rc not in (None, 0) or not errors:
            tail = " | ".join(stderr.strip().splitlines()[-3:])[-500:]
            errors.append(f"child exited {rc} without a result: {tail}")
    if variant in VARIANT_ENV:
        record["env"] = VARIANT_ENV[variant]
    record["rc"] = rc
    if errors:
        record["error"] = "; ".join(errors)
    return record


def summarize(records: list[dict[str, Any]]) -> None:
    keys = ("import_torch", "cuda_context", "profiler_1", "profiler_2", "wall_to_profiler_1")
    for variant in dict.fromkeys(r["variant"] for r in records):
        mine = [r for r in records if r["variant"] == variant]
        parts = []
        for key in keys:
            values = [r["steps"][key] for r in mine if key in r["steps"]]
            if values:
                parts.append(f"{key}={statistics.median(values):.3f}")
        failed = sum(1 for r in mine if "error" in r)
        print(
            f"# {variant}: {' '.join(parts) or 'no steps'} ({failed}/{len(mine)} with errors)",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per child")
    parser.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    parser.add_argument(
        "--no-precheck", action="store_true", help="do not stop children when no GPU node exists"
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANT_FUNCS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")

    records = []
    for repeat in range(args.repeats):
        for variant in variants:
            record = run_child(variant, repeat, args.timeout, precheck=not args.no_precheck)
            records.append(record)
            line = json.dumps(record, default=str)
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(line + "\n")
    summarize(records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
