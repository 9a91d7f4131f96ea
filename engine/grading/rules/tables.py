"""The static rules' tables: stable reason codes and the names, attributes, keywords and
strings each code bans (data only; the checker is :mod:`engine.grading.rules.static`)."""

from __future__ import annotations

OTHER_LANGUAGE = "rule.other_language"
CUDA_GRAPH = "rule.cuda_graph"
REFERENCE_CALL = "rule.reference_call"
DSL_LIBRARY = "rule.dsl_library"
INLINE_SOURCE = "rule.inline_source"
DYNAMIC_CODE = "rule.dynamic_code"
SIZE = "rule.size"
SYNTAX = "rule.syntax"

# Dotted-name prefixes (modules or module attributes) and what using them means.
BANNED_NAMES: dict[str, tuple[str, str]] = {
    **{
        name: (OTHER_LANGUAGE, "another kernel language or compiler")
        for name in (
            "triton",
            "torch.utils.cpp_extension",
            "torch.compile",
            "torch.jit",
            "torch._dynamo",
            "torch._inductor",
            "torch.export",
            "torch.library",
            "torch.ops.load_library",
            "torch.cuda.jiterator",
            "torch._C",
            "cupy",
            "cupyx",
            "numba",
            "ctypes",
            "cffi",
            "pycuda",
            "cuda.bindings.nvrtc",
            "cuda.nvrtc",
            "cuda.core",
            "cuda.cuda",
            "cuda.bindings.nvjitlink",
            "tvm_ffi.cpp",
            "tvm.ffi.cpp",
            "tilelang",
            "jax",
            "warp",
            "taichi",
            "tensorrt",
            "torch_tensorrt",
            "tensorflow",
            "mojo",
            "hidet",
            "thunderkittens",
        )
    },
    **{
        name: (OTHER_LANGUAGE, "process control (subprocesses, fork, signals to other processes)")
        for name in (
            "subprocess",
            "multiprocessing",
            "concurrent.futures.process",
            "pty",
            "os.system",
            "os.popen",
            "os.fork",
            "os.forkpty",
            "os.kill",
            "os.killpg",
            "os.posix_spawn",
            "os.posix_spawnp",
            "os.execv",
            "os.execve",
            "os.execl",
            "os.execle",
            "os.execlp",
            "os.execlpe",
            "os.execvp",
            "os.execvpe",
            "os.spawnl",
            "os.spawnle",
            "os.spawnlp",
            "os.spawnlpe",
            "os.spawnv",
            "os.spawnve",
            "os.spawnvp",
            "os.spawnvpe",
            "os.putenv",
            "os.environ",
            "os.unsetenv",
            "os.dup2",
            "os.write",
            "os.openpty",
            "shutil.which",
        )
    },
    **{
        name: (CUDA_GRAPH, "CUDA Graphs are not allowed")
        for name in (
            "torch.cuda.CUDAGraph",
            "torch.cuda.graph",
            "torch.cuda.graphs",
            "torch.cuda.make_graphed_callables",
            "torch.cuda.is_current_stream_capturing",
        )
    },
    **{
        name: (DSL_LIBRARY, "kernels from a kernel library instead of your own DSL code")
        for name in (
            "cutlass.operators",
            "cutlass.op",
            "cutlass_cppgen",
            "cutlass_library",
            "cutlass.examples",
            "quack",
            "tokenspeed_quack",
            "flashinfer",
            "flash_attn",
            "flash_attn_interface",
            "tvm.contrib",
            "tvm.relax",
            "tvm.topi",
            "tvm.te",
            "tvm.dlight",
            "tvm.meta_schedule",
            "tvm.s_tir.dlight",
            "tvm.s_tir.meta_schedule",
            "tirx_kernels",
            "mlc_llm",
            "deep_gemm",
            "deep_ep",
            "sgl_kernel",
            "sglang",
            "vllm",
            "liger_kernel",
            "transformer_engine",
            "cudnn",
            "apex",
            "xformers",
            "fbgemm_gpu",
            "torchao",
            "bitsandbytes",
            "flash_mla",
            "fla",
            "mamba_ssm",
            "causal_conv1d",
            "cuda.coop",
            "cuda.cccl",
            "torch.nn.attention.flex_attention",
        )
    },
    **{
        name: (REFERENCE_CALL, "the grader's and the problem's code are off limits")
        for name in ("problems", "engine", "app", "storage", "screens", "__main__")
    },
    **{
        name: (DYNAMIC_CODE, "introspection or dynamic code that can reach anything")
        for name in (
            "builtins",
            "importlib",
            "inspect",
            "gc",
            "sys.modules",
            "sys._getframe",
            "sys.settrace",
            "sys.setprofile",
            "sys.addaudithook",
            "sys.meta_path",
            "sys.path_hooks",
            "pickle",
            "cPickle",
            "_pickle",
            "marshal",
            "dill",
            "shelve",
            "copyreg",
            "types.FunctionType",
            "types.CodeType",
            "types.ModuleType",
            "runpy",
            "code",
            "codeop",
            "zipimport",
            "_thread",
            "threading.settrace",
            "operator.attrgetter",
            "operator.methodcaller",
            "pydoc",
            "signal",
            "atexit",
            "ast",
            "dis",
            "faulthandler",
            "tracemalloc",
            "torch.overrides",
            "torch.utils._python_dispatch",
            "torch.utils._pytree",
        )
    },
}

# Attribute names flagged wherever they appear (whatever object they are read from).
BANNED_ATTRIBUTES: dict[str, tuple[str, str]] = {
    **{
        name: (INLINE_SOURCE, "raw code escape hatch (inline CUDA/PTX, external binaries)")
        for name in (
            "func_call",
            "cuda_func_call",
            "call_kernel",
            "inline_ptx",
            "inline_ptx_hl",
            "inline_asm",
            "BitCode",
            "LinkLibraries",
            "load_module",
            "ExternalBinaryModule",
            "export_to_c",
            "dump_to_object",
            "SourceModule",
            "iket_official_event",
            "build_inline",
            "from_source",
        )
    },
    **{
        name: (OTHER_LANGUAGE, "another kernel language or compiler")
        for name in (
            "load_inline",
            "cuModuleLoad",
            "cuModuleLoadData",
            "cuModuleLoadDataEx",
            "cuModuleLoadFatBinary",
            "cuLibraryLoadData",
            "cuLibraryLoadFromFile",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuLinkCreate",
            "cuLinkAddData",
            "nvrtcCreateProgram",
            "nvrtcCompileProgram",
            "jiterator",
            "RawKernel",
            "RawModule",
            "ElementwiseKernel",
            "ReductionKernel",
        )
    },
    **{
        name: (CUDA_GRAPH, "CUDA Graphs are not allowed")
        for name in (
            "CUDAGraph",
            "make_graphed_callables",
            "cudaGraphLaunch",
            "cuGraphLaunch",
            "cudaStreamBeginCapture",
            "cuStreamBeginCapture",
            "cudaGraphInstantiate",
            "cuGraphInstantiate",
            "RewriteCUDAGraph",
            "capture_begin",
            "capture_end",
        )
    },
    **{
        name: (REFERENCE_CALL, "the problem's reference and input generator are off limits")
        for name in ("reference", "make_inputs", "dropped_term", "reordered")
    },
    **{
        name: (DYNAMIC_CODE, "introspection or a private runtime path that bypasses accounting")
        for name in (
            "f_back",
            "f_globals",
            "f_locals",
            "f_builtins",
            "gi_frame",
            "cr_frame",
            "tb_frame",
            "__globals__",
            "__code__",
            "__closure__",
            "__builtins__",
            "__subclasses__",
            "__getattribute__",
            "__dict__",
            "__import__",
            "__loader__",
            "__spec__",
            "run_compiled_program",
            "capi_func",
            "jit_module",
            "ModuleGetFunction",
            "get_global_func",
            "_getframe",
        )
    },
}

# Builtins that evaluate or look up code by a computed name.
DYNAMIC_BUILTINS = {
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "open_code",
}
NAME_LOOKUP_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}
# Strings that name a banned thing in any spelling that would work through **kwargs / getattr.
BANNED_KEYWORDS = {"source_code": (INLINE_SOURCE, "TIRx source_code= inline CUDA")}
BANNED_STRINGS: dict[str, tuple[str, str]] = {
    "CUTE_DSL_LIBS": (INLINE_SOURCE, "linking external libraries into CuTe kernels"),
    "--link-libraries": (INLINE_SOURCE, "linking external libraries into CuTe kernels"),
    "TVM_CUDA_NVRTC_EXTRA_OPTS": (INLINE_SOURCE, "injecting options into TVM's NVRTC"),
    "LD_PRELOAD": (OTHER_LANGUAGE, "preloading native code"),
}
# Fragments that mark a string literal as CUDA C or PTX source.
# Paths into process state (other processes' memory, their command lines, file descriptors).
PROCESS_PATHS = ("/proc", "/dev/mem", "/dev/kmem", "/dev/shm")
SOURCE_MARKERS = ("__global__", ".visible .entry", ".target sm_", "asm volatile", "#include <cuda")
# Modules whose bare module object must not be passed around (only attributes may be used).
GUARDED_MODULE_ROOTS = {
    "torch",
    "os",
    "sys",
    "time",
    "threading",
    "cutlass",
    "tvm",
    "tvm_ffi",
    "cuda",
    "numpy",
    "operator",
    "functools",
}
