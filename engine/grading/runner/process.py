"""What the runner knows of its own process: threads, memory errors and limits, and the CUDA
IPC export of its allocations. A file of the runner's zone: standard library only (the CUDA
driver through ctypes), copied into the jail beside :mod:`loop`."""

from __future__ import annotations

import ctypes
import os
from typing import Any


def is_memory_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"
        or "can't allocate memory" in text
        or "out of memory" in text
    )


def minor_faults() -> int:
    """Page faults of the calling thread so far (``RUSAGE_THREAD``; the process's elsewhere)."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    return resource.getrusage(who).ru_minflt


def python_threads() -> int:
    import threading

    return threading.active_count()


def native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


# -- CUDA IPC export (driver API; the judge imports) ------------------------------------------
class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CudaExporter:
    """Export device allocations by CUDA IPC handle (runner-allocated memory only)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.cache: dict[int, tuple[str, int]] = {}

    def export(self, ptr: int) -> dict[str, Any]:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc = self.lib.cuMemGetAddressRange_v2(
            ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)
        )
        if rc != 0:
            raise RuntimeError(f"cuMemGetAddressRange failed ({rc})")
        cached = self.cache.get(base.value)
        if cached is None or cached[1] != size.value:
            handle = IpcHandle()
            rc = self.lib.cuIpcGetMemHandle(ctypes.byref(handle), base)
            if rc != 0:
                raise RuntimeError(f"cuIpcGetMemHandle failed ({rc})")
            cached = (ctypes.string_at(ctypes.addressof(handle), 64).hex(), size.value)
            self.cache[base.value] = cached
        return {"handle": cached[0], "ipc_offset": ptr - base.value}


# glibc's mallopt parameters and the values a runner sets (see steady_heap)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest: blocks above it are still mapped
HEAP_TRIM_THRESHOLD = 1 << 30


def steady_heap() -> bool:
    """Keep the C heap's freed memory for the next call instead of returning it to the kernel.

    glibc serves blocks above its mmap threshold with a fresh mapping and trims the heap's top
    once enough of it is free, so a call that allocates and frees a few MiB may fault every
    page of them in again on each call: in CPU preview the same PyTorch add on p28's smoke
    inputs took 1.5–1.8 ms in most fresh processes (736 minor faults per call) and 75 µs in
    the others, by where the heap happened to lie. With both thresholds fixed high no call
    faults its scratch memory in again. Not a defence: the submission can set them itself and
    would change only its own timing. False where the C library is not glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
        and mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD)
    )


def limit_address_space(extra_mb: int) -> None:
    """Cap virtual memory at the current size plus ``extra_mb`` (CPU preview)."""
    import resource

    size = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                size = int(line.split()[1]) * 1024
    limit = size + extra_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
