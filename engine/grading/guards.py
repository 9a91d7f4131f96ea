"""Run-time guards in the worker: timer and namespace tampering, threads, dispatch modes.

Everything here is captured *before* the submission is imported, then re-checked after the
import and after every call. A change means the submission tampered with the grader.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch

TIMER_TAMPERED = "guard.timer_tampered"
THREADS = "guard.threads"


class GuardViolation(Exception):
    """A guard tripped; ``code`` is the stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _snapshot(namespace: Any) -> dict[str, int]:
    """Identity of every callable attribute (functions, classes) of a module or class."""
    try:
        items = list(vars(namespace).items())
    except TypeError:
        return {}
    return {k: id(v) for k, v in items if callable(v) or isinstance(v, ModuleType)}


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class Guards:
    """Snapshots of the grader's world, taken before the submission is imported."""

    def __init__(self, extra_namespaces: Iterable[Any] = (), timer_bound: dict | None = None):
        import problems.common
        import problems.compare

        self._namespaces: dict[str, Any] = {
            "time": time,
            "threading": threading,
            "os": os,
            "torch": torch,
            "torch.Tensor": torch.Tensor,
            "torch.cuda": torch.cuda,
            "torch.nn.functional": torch.nn.functional,
            "torch.linalg": torch.linalg,
            "torch.fft": torch.fft,
            "torch.special": torch.special,
            "torch._C._VariableFunctions": torch._C._VariableFunctions,
            "torch._C.TensorBase": torch._C.TensorBase,
            "torch.cuda.Event": torch.cuda.Event,
            "problems.compare": problems.compare,
            "problems.common": problems.common,
        }
        for ns in extra_namespaces:
            self._namespaces[getattr(ns, "__name__", repr(ns))] = ns
        self._ids = {name: _snapshot(ns) for name, ns in self._namespaces.items()}
        self._timers = {
            "time.perf_counter": time.perf_counter,
            "time.monotonic": time.monotonic,
            "time.time": time.time,
            "torch.cuda.synchronize": torch.cuda.synchronize,
            "torch.cuda.Event": torch.cuda.Event,
        }
        self._timer_bound = dict(timer_bound or {})
        self._threads = {t.ident for t in threading.enumerate()}
        self._num_threads = torch.get_num_threads()
        self._native = _native_threads()

    # -- checks -----------------------------------------------------------------------------
    def check_timers(self) -> None:
        current = {
            "time.perf_counter": time.perf_counter,
            "time.monotonic": time.monotonic,
            "time.time": time.time,
            "torch.cuda.synchronize": torch.cuda.synchronize,
            "torch.cuda.Event": torch.cuda.Event,
        }
        for name, value in current.items():
            if value is not self._timers[name]:
                raise GuardViolation(TIMER_TAMPERED, f"{name} was replaced")
        event = torch.cuda.Event
        for name, value in self._timer_bound.items():
            if "." in name:
                attr = name.split(".", 1)[1]
                if getattr(event, attr, None) is not value:
                    raise GuardViolation(TIMER_TAMPERED, f"torch.cuda.{name} was replaced")

    def check_namespaces(self) -> None:
        for name, ns in self._namespaces.items():
            before = self._ids[name]
            after = _snapshot(ns)
            changed = [k for k, ident in before.items() if after.get(k) != ident]
            if changed:
                raise GuardViolation(
                    TIMER_TAMPERED,
                    f"{name}.{changed[0]} was replaced or removed (grader namespace tampered)",
                )
        stacks = (
            ("torch function mode", getattr(torch._C, "_len_torch_function_stack", None)),
            ("torch dispatch mode", getattr(torch._C, "_len_torch_dispatch_stack", None)),
        )
        for label, length in stacks:
            if length is not None and length() != 0:
                raise GuardViolation(TIMER_TAMPERED, f"a {label} was left active")

    def check_threads(self, native_before: int | None = None) -> None:
        extra = [t for t in threading.enumerate() if t.ident not in self._threads and t.is_alive()]
        if extra:
            raise GuardViolation(THREADS, f"a thread is still running: {extra[0].name!r}")
        if torch.get_num_threads() != self._num_threads:
            raise GuardViolation(
                THREADS,
                f"torch thread count changed from {self._num_threads} to {torch.get_num_threads()}",
            )
        if native_before is not None and _native_threads() > native_before:
            raise GuardViolation(THREADS, "a native thread started during the call is running")

    def native_threads(self) -> int:
        return _native_threads()

    def check_all(self, native_before: int | None = None) -> None:
        self.check_timers()
        self.check_namespaces()
        self.check_threads(native_before)
