"""Find and import problem files from a local checkout of the public MetaKernelBench.

Upstream keeps one file per problem at ``problems/<category>/NN_<slug>.py`` defining
``reference(*inputs)`` and a no-argument ``make_inputs()`` that builds its tensors on
``cuda``. Nothing upstream is vendored: files are imported only from the user's path.
:class:`DeviceRedirect` lets such a generator run on another device (CPU) unchanged.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

UPSTREAM_STEM = re.compile(r"^([0-9]{2})_([a-z0-9]+(?:_[a-z0-9]+)*)$")


class UpstreamError(ValueError):
    """An upstream file cannot be found, imported or understood."""


def problems_dir(root: Path) -> Path:
    """The ``problems`` folder of an upstream checkout (``root`` may be that folder itself)."""
    root = Path(root)
    for candidate in (root / "problems", root):
        if candidate.is_dir() and (
            any(_problem_paths(candidate)) or (candidate / "_sol_execbench").is_dir()
        ):
            return candidate
    raise UpstreamError(f"{root}: no problems/<category>/NN_<slug>.py files found")


def _problem_paths(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.glob("*/*.py")):
        if path.parent.name.startswith((".", "_")) or path.name.startswith((".", "_")):
            continue
        if UPSTREAM_STEM.match(path.stem):
            found.append(path)
    return found


def upstream_files(root: Path) -> dict[str, Path]:
    """Upstream problem files by our id (``pNN``), from a checkout or its ``problems`` dir."""
    files: dict[str, Path] = {}
    for path in _problem_paths(problems_dir(root)):
        match = UPSTREAM_STEM.match(path.stem)
        assert match is not None
        pid = f"p{match.group(1)}"
        if pid in files:
            raise UpstreamError(f"two upstream files for {pid}: {files[pid]} and {path}")
        files[pid] = path
    return files


def load_upstream(path: Path) -> ModuleType:
    """Import one upstream problem file under a private module name."""
    name = f"mkb_upstream_{abs(hash(str(Path(path).resolve())))}_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UpstreamError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        sys.modules.pop(name, None)
        raise UpstreamError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    for attr in ("reference", "make_inputs"):
        if not callable(getattr(module, attr, None)):
            raise UpstreamError(f"{path}: defines no {attr}()")
    return module


def parameter_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Positional parameter names of ``fn`` (what the reference takes, in order)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds)


class DeviceRedirect(TorchFunctionMode):
    """Send every tensor a ``cuda`` device argument would create to ``target`` instead."""

    def __init__(self, target: str | torch.device) -> None:
        super().__init__()
        self.target = torch.device(target)

    def _map(self, value: Any) -> Any:
        if isinstance(value, torch.device) and value.type != self.target.type:
            return self.target
        if isinstance(value, str) and value.split(":")[0] in ("cuda", "cpu"):
            return self.target if torch.device(value).type != self.target.type else value
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = self._map(kwargs["device"])
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0].to(self.target)
        if func is torch.Tensor.to:
            args = tuple(self._map(a) for a in args)
        return func(*args, **kwargs)


def upstream_inputs(module: ModuleType, seed: int, device: str) -> list[Any]:
    """Upstream's own draw: global RNG seeded with ``seed``, tensors placed on ``device``."""
    torch.manual_seed(seed)
    if device.startswith("cuda"):
        return list(module.make_inputs())
    with DeviceRedirect(device):
        return list(module.make_inputs())
