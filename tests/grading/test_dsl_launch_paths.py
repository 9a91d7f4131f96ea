"""Launch counting and bypass on every supported call path of the real DSLs (CPU, sm_90a).

Each DSL runs in its own interpreter (fixtures/dsl_paths/probe.py) so that its hooks and
``CUTE_DSL_ARCH`` never leak into other tests. Skipped where the DSL is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.grading.runner import dsl_hooks

# slow: DSL kernels compiled; one xdist group: the module's two probes run once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dsl_launch_paths")]

PROBE = Path(__file__).parent / "fixtures" / "dsl_paths" / "probe.py"
COUNTED = {"plain": {"hooked": 2, "real": 2}, "bypass": {"hooked": 1, "real": 0}}


def _probe(dsl: str) -> dict[str, Any]:
    if not dsl_hooks.dsl_available(dsl):
        pytest.skip(f"{dsl} is not installed here")
    result = subprocess.run(
        [sys.executable, str(PROBE), dsl], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cute() -> dict[str, Any]:
    return _probe("cute")


@pytest.fixture(scope="module")
def tirx() -> dict[str, Any]:
    return _probe("tirx")


def test_cute_compiles_to_the_two_executors(cute: dict[str, Any]) -> None:
    default, tvmffi = cute["types"]
    assert default == "CudaDialectJitCompiledFunction"
    assert tvmffi.startswith("TVMFFIJitCompiledFunction")


@pytest.mark.parametrize("path", ["default", "tvmffi"])
def test_cute_each_launch_is_counted_once_and_bypass_skips_it(
    cute: dict[str, Any], path: str
) -> None:
    assert cute[path] == COUNTED
    assert cute["intact"]


def test_cute_tvmffi_compile_alone_gives_the_audit_its_kernel_name(cute: dict[str, Any]) -> None:
    names = cute["kernel_names"]
    assert len(names) == 1 and names[0].startswith("kernel_cutlass__double_kernel_")


@pytest.mark.parametrize("path", ["executable", "cached_function", "module_attribute"])
def test_tirx_each_launch_is_counted_once_and_bypass_skips_it(
    tirx: dict[str, Any], path: str
) -> None:
    assert tirx["paths"][path] == COUNTED
    assert tirx["kernel_names"] == ["double_kernel"]
    assert tirx["intact"]
