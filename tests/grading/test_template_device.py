"""The runner template on a GPU host: nothing it imports may open NVML or the driver, since a
forked child cannot use either (H100, 2026-12-07: every grading failed at the first
synchronize). Pure checks; the jailed template itself is covered by test_template_escape."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.grading.runner import template


def test_the_dsls_import_told_a_device_is_there_without_asking() -> None:
    asked: list[bool] = []
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: asked.append(True) or False  # type: ignore[assignment]
    try:
        with template.device_probe_answered(torch, "cuda"):
            assert torch.cuda.is_available() is True
        assert asked == []
        assert torch.cuda.is_available() is False  # the real answer is back
        assert asked == [True]
    finally:
        torch.cuda.is_available = real


def test_a_cpu_template_asks_for_real() -> None:
    real = torch.cuda.is_available
    with template.device_probe_answered(torch, "cpu"):
        assert torch.cuda.is_available is real


def test_an_open_gpu_device_file_is_found(tmp_path: Path) -> None:
    os.symlink("/dev/nvidiactl", tmp_path / "5")
    os.symlink("/dev/null", tmp_path / "6")
    os.symlink("/dev/nvidia-uvm", tmp_path / "7")
    assert sorted(template.driver_files(str(tmp_path))) == ["/dev/nvidia-uvm", "/dev/nvidiactl"]


def test_this_process_has_no_gpu_device_open() -> None:
    assert template.driver_files() == []
