"""Launch counting and bypass for CuTe DSL and TIRx, hooked at their Python call paths.

Hook points (research-dsl.md §4): CuTe's ``JitExecutor.run_compiled_program`` (every launch
of a compiled function, direct ``@cute.jit`` calls included), ``JitCompiledFunction.
run_compiled_program`` (first call, before the cubin loads) and the TVM-FFI provider's
``__call__``; TIRx's ``tvm_ffi.Module.get_function`` (functions of modules whose import tree
holds CUDA code are wrapped). With ``bypass`` on, hooked calls return without launching.
tests/grading/test_dsl_launch_paths.py runs every path on the real DSLs on a CPU (CuTe's
default executor and ``--enable-tvm-ffi`` called with torch tensors; TIRx through TVM-FFI).

The DSLs are optional: :func:`install` returns ``None`` when the DSL cannot be imported, and
nothing here is imported at module load, so this file imports cleanly anywhere.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass
class LaunchCounter:
    """Host-side DSL launches seen so far, and the bypass switch."""

    dsl: str
    count: int = 0
    switch: Any = None  # a shared page (mmap) whose first byte the judge sets for bypass calls
    local_bypass: bool = False
    labels: list[str] = field(default_factory=list)
    kernel_names: set[str] = field(default_factory=set)
    _patches: list[tuple[Any, str, Any]] = field(default_factory=list)

    @property
    def bypass(self) -> bool:
        """Skip launches: set by the judge through the shared page (or locally in tests)."""
        if self.switch is not None:
            return bool(self.switch[0])
        return self.local_bypass

    @bypass.setter
    def bypass(self, value: bool) -> None:
        if self.switch is not None:
            self.switch[0] = 1 if value else 0
        else:
            self.local_bypass = value

    def record(self, label: str) -> None:
        self.count += 1
        if len(self.labels) < 64:
            self.labels.append(label)

    def intact(self) -> bool:
        """True while every installed hook is still in place (a submission may not undo them)."""
        return all(getattr(owner, name, None) is hook for owner, name, hook in self._patches)

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> bool:
        original = getattr(owner, name, None)
        if original is None:
            return False
        hook = make(original)
        setattr(owner, name, hook)
        self._patches.append((owner, name, hook))
        return True

    def uninstall(self) -> None:
        for owner, name, hook in reversed(self._patches):
            original = getattr(hook, "__wrapped__", None)
            if original is not None:
                setattr(owner, name, original)
        self._patches.clear()


def _find(paths: list[str], attr: str) -> Any:
    for path in paths:
        try:
            module = importlib.import_module(path)
        except Exception:  # noqa: BLE001 - absent or broken optional module
            continue
        found = getattr(module, attr, None)
        if found is not None:
            return found
    return None


def _counting_method(counter: LaunchCounter, label: str) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.record(label)
            if counter.bypass:
                return None
            return original(self, *args, **kwargs)

        hooked.__wrapped__ = original  # type: ignore[attr-defined]
        return hooked

    return make


def _install_cute(counter: LaunchCounter) -> bool:
    try:
        importlib.import_module("cutlass.cute")
    except Exception:  # noqa: BLE001
        return False
    hooked = False
    executor = _find(["cutlass.base_dsl.jit_executor"], "JitExecutor")
    if executor is not None:
        hooked |= counter.patch(executor, "run_compiled_program", _counting_method(counter, "cute"))
    compiled = _find(
        ["cutlass.base_dsl.jit_executor", "cutlass.base_dsl.compiled_function"],
        "JitCompiledFunction",
    )
    if compiled is not None:
        # First calls go through here before the executor; count once by bypassing only.
        def make_first(original: Any) -> Any:
            def hooked_first(self: Any, *args: Any, **kwargs: Any) -> Any:
                if counter.bypass:
                    counter.record("cute-first")
                    return None
                return original(self, *args, **kwargs)

            hooked_first.__wrapped__ = original  # type: ignore[attr-defined]
            return hooked_first

        counter.patch(compiled, "run_compiled_program", make_first)

        def make_init(original: Any) -> Any:
            def hooked_init(self: Any, *args: Any, **kwargs: Any) -> Any:
                original(self, *args, **kwargs)
                info = getattr(self, "kernel_info", None)
                if isinstance(info, dict):
                    counter.kernel_names.update(str(k) for k in info)

            hooked_init.__wrapped__ = original  # type: ignore[attr-defined]
            return hooked_init

        counter.patch(compiled, "__init__", make_init)
    for cls_name in ("TVMFFIJitCompiledFunction", "TVMFFIJitCompiledFunctionWithKwargs"):
        cls = _find(["cutlass.cutlass_dsl.tvm_ffi_provider"], cls_name)
        if cls is not None and "__call__" in vars(cls):
            hooked |= counter.patch(cls, "__call__", _counting_method(counter, "cute-tvmffi"))
    return hooked


def _install_tirx(counter: LaunchCounter) -> bool:
    try:
        tvm_ffi = importlib.import_module("tvm_ffi")
        importlib.import_module("tvm")
    except Exception:  # noqa: BLE001
        return False
    module_cls = getattr(tvm_ffi, "Module", None)
    if module_cls is None:
        return False

    named: set[int] = set()

    def cuda_modules(mod: Any) -> list[Any]:
        try:
            if getattr(mod, "kind", None) == "cuda":
                return [mod]
            return list(mod._collect_from_import_tree(lambda m: m.kind == "cuda"))
        except Exception:  # noqa: BLE001 - treat unknown modules as host code
            return []

    def collect_names(modules: list[Any]) -> None:
        """Kernel names for the profiler cross-check, from the generated CUDA source."""
        for m in modules:
            if id(m) in named:
                continue
            named.add(id(m))
            with contextlib.suppress(Exception):  # names are best effort; counting still works
                counter.kernel_names.update(cuda_kernel_names(str(m.inspect_source())))

    def has_cuda(mod: Any) -> bool:
        modules = cuda_modules(mod)
        collect_names(modules)
        return bool(modules)

    def make(original: Any) -> Any:
        def get_function(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
            fn = original(self, name, *args, **kwargs)
            if fn is None or not has_cuda(self):
                return fn

            def launch(*call_args: Any, **call_kwargs: Any) -> Any:
                counter.record(f"tirx:{name}")
                if counter.bypass:
                    return None
                return fn(*call_args, **call_kwargs)

            return launch

        get_function.__wrapped__ = original  # type: ignore[attr-defined]
        return get_function

    return counter.patch(module_cls, "get_function", make)


def install(dsl: str, switch: Any = None) -> LaunchCounter | None:
    """Install the hooks for ``dsl`` ("cute" or "tirx"); None when the DSL is not importable.

    ``switch``: a shared page whose first byte turns bypass on (the judge owns it)."""
    counter = LaunchCounter(dsl, switch=switch)
    installer = {"cute": _install_cute, "tirx": _install_tirx}.get(dsl)
    if installer is None:
        raise ValueError(f"unknown DSL {dsl!r}")
    return counter if installer(counter) else None


def dsl_available(dsl: str) -> bool:
    """Whether the DSL's Python package imports on this host (without installing hooks)."""
    roots = {"cute": ("cutlass.cute",), "tirx": ("tvm", "tvm_ffi")}[dsl]
    try:
        for root in roots:
            importlib.import_module(root)
    except Exception:  # noqa: BLE001
        return False
    return True


# -- profiler measurements: the kernel audit's cross-check, the device time per call ----
CONTROL_NAME_HINTS = ("fill", "add", "elementwise", "vectorized")
DEVICE_PROFILE_CALLS = 3  # profiled calls per device-time figure (informational only)
MAX_SPAN_CALLS = 64  # the most profiled calls one "profile" request runs for spans
SPAN_BUDGET_S = 2.0  # profiled calls for spans stop after this long (once 3 have run)
GLOBAL_FUNCTION = re.compile(
    r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\("
)


def cuda_kernel_names(source: str) -> set[str]:
    """``__global__`` function names in generated CUDA C (how TIRx names its kernels)."""
    return set(GLOBAL_FUNCTION.findall(source))


class DeviceEvent(NamedTuple):
    """One kernel, copy or set the device ran: its name, start and duration (µs)."""

    name: str
    start_us: float
    duration_us: float


# Which profiler reads the device events: "auto" (CUPTI's activity records through ctypes,
# falling back to torch.profiler when they are unusable here), "cupti", or "torch"
# (MKB_PROFILER in the runner's environment, for A/B runs).
PROFILER = os.environ.get("MKB_PROFILER", "auto")
_BACKEND: list[str] = []  # the one chosen in this process, once


def profiled_kernel_names(call: Callable[[], Any]) -> tuple[list[str], list[float], bool] | None:
    """GPU kernels seen while ``call`` runs (plus a control kernel, first): their names, their
    device time in microseconds, and whether the control was seen. None when the profiler
    cannot run here."""
    events = _device_events(call)
    if events is None:
        return None
    names = [e.name for e in events]
    durations = [e.duration_us for e in events]
    return names, durations, bool(names) and any(_is_control(n) for n in names)


def profiled_device_ms(call: Callable[[], Any], calls: int = DEVICE_PROFILE_CALLS) -> float | None:
    """GPU time of one ``call``: the kernels, copies and sets it ran, summed (streams that
    overlap count twice); the median of ``calls`` profiled calls. None when the profiler
    cannot run here or missed the control kernel."""
    seen = profiled_calls(call, calls, budget_s=float("inf"))
    return None if seen is None else seen.device_ms


class ProfiledCalls(NamedTuple):
    """What :func:`profiled_calls` saw: the GPU time per call and each call's span (ms)."""

    device_ms: float | None  # median over the calls of their events' summed durations
    spans_ms: list[float]  # per call with device work: first start to last end of its events


def span_us(events: list[DeviceEvent]) -> float | None:
    """First start to last end of ``events`` (µs): the device time one call spans, its gaps
    between kernels included; None when there are none."""
    if not events:
        return None
    return max(e.start_us + e.duration_us for e in events) - min(e.start_us for e in events)


def requested_calls(value: Any) -> int:
    """The profiled calls a ``profile`` request asks for (its ``span_calls``), within
    1..``MAX_SPAN_CALLS``; ``DEVICE_PROFILE_CALLS`` when it is not an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        return DEVICE_PROFILE_CALLS
    return min(max(value, 1), MAX_SPAN_CALLS)


def profiled_calls(
    call: Callable[[], Any],
    calls: int,
    budget_s: float = SPAN_BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> ProfiledCalls | None:
    """``calls`` profiled calls of ``call``, each in its own region after a control kernel and
    a device synchronize: the median summed device time and each call's span, the control
    left out. Calls stop early once ``budget_s`` has passed (after ``DEVICE_PROFILE_CALLS``).
    None when the profiler cannot run here or missed the control kernel."""
    sums: list[float] = []
    spans: list[float] = []
    end = clock() + budget_s
    for i in range(max(1, calls)):
        if i >= DEVICE_PROFILE_CALLS and clock() > end:
            break
        events = _device_events(call)
        if not events or not _is_control(events[0].name):
            return None
        body = events[1:]
        sums.append(sum(e.duration_us for e in body) / 1e3)
        span = span_us(body)
        if span is not None:  # a call that ran nothing on the device spans nothing
            spans.append(span / 1e3)
    return ProfiledCalls(statistics.median(sums), spans)


def warm_profiler() -> bool:
    """Start the profiler once (a control kernel alone), so that its first-use cost is paid
    before any timed or profiled call. True when it ran and saw the control kernel."""
    events = _device_events(lambda: None)
    return events is not None and bool(events) and _is_control(events[0].name)


def profiler_backend() -> str | None:
    """The profiler this process uses ("cupti" or "torch"), once chosen."""
    return _BACKEND[0] if _BACKEND else None


def _is_control(name: str) -> bool:
    return any(h in name.lower() for h in CONTROL_NAME_HINTS)


def _device_events(call: Callable[[], Any]) -> list[DeviceEvent] | None:
    """The device events of a profiled region running a control kernel, then ``call``, in
    order of their start (the control first). None when the profiler cannot run here."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch, no profiler
        return None
    if not torch.cuda.is_available():
        return None
    marker = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    if not _BACKEND:
        _BACKEND.append(_choose_backend(torch, marker))
    if _BACKEND[0] == "cupti":
        return _cupti_events(torch, marker, call)
    return _torch_events(torch, marker, call)


def _choose_backend(torch: Any, marker: Any) -> str:
    """CUPTI's records when they load and show the control kernel with a sane duration."""
    if PROFILER == "torch":
        return "torch"
    try:
        events = _cupti_events(torch, marker, lambda: None)
    except Exception:  # noqa: BLE001 - unusable here: fall back
        events = None
    if events and _is_control(events[0].name) and 0.0 < events[0].duration_us < 1e6:
        return "cupti"
    return "torch"


def _cupti_reader() -> Any:
    name = f"{__package__}.cupti_activity" if __package__ else "cupti_activity"
    return importlib.import_module(name).reader()


def _cupti_events(torch: Any, marker: Any, call: Callable[[], Any]) -> list[DeviceEvent] | None:
    reader = _cupti_reader()
    if reader is None:
        return None

    def region() -> None:
        marker.add_(1.0)  # the control kernel
        torch.cuda.synchronize()
        call()
        torch.cuda.synchronize()

    records = reader.collect(region)
    return [
        DeviceEvent(name, start / 1e3, max(0, end - start) / 1e3) for name, start, end in records
    ]


def _torch_events(torch: Any, marker: Any, call: Callable[[], Any]) -> list[DeviceEvent] | None:
    try:
        from torch.profiler import ProfilerActivity, profile
    except Exception:  # noqa: BLE001 - no profiler on this host
        return None
    raised: BaseException | None = None
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            marker.add_(1.0)  # the control kernel
            torch.cuda.synchronize()
            try:
                call()
                torch.cuda.synchronize()
            except BaseException as exc:  # noqa: BLE001 - the call's own failure, re-raised
                raised = exc
    except Exception:  # noqa: BLE001 - CUPTI unavailable or busy
        if raised is None:
            return None
    if raised is not None:
        raise raised
    events = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    return [
        DeviceEvent(str(e.name), float(e.time_range.start), float(e.time_range.elapsed_us()))
        for e in sorted(events, key=lambda e: e.time_range.start)
    ]
