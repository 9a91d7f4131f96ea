"""``cute.compile`` reuses this source's delivered entry (engine/grading/runner/compiled_cute.py):
the real CuTe DSL compiling p28's CuTe solution for sm_90a on this CPU (no launch), in two
interpreters as two gradings of one source would (fixtures/compiled/cute_compile_probe.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest

from engine.grading.runner.compiled_cute import _describe, module_key

PROBE = Path(__file__).parent / "fixtures" / "compiled" / "cute_compile_probe.py"
NO_CUBIN = hashlib.sha256(b"").hexdigest()


def _probe(work: Path, *args: str) -> dict[str, Any]:
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(PROBE), str(work), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first grading (nothing delivered) and a second one given the first's compile
    folder as its entry (the judge delivers only tagged files; these all are)."""
    base = tmp_path_factory.mktemp("cute-compile")
    first = _probe(base / "first", "first")
    second = _probe(base / "second", "second", str(base / "first" / ".mkb-compile"))
    return first, second


def test_a_second_grading_loads_the_same_device_code_instead_of_compiling(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The second interpreter runs no compile for A and its function carries the very module
    a fresh compile produced: the same lowered bytecode (host code and the cubin in it) and
    the same kernel names for the launch hooks."""
    first, second = runs
    assert first["compiles"][0] == 1 and second["compiles"][0] == 0
    assert second["modules"][0] == first["modules"][0]
    assert second["cubins"][0] == first["cubins"][0] != NO_CUBIN
    assert second["kernels"][0] == first["kernels"][0] != []  # what the kernel audit reads


def test_a_file_in_cutes_cache_folder_is_not_loaded_unless_delivered(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """A's file (tagged, even) lies in CUTE_DSL_CACHE_DIR, where a submission can write:
    the first interpreter's second compile of A compiles again, not loading it."""
    first, _ = runs
    assert first["compiles"][1] == 1
    assert first["modules"][1] == first["modules"][0]  # the compile is deterministic


def test_another_module_never_gets_the_entry_and_a_bad_file_is_compiled(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """B (another shape: another module) compiles with A's file delivered; with its own file
    delivered but corrupted (its CRC fails), it compiles too, to the same code."""
    first, second = runs
    assert first["compiles"][2] == 1 and first["modules"][2] != first["modules"][0]
    assert second["compiles"][1] == 1 and second["modules"][1] == first["modules"][2]


def test_what_cute_compile_compiled_is_kept_with_the_gradings_tag(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Each compiled module is kept once, tagged under the key; a loaded one is not kept
    again (the second interpreter keeps B only, which it compiled)."""
    first, second = runs
    names = [name for name, _ in first["kept"]]
    assert len(names) == 2 and all(tagged for _, tagged in first["kept"])
    assert all(name.startswith("cute/cute_dsl_") for name in names)
    assert len(second["kept"]) == 1 and second["kept"][0][1] and second["kept"][0][0] in names


class _Spec:
    def __init__(self, device: str) -> None:
        self.name, self.shape, self.device_type_name = "mX", [8, 4096], device


def test_the_argument_checks_are_named_by_content_never_by_address() -> None:
    """The key's TVM-FFI part: equal checks give equal text, another device another text,
    and a value named only by its address stops the key (the compile goes on uncached)."""
    assert _describe([_Spec("cuda")]) == _describe([_Spec("cuda")])
    assert _describe([_Spec("cuda")]) != _describe([_Spec("cpu")])
    with pytest.raises(ValueError):
        _describe([object()])


def _dsl(arch: str = "sm_90a", tvm_ffi: bool = False) -> NS:
    """The parts of CuTe's DSL object the key reads (its traced-module hash a constant)."""
    return NS(
        get_module_hash=lambda module, name: "h",
        compile_options=NS(gpu_arch="", enable_tvm_ffi=tvm_ffi),
        envar=NS(arch=arch),
        _tvm_ffi_args_spec_converter=None,
    )


def test_the_key_names_the_pipeline_and_arch_and_stops_where_it_cannot_name() -> None:
    """CuTe's hash leaves out a pipeline given to ``cute.compile``: the key has it, and the
    arch; a pipeline object, or TVM-FFI checks it cannot read, stop the key (no reuse)."""
    ctx = NS(module=None, function_name="f", pipeline=None)
    keys = {
        module_key(_dsl(), ctx),
        module_key(_dsl(), NS(module=None, function_name="f", pipeline="builtin.module()")),
        module_key(_dsl("sm_100a"), ctx),
    }
    assert len(keys) == 3 and module_key(_dsl(), ctx) in keys
    with pytest.raises(ValueError):
        module_key(_dsl(), NS(module=None, function_name="f", pipeline=object()))
    with pytest.raises(ValueError):
        module_key(_dsl(tvm_ffi=True), ctx)
