"""A small CUPTI activity reader: the kernels, copies and sets a region ran, with device times.

Why not ``torch.profiler``: on the H200 its first region costs 4.7–5.7 s per process (all of
it in ``profile().__enter__``, PyTorch's own start; ``docs/gpu-runs/2026-12-04-work-share/
cupti.jsonl``), and a runner is a fresh process per evaluation. Enabling CUPTI's activity
records directly through ctypes took 0.12 s there. The reader uses the ``libcupti`` that
PyTorch already loaded, asks for concurrent-kernel, memcpy and memset records only while a
region runs, and reads three fields of each record: the start and end timestamps (ns) and,
for kernels, the name (offsets 16, 24 and 104, the same in ``CUpti_ActivityKernel4`` to
``10``, ``CUpti_ActivityMemcpy6`` and ``CUpti_ActivityMemset4`` of ``cupti_activity.h``).

Loaded in the runner beside ``dsl_hooks.py`` (stdlib only); :func:`reader` returns None where
CUPTI cannot be loaded, and the caller falls back to ``torch.profiler``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

KIND_MEMCPY, KIND_MEMSET, KIND_KERNEL, KIND_CONCURRENT_KERNEL = 1, 2, 3, 10
ENABLED_KINDS = (KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET)
START_OFFSET, END_OFFSET, NAME_OFFSET = 16, 24, 104
SUCCESS, MAX_LIMIT_REACHED = 0, 12  # CUptiResult values
FLUSH_FORCED = 1
BUFFER_BYTES = 1 << 20
ALIGNMENT = 8
NAMES = {KIND_MEMCPY: "Memcpy", KIND_MEMSET: "Memset"}

Record = tuple[str, int, int]  # name, start ns, end ns

_REQUEST = ctypes.CFUNCTYPE(
    None,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
)
_COMPLETE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
)


def read_record(address: int, demangle: Callable[[bytes], str] | None = None) -> Record | None:
    """The name, start and end of the activity record at ``address``; None for other kinds."""
    kind = ctypes.c_uint32.from_address(address).value
    start = ctypes.c_uint64.from_address(address + START_OFFSET).value
    end = ctypes.c_uint64.from_address(address + END_OFFSET).value
    if kind in (KIND_KERNEL, KIND_CONCURRENT_KERNEL):
        raw = ctypes.c_char_p.from_address(address + NAME_OFFSET).value or b"?"
        name = demangle(raw) if demangle is not None else raw.decode("utf-8", "replace")
    elif kind in NAMES:
        name = NAMES[kind]
    else:
        return None
    return name, start, end


def cxx_demangler() -> Callable[[bytes], str]:
    """``__cxa_demangle`` from the C++ runtime PyTorch loaded (names stay mangled without it)."""
    try:
        runtime = ctypes.CDLL("libstdc++.so.6")
        demangle = runtime.__cxa_demangle
        libc = ctypes.CDLL(None)
    except (OSError, AttributeError):
        return lambda raw: raw.decode("utf-8", "replace")
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]

    def readable(raw: bytes) -> str:
        status = ctypes.c_int(-1)
        text = demangle(raw, None, None, ctypes.addressof(status))
        if status.value != 0 or not text:
            return raw.decode("utf-8", "replace")
        try:
            return ctypes.string_at(text).decode("utf-8", "replace")
        finally:
            libc.free(text)

    return readable


def loaded_library() -> str | None:
    """The path of the ``libcupti`` already mapped in this process (PyTorch loads it)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1]
                if "/libcupti.so" in path:
                    return path
    except OSError:
        return None
    return None


class Reader:
    """Activity records of the regions run through :meth:`collect` (one at a time)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.demangle = cxx_demangler()
        self.records: list[Record] = []
        self.buffers: dict[int, Any] = {}
        lib.cuptiActivityGetNextRecord.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_void_p),
        ]
        self._request = _REQUEST(self._on_request)  # kept alive: CUPTI holds the pointers
        self._complete = _COMPLETE(self._on_complete)
        status = lib.cuptiActivityRegisterCallbacks(self._request, self._complete)
        if status != SUCCESS:
            raise OSError(f"cuptiActivityRegisterCallbacks returned {status}")

    def _on_request(self, buffer: Any, size: Any, max_records: Any) -> None:
        block = ctypes.create_string_buffer(BUFFER_BYTES + ALIGNMENT)
        aligned = (ctypes.addressof(block) + ALIGNMENT - 1) & ~(ALIGNMENT - 1)
        self.buffers[aligned] = block
        buffer[0] = aligned
        size[0] = BUFFER_BYTES
        max_records[0] = 0

    def _on_complete(self, context: Any, stream: int, buffer: Any, size: int, valid: int) -> None:
        record = ctypes.c_void_p(None)
        while True:
            status = self.lib.cuptiActivityGetNextRecord(buffer, valid, ctypes.byref(record))
            if status != SUCCESS or not record.value:
                break
            found = read_record(record.value, self.demangle)
            if found is not None:
                self.records.append(found)
        self.buffers.pop(buffer, None)

    def collect(self, run: Callable[[], Any]) -> list[Record]:
        """Records of the kernels, copies and sets that ran while ``run`` ran (it must
        synchronize the device before returning), in order of their start."""
        self.start()
        try:
            run()
        finally:
            records = self.take()
            self.stop()
        return records

    def start(self) -> None:
        """Record from now on (until :meth:`stop`)."""
        self.records = []
        for kind in ENABLED_KINDS:
            status = self.lib.cuptiActivityEnable(kind)
            if status != SUCCESS:
                raise OSError(f"cuptiActivityEnable({kind}) returned {status}")

    def take(self) -> list[Record]:
        """The records since :meth:`start` or the last take (the device must be synchronized),
        in order of their start; recording goes on."""
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        records, self.records = sorted(self.records, key=lambda r: r[1]), []
        return records

    def stop(self) -> None:
        for kind in ENABLED_KINDS:
            self.lib.cuptiActivityDisable(kind)

    def finalize(self) -> bool:
        """Detach CUPTI from the process (``cuptiFinalize``); the reader is unusable after.
        True when CUPTI said yes."""
        self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        return bool(self.lib.cuptiFinalize() == SUCCESS)


def span_ns(records: list[Record]) -> int | None:
    """First start to last end of ``records`` (ns); None when there are none."""
    if not records:
        return None
    return max(end for _, _, end in records) - min(start for _, start, _ in records)


_READER: list[Reader | None] = []


def reader() -> Reader | None:
    """This process's reader (made once), or None where CUPTI cannot be loaded."""
    if not _READER:
        made: Reader | None = None
        path = loaded_library()
        for candidate in ([path] if path else []) + ["libcupti.so.13", "libcupti.so.12"]:
            try:
                made = Reader(ctypes.CDLL(candidate))
                break
            except (OSError, AttributeError):
                continue
        _READER.append(made)
    return _READER[0]
