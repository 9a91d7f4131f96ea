"""The CUPTI activity reader's record layout, names and fallback (the GPU run covers CUPTI)."""

from __future__ import annotations

import ctypes
import struct

import pytest

from engine.grading.runner import cupti_activity, dsl_hooks
from engine.grading.runner.cupti_activity import (
    KIND_CONCURRENT_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    NAME_OFFSET,
    cxx_demangler,
    read_record,
)

RECORD_BYTES = 216  # sizeof(CUpti_ActivityKernel10)


def record(kind: int, start: int, end: int, name: bytes | None = None) -> ctypes.Array:
    """A record laid out as cupti_activity.h lays out kernels, copies and sets."""
    block = ctypes.create_string_buffer(RECORD_BYTES)
    struct.pack_into("<I", block, 0, kind)
    struct.pack_into("<QQ", block, 16, start, end)
    if name is not None:
        text = ctypes.create_string_buffer(name)
        record.keep.append(text)  # type: ignore[attr-defined]
        struct.pack_into("<Q", block, NAME_OFFSET, ctypes.addressof(text))
    return block


record.keep = []  # type: ignore[attr-defined]


def test_a_kernel_record_gives_its_name_start_and_end() -> None:
    block = record(KIND_CONCURRENT_KERNEL, 1_000, 4_500, b"kernel_cutlass_rmsnorm_0")
    assert read_record(ctypes.addressof(block)) == ("kernel_cutlass_rmsnorm_0", 1_000, 4_500)


def test_copies_and_sets_are_named_by_kind_and_other_kinds_are_skipped() -> None:
    assert read_record(ctypes.addressof(record(KIND_MEMCPY, 5, 9))) == ("Memcpy", 5, 9)
    assert read_record(ctypes.addressof(record(KIND_MEMSET, 5, 7))) == ("Memset", 5, 7)
    assert read_record(ctypes.addressof(record(33, 5, 7))) is None


def test_mangled_kernel_names_read_as_pytorch_prints_them() -> None:
    readable = cxx_demangler()
    assert readable(b"_ZN2at6native18elementwise_kernelEv") == "at::native::elementwise_kernel()"
    assert readable(b"main_kernel") == "main_kernel"  # extern "C" names stay as they are
    block = record(KIND_CONCURRENT_KERNEL, 0, 1, b"_ZN2at6native18elementwise_kernelEv")
    found = read_record(ctypes.addressof(block), readable)
    assert found is not None and found[0] == "at::native::elementwise_kernel()"


def test_the_library_is_the_one_already_mapped(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 0 08:01 2 /venv/nvidia/cu13/lib/libcupti.so.13\n"
    )
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda path, *a, **k: real_open(maps if path == "/proc/self/maps" else path, *a, **k),
    )
    assert cupti_activity.loaded_library() == "/venv/nvidia/cu13/lib/libcupti.so.13"


def test_without_a_gpu_there_are_no_device_events() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the GPU run covers the reader")
    assert dsl_hooks._device_events(lambda: None) is None
    assert dsl_hooks.profiled_kernel_names(lambda: None) is None


def test_a_reader_whose_control_kernel_is_missing_falls_back_to_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Torch:
        pass

    monkeypatch.setattr(dsl_hooks, "PROFILER", "auto")
    monkeypatch.setattr(
        dsl_hooks, "_cupti_events", lambda torch, marker, call: [dsl_hooks.DeviceEvent("x", 0, 1)]
    )
    assert dsl_hooks._choose_backend(Torch(), None) == "torch"
    monkeypatch.setattr(
        dsl_hooks,
        "_cupti_events",
        lambda torch, marker, call: [dsl_hooks.DeviceEvent("void fill_kernel()", 0, 2.0)],
    )
    assert dsl_hooks._choose_backend(Torch(), None) == "cupti"
    monkeypatch.setattr(dsl_hooks, "PROFILER", "torch")
    assert dsl_hooks._choose_backend(Torch(), None) == "torch"
