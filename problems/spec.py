"""The problem format: what a problem module must define, and its loaded form.

A problem module lives at ``problems/<family_dir>/pNN_<slug>.py`` and defines:

========================  ==============================================================
``__doc__``               one-paragraph task description (the module docstring)
``ID``                    ``"pNN"`` (01–74, numbered as the public MetaKernelBench catalog)
``SLUG``                  snake_case name, unique in the catalog
``FAMILY``                one of :data:`FAMILIES`
``ORIGIN``                one of :data:`ORIGINS`
``SOURCE``                upstream repo + file, or dataset + record
``LICENSE``               upstream license of the facts the problem carries over
``WORKLOAD``              dict of named constants for the fixed (full-scale) workload
``SMOKE``                 dict with the same keys: a small workload of the same structure
``INPUTS``                tuple of positional input names (tensors and Python scalars)
``OUTPUTS``               tuple of output names; one name → ``reference`` returns a tensor,
                          several → a tuple in this order
``INPLACE``               dict output name → input name for declared in-place outputs
``DECISION_MARGIN``       float or ``None``: the margin keeping discrete decisions off ties
``make_inputs(seed, device, w)``  the inputs for workload ``w`` (a :class:`Workload`)
``reference(*inputs)``    dtype-generic reference (uses :func:`problems.common.compute_dtype`)
``dropped_term(*inputs)`` the reference with one term dropped (a mutant that must fail)
``cost(w)``               a :class:`Cost`: FLOPs by math type and compulsory bytes
========================  ==============================================================

Optional: ``reordered(*inputs)`` (a valid alternative order of operations that must pass)
and ``NOTES`` (how the problem adapts its upstream definition).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

FAMILIES: tuple[str, ...] = (
    "Attention",
    "KV Cache",
    "MLP & Norm",
    "MoE",
    "Quantization",
    "Linear Attention",
)
FAMILY_DIRS: dict[str, str] = {
    "attention": "Attention",
    "kv_cache": "KV Cache",
    "mlp_norm": "MLP & Norm",
    "moe": "MoE",
    "quantization": "Quantization",
    "linear_attention": "Linear Attention",
}
ORIGINS: tuple[str, ...] = ("sol-execbench", "flashinfer", "vllm", "fla")
MATH_TYPES: tuple[str, ...] = ("fp8", "bf16", "fp16", "fp32", "int")

ID_PATTERN = re.compile(r"^p(0[1-9]|[1-6][0-9]|7[0-4])$")
SLUG_PATTERN = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")


class ProblemFormatError(ValueError):
    """A problem module does not follow the format; the message names the file."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.reason = message


class Workload(Mapping[str, Any]):
    """Read-only named constants with attribute access (``w.batch``)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"workload has no constant {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Workload({self._values!r})"


@dataclass(frozen=True)
class Cost:
    """Work a problem must do: FLOPs per math type and compulsory DRAM bytes."""

    flops: Mapping[str, float] = field(default_factory=dict)
    bytes: float = 0.0

    def __post_init__(self) -> None:
        unknown = set(self.flops) - set(MATH_TYPES)
        if unknown:
            raise ValueError(f"unknown math types {sorted(unknown)}; use {MATH_TYPES}")


@dataclass(frozen=True)
class Problem:
    """A loaded, validated problem module."""

    id: str
    slug: str
    family: str
    origin: str
    source: str
    license: str
    description: str
    workload: Workload
    smoke: Workload
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    inplace: Mapping[str, str]
    decision_margin: float | None
    path: Path
    module: ModuleType
    notes: str = ""

    @property
    def number(self) -> int:
        return int(self.id[1:])

    def workload_for(self, scale: str) -> Workload:
        if scale == "full":
            return self.workload
        if scale == "smoke":
            return self.smoke
        raise ValueError(f"unknown scale {scale!r} (use 'full' or 'smoke')")

    def make_inputs(self, seed: int, device: str = "cpu", scale: str = "full") -> list[Any]:
        return list(self.module.make_inputs(seed, device, self.workload_for(scale)))

    @property
    def reference(self) -> Callable[..., Any]:
        return self.module.reference  # type: ignore[no-any-return]

    @property
    def dropped_term(self) -> Callable[..., Any]:
        return self.module.dropped_term  # type: ignore[no-any-return]

    @property
    def reordered(self) -> Callable[..., Any] | None:
        return getattr(self.module, "reordered", None)

    def cost(self, scale: str = "full") -> Cost:
        return self.module.cost(self.workload_for(scale))  # type: ignore[no-any-return]

    def inplace_input_indices(self) -> dict[int, int]:
        """Map output index → input index for declared in-place outputs."""
        return {
            self.outputs.index(out): self.inputs.index(inp) for out, inp in self.inplace.items()
        }

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "family": self.family,
            "origin": self.origin,
            "source": self.source,
            "license": self.license,
        }


_REQUIRED_STR = ("ID", "SLUG", "FAMILY", "ORIGIN", "SOURCE", "LICENSE")
_REQUIRED_CALLABLE = ("make_inputs", "reference", "dropped_term", "cost")


def problem_from_module(module: ModuleType, path: Path) -> Problem:
    """Validate a problem module's declarations and build its :class:`Problem`."""

    def fail(message: str) -> ProblemFormatError:
        return ProblemFormatError(path, message)

    for name in _REQUIRED_STR:
        value = getattr(module, name, None)
        if not isinstance(value, str) or not value.strip():
            raise fail(f"{name} must be a non-empty string")
    for name in _REQUIRED_CALLABLE:
        if not callable(getattr(module, name, None)):
            raise fail(f"missing function {name}()")
    doc = (module.__doc__ or "").strip()
    if len(doc) < 40:
        raise fail("the module docstring must describe the task in one paragraph")
    pid, slug, family, origin = module.ID, module.SLUG, module.FAMILY, module.ORIGIN
    if not ID_PATTERN.match(pid):
        raise fail(f"ID {pid!r} must be 'pNN' with NN in 01..74")
    if not SLUG_PATTERN.match(slug):
        raise fail(f"SLUG {slug!r} must be snake_case")
    if path.stem != f"{pid}_{slug}":
        raise fail(f"file name must be {pid}_{slug}.py")
    if family not in FAMILIES:
        raise fail(f"FAMILY {family!r} is not one of {FAMILIES}")
    folder_family = FAMILY_DIRS.get(path.parent.name)
    if folder_family != family:
        raise fail(f"FAMILY {family!r} does not match folder {path.parent.name!r}")
    if origin not in ORIGINS:
        raise fail(f"ORIGIN {origin!r} is not one of {ORIGINS}")
    workload, smoke = getattr(module, "WORKLOAD", None), getattr(module, "SMOKE", None)
    if not isinstance(workload, dict) or not workload:
        raise fail("WORKLOAD must be a non-empty dict of named constants")
    if not isinstance(smoke, dict) or set(smoke) != set(workload):
        raise fail("SMOKE must be a dict with exactly the keys of WORKLOAD")
    inputs, outputs = getattr(module, "INPUTS", None), getattr(module, "OUTPUTS", None)
    for label, names in (("INPUTS", inputs), ("OUTPUTS", outputs)):
        if (
            not isinstance(names, tuple)
            or not names
            or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)
        ):
            raise fail(f"{label} must be a non-empty tuple of distinct names")
    assert isinstance(inputs, tuple) and isinstance(outputs, tuple)
    inplace = getattr(module, "INPLACE", None)
    if not isinstance(inplace, dict):
        raise fail("INPLACE must be a dict (empty when nothing is updated in place)")
    for out, inp in inplace.items():
        if out not in outputs or inp not in inputs:
            raise fail(f"INPLACE entry {out!r} → {inp!r} names an unknown output or input")
    margin = getattr(module, "DECISION_MARGIN", "missing")
    if margin == "missing":
        raise fail("DECISION_MARGIN must be declared (None when there are no discrete decisions)")
    if margin is not None and not (isinstance(margin, (int, float)) and margin > 0):
        raise fail("DECISION_MARGIN must be None or a positive number")
    return Problem(
        id=pid,
        slug=slug,
        family=family,
        origin=origin,
        source=module.SOURCE,
        license=module.LICENSE,
        description=" ".join(doc.split()),
        workload=Workload(workload),
        smoke=Workload(smoke),
        inputs=inputs,
        outputs=outputs,
        inplace=dict(inplace),
        decision_margin=None if margin is None else float(margin),
        path=path,
        module=module,
        notes=str(getattr(module, "NOTES", "")),
    )
