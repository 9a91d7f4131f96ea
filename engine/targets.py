"""Which GPU an experiment is graded on: ``[grading] gpu`` against what the grading host says.

:func:`resolve_experiment_gpu` runs before an engine writes anything: it asks the grading
backend's host(s) which GPUs they have and returns the config with ``gpu`` made concrete
(``auto`` → the host's GPU), or raises :class:`~problems.targets.TargetMismatchError`.

How each backend reports its host, without initialising CUDA:

- ``local``: this machine, as the local grader sees it (:func:`local_gpu_names`: the driver's
  ``/proc/driver/nvidia/gpus/*/information``, else ``nvidia-smi -L``, narrowed to the
  ``gpus`` option and ``CUDA_VISIBLE_DEVICES``); a backend grading in CPU preview reports none;
- ``http``: each grader's ``GET /status`` answer, key ``gpu_names`` (a grader that does not
  send it cannot confirm a setting: ``auto`` is then refused, a named GPU is trusted);
- ``harbor``: nothing before the first evaluation (the config must name the GPU);
- ``simulated`` (and any backend without a report, e.g. a test double): no GPU.

A backend may also report for itself with a ``gpu_names`` attribute (a list or a method).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.config import ExperimentConfig
from problems.targets import Target, TargetMismatchError, resolve

__all__ = [
    "TargetMismatchError",
    "host_gpu_names",
    "local_gpu_names",
    "resolve_experiment_gpu",
]

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_SMI_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?$")


def _proc_gpu_names(root: Path) -> list[str]:
    names = []
    for info in sorted(root.glob("*/information")):
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                names.append(line.split(":", 1)[1].strip())
    return names


def _smi_gpu_names(environ: Mapping[str, str]) -> list[str]:
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi is None:
        return []
    try:
        done = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=20, env=dict(environ)
        )
    except (OSError, subprocess.SubprocessError):
        return []
    found = [_SMI_LINE.match(line.strip()) for line in done.stdout.splitlines()]
    return [m.group(2) for m in found if m]


def local_gpu_names(
    gpus: Any = "auto", environ: Mapping[str, str] | None = None, proc_root: Path = PROC_GPUS
) -> list[str]:
    """The names of the GPUs a local grader uses (``gpus``: its ``[grading] gpus`` option:
    "auto", "none"/"cpu" or a list of indices), in device order."""
    env = os.environ if environ is None else environ
    if gpus in (None, "none", "cpu"):
        return []
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return []
    names = _proc_gpu_names(proc_root) if proc_root.is_dir() else []
    names = names or _smi_gpu_names(env)
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",")):
        names = [names[int(v)] for v in visible.split(",") if int(v) < len(names)]
    if isinstance(gpus, (list, tuple)):
        names = [names[int(g)] for g in gpus if int(g) < len(names)]
    return names


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def host_gpu_names(config: ExperimentConfig, backend: Any) -> tuple[list[str], list[str]]:
    """(GPU names the grading host(s) report, hosts that could not say) for the config's
    grading backend. A backend with a ``gpu_names`` attribute (a list, or a method) reports
    through it; stand-ins and test doubles without one report no GPU."""
    own = getattr(backend, "gpu_names", None)
    if own is not None:
        return list(await _maybe_await(own() if callable(own) else own)), []
    if getattr(backend, "name", "") == "local":
        if getattr(backend, "device", "cuda") == "cpu":
            return [], []  # the local grader runs in CPU preview
        return local_gpu_names(config.grading_options.get("gpus", "auto")), []
    if config.grading != "http" or not hasattr(backend, "status"):
        return [], []  # simulated: no GPU; harbor: unknown before the first evaluation
    statuses = await _maybe_await(backend.status())
    names: list[str] = []
    silent: list[str] = []
    for url, status in dict(statuses).items():
        reported = status.get("gpu_names") if isinstance(status, dict) else None
        if isinstance(reported, list) and all(isinstance(n, str) for n in reported):
            names += reported
        else:
            silent.append(str(url))
    return names, silent


async def resolve_experiment_gpu(config: ExperimentConfig, backend: Any) -> ExperimentConfig:
    """The config with ``gpu`` set to the concrete target it is graded on; raises
    :class:`TargetMismatchError` when the grading host contradicts the setting or ``auto``
    cannot be decided."""
    names, silent = await host_gpu_names(config, backend)
    where = "the grading host" if config.grading == "local" else "the grading hosts"
    if silent and config.gpu == "auto" and not names:
        raise TargetMismatchError(
            f'[grading] gpu = "auto", but {", ".join(silent)} did not report its GPU '
            '(an older grader, or unreachable): name the GPU, e.g. gpu = "h200"'
        )
    chosen: Target = resolve(config.gpu, names, where)
    return dataclasses.replace(config, gpu=chosen.key)
