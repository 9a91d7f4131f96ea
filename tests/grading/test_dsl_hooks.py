"""DSL launch hooks: importable without the DSLs, and exercised on stand-in runtime modules
that have the same classes and call paths as CuTe DSL and tvm-ffi (research-dsl.md §4)."""

from __future__ import annotations

import sys
import types

import pytest

from engine.grading.runner import dsl_hooks


def test_install_without_the_dsl_returns_none() -> None:
    for dsl in ("cute", "tirx"):
        if dsl_hooks.dsl_available(dsl):
            pytest.skip(f"{dsl} is installed here; covered by the GPU validation")
        assert dsl_hooks.install(dsl) is None
    with pytest.raises(ValueError):
        dsl_hooks.install("triton")


def _module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, module)
    return module


@pytest.fixture
def fake_cute(monkeypatch: pytest.MonkeyPatch) -> type:
    """A stand-in for cutlass: a compiled function whose call runs the executor."""
    launches: list[str] = []

    class JitExecutor:
        def run_compiled_program(self, exe_args):
            launches.append("kernel")
            exe_args[0].fill_(1.0)
            return 0

    class JitCompiledFunction:
        def __init__(self, name):
            self.kernel_info = {f"kernel_cutlass_{name}_0": None}
            self.executor = JitExecutor()

        def run_compiled_program(self, exe_args):
            return self.executor.run_compiled_program(exe_args)

        def __call__(self, *args):
            return self.run_compiled_program(list(args))

    for name in ("cutlass", "cutlass.cute", "cutlass.base_dsl"):
        _module(monkeypatch, name)
    _module(
        monkeypatch,
        "cutlass.base_dsl.jit_executor",
        JitExecutor=JitExecutor,
        JitCompiledFunction=JitCompiledFunction,
    )
    JitCompiledFunction.launches = launches
    return JitCompiledFunction


def test_cute_launches_are_counted_and_bypassed(fake_cute: type) -> None:
    import torch

    counter = dsl_hooks.install("cute")
    assert counter is not None
    try:
        fn = fake_cute("rmsnorm")
        out = torch.zeros(4)
        fn(out)
        fn(out)
        assert counter.count == 2 and fake_cute.launches == ["kernel", "kernel"]
        assert "kernel_cutlass_rmsnorm_0" in counter.kernel_names
        counter.bypass = True
        fresh = torch.zeros(4)
        fn(fresh)
        assert fake_cute.launches == ["kernel", "kernel"]  # skipped
        assert bool((fresh == 0).all())
        assert counter.intact()
    finally:
        counter.uninstall()
    executor = sys.modules["cutlass.base_dsl.jit_executor"].JitExecutor
    assert not hasattr(executor.run_compiled_program, "__wrapped__")


def test_removed_hook_is_detected(fake_cute: type) -> None:
    counter = dsl_hooks.install("cute")
    assert counter is not None
    try:
        executor = sys.modules["cutlass.base_dsl.jit_executor"].JitExecutor
        executor.run_compiled_program = executor.run_compiled_program.__wrapped__
        assert not counter.intact()
    finally:
        counter.uninstall()


def test_tirx_cuda_module_functions_are_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []

    class Module:
        def __init__(self, kind):
            self.kind = kind

        def _collect_from_import_tree(self, pred):
            return [self] if pred(self) else []

        def get_function(self, name):
            return lambda *args: calls.append((self.kind, name, args))

        def inspect_source(self):
            return 'extern "C" __global__ void __launch_bounds__(128) main_kernel(float* A) {}'

    _module(monkeypatch, "tvm_ffi", Module=Module)
    _module(monkeypatch, "tvm")
    counter = dsl_hooks.install("tirx")
    assert counter is not None
    try:
        Module("cuda").get_function("main")(1, 2)
        Module("llvm").get_function("host_only")(3)
        assert counter.count == 1 and counter.labels == ["tirx:main"]
        assert counter.kernel_names == {"main_kernel"}  # for the profiler cross-check
        counter.bypass = True
        Module("cuda").get_function("main")(4)
        assert calls == [("cuda", "main", (1, 2)), ("llvm", "host_only", (3,))]
    finally:
        counter.uninstall()
