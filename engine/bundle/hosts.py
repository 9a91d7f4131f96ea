"""What a grading host is: GPUs, driver, Python, torch and DSL versions, read without
importing torch or a DSL (package metadata and ``/proc``), so describing a host costs
milliseconds. The store records, per graded submission, only the feedback's ``device`` (the
GPU name, or ``cpu (preview)``) and the experiment's grading backend; a bundle carries those
and this description of the host that exported it, labelled as such."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "nvidia-cutlass-dsl", "apache-tvm", "apache-tvm-ffi", "harbor")
_NVIDIA = Path("/proc/driver/nvidia")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus(root: Path = _NVIDIA) -> list[str]:
    """GPU model names from the NVIDIA driver's ``/proc`` files (empty without a driver)."""
    names: list[str] = []
    for info in sorted((root / "gpus").glob("*/information")):
        try:
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


def _driver(root: Path = _NVIDIA) -> str | None:
    try:
        first = (root / "version").read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    words = first.split()
    for i, word in enumerate(words):
        if word == "Kernel" and i + 2 < len(words) and words[i + 1] == "Module":
            return words[i + 2]
    return first.strip()


def describe_this_host() -> dict[str, Any]:
    """This machine as a grading host: GPUs and driver (none: CPU preview only), Python and
    the versions of torch and both DSLs."""
    gpus = _gpus()
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "gpus": gpus,
        "driver": _driver(),
        "device": gpus[0] if gpus else "cpu (preview)",
        "packages": {name: _version(name) for name in PACKAGES},
    }


def graded_on(feedbacks: list[dict[str, Any]], backend: str) -> list[dict[str, Any]]:
    """The grading hosts a set of stored feedback records names: one row per device, with
    how many gradings it made and whether their runners were jailed."""
    rows: dict[str, dict[str, Any]] = {}
    for fb in feedbacks:
        device = str(fb.get("device") or "unknown")
        row = rows.setdefault(
            device, {"device": device, "backend": backend, "gradings": 0, "jailed": set()}
        )
        row["gradings"] += 1
        row["jailed"].add(fb.get("jailed"))
    return [{**row, "jailed": sorted(str(j) for j in row["jailed"])} for row in rows.values()]
