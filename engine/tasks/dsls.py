"""What differs between the two DSL variants of a problem: name, imports, packages."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DslInfo:
    """One kernel DSL as the task variant presents it."""

    key: str  # "cute" or "tirx"
    name: str  # the name the instruction uses
    distribution: str  # the pip package whose presence the docs builder checks
    requirements: tuple[str, ...]  # pip requirement lines for the sandbox image
    import_hint: str  # how the DSL is imported in Python
    doc_modules: tuple[str, ...]  # modules whose API the offline docs describe
    # more modules for tasks graded on one architecture (its tensor-core instructions)
    arch_doc_modules: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def modules_for(self, arch: str) -> tuple[str, ...]:
        """The doc modules of a task graded on ``arch``."""
        return self.doc_modules + self.arch_doc_modules.get(arch, ())


DSLS: dict[str, DslInfo] = {
    "cute": DslInfo(
        key="cute",
        name="CuTe DSL",
        distribution="nvidia-cutlass-dsl",
        requirements=("nvidia-cutlass-dsl[cu13]==4.8.1",),
        import_hint="import cutlass; import cutlass.cute as cute",
        doc_modules=("cutlass.cute", "cutlass.cute.runtime", "cutlass.cute.arch", "cutlass.utils"),
        arch_doc_modules={
            "sm_90a": ("cutlass.cute.nvgpu.warpgroup",),
            "sm_100a": ("cutlass.cute.nvgpu.tcgen05",),
        },
    ),
    "tirx": DslInfo(
        key="tirx",
        name="TIRx",
        distribution="apache-tvm",
        requirements=("apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.15.post2"),
        import_hint="import tvm; from tvm.script import tirx as T",
        doc_modules=("tvm.tirx", "tvm.script.tirx", "tvm.runtime"),
    ),
}


def dsl_info(key: str) -> DslInfo:
    try:
        return DSLS[key]
    except KeyError:
        raise KeyError(f"unknown DSL {key!r} (one of: {', '.join(DSLS)})") from None
