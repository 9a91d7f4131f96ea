"""The instruction that opens every attempt, and the contract text shipped with the task.

The text names the DSL in exactly the places marked ``{dsl_name}``; everything else is the
same for both variants of a problem. The Deliverable, Implementation boundary and Grading
sections state rules; the Suggested workflow section only advises; the Skill section is the
skill directive. A transferred skill is appended verbatim under a neutral header.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.tasks.dsls import DslInfo
from engine.tasks.launch_guide import LAUNCH_GUIDE_FILE

WORKDIR = "/workspace"
SOLUTION_FILE = "solution.py"
SKILL_FILE = "SKILL.md"
PROBLEM_FILE = "problem.py"
CONTRACT_FILE = "CONTRACT.md"
DOCS_DIR = "docs"
MAX_SOURCE_KB = 300

TRANSFER_HEADER = "## Notes from a prior attempt"
TRANSFER_INTRO = (
    "The notes below were written by a previous attempt at this same problem that used "
    "{source_name} instead of {dsl_name}. They are reproduced verbatim."
)


@dataclass(frozen=True)
class InstructionParams:
    """Everything the instruction text depends on."""

    problem_id: str
    problem_description: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    workload: dict[str, object]
    dsl: DslInfo
    budget_minutes: int
    max_submissions: int
    gpu: str = "NVIDIA H200 (Hopper, sm_90a)"  # the grading target, described
    arch: str = "sm_90a"  # its CUDA architecture (problems/targets.py)


INSTRUCTION_TEMPLATE = """\
# Task {problem_id}: write a fast {dsl_name} implementation

{problem_description}

The file `{workdir}/{problem_file}` holds the PyTorch `reference`, the input generator
`make_inputs` and the fixed workload:
{workload_lines}
Inputs, in order: {inputs}. Output{output_plural}: {outputs}.

## Deliverable

Write one Python file, `{workdir}/{solution_file}` (at most {max_kb} kB), that defines
`solve({inputs})`. It receives the same positional inputs as `reference` and must return the
same output structure: the same container, nesting, tensor type, shape, dtype and device.
`solve` may compile and cache kernels and buffers at import time or on its first call, but it
must not cache results that depend on input values.

## Implementation boundary

- The work must be done by kernels you write in {dsl_name} ({dsl_import}). Every call of
  `solve` must launch at least one {dsl_name} kernel whose result the returned outputs depend
  on; PyTorch may glue and allocate around the kernels.
- Not allowed: other kernel languages or compilers (Triton, CUDA C/C++ through any loader,
  cupy, numba, ctypes, torch.compile or TorchScript), CUDA Graphs, kernels taken from
  libraries built on a DSL, and raw code escapes (inline PTX/CUDA source, LLVM inline
  assembly, external bitcode or modules).
- Do not import or call `reference` or `make_inputs` from `{solution_file}`, and do not read
  the grader's files. Specialise only on properties that hold for every legal input draw of
  this workload; values, and for some problems index structures and lengths, change between
  draws.

## Grading

The grading GPU is an {gpu}: kernels must compile for `{arch}`.
Each submission is graded on it in a fresh process with a 600-second limit, following
`{workdir}/{contract_file}`: a static check of the source, five correctness checks on
fresh random inputs against a float64-anchored tolerance, then 10 warm-up and 50 timed calls
(median, CUDA events), rechecks of timed outputs, and a test that the outputs stop being
correct when the {dsl_name} launches are skipped. Feedback reports the verdict, errors,
your median time, the eager PyTorch reference's median time and the speedup (capped at 100×).

Run `submit` (or `submit path/to/file.py`; default `{solution_file}`) to send a snapshot. The
command waits for the feedback and prints it; the wait counts against your time. You have
{max_submissions} submissions and {budget_minutes} minutes in total. When the time is up, the
current `{workdir}/{solution_file}` and `{workdir}/{skill_file}` are collected and the
implementation is graded once more; that final evaluation is your result.

There is no GPU and no network in this sandbox. Offline {dsl_name} documentation is in
`{workdir}/{docs_dir}/` (an API reference generated from the installed package and, where the
build had them, the DSL's own guide pages under `guides/`). `compile_check` (or
`compile_check path/to/file.py`) compiles your {dsl_name} kernels for the grading GPU
(`{arch}`) right here, without launching them: it calls `solve` once on small CPU inputs and
reports each compiled kernel or the compile error, so you can catch errors before you submit.
`{workdir}/{docs_dir}/{launch_guide}` shows the lowest-overhead way to compile a {dsl_name} kernel
once and call it from every `solve`, with measured host costs: the time of each call includes
the host work around its launches.

## Suggested workflow

These are suggestions, not rules. Read the problem file and the contract first. Get a simple
correct {dsl_name} implementation submitted early, then improve it step by step, submitting
to measure. Keep a copy of your best passing version; leave the best one in
`{solution_file}` when you stop.

## Skill

Keep `{workdir}/{skill_file}` current while you work: a note for a future attempt at this
problem. Record evidence-backed findings (what you measured or verified, with the numbers),
how you partitioned the work between eager PyTorch and {dsl_name} kernels and why, the
reasons behind failures you hit, the conditions under which each finding applies, and the
questions you left open. Write prose only: no code, no commands and no API instructions.
"""


def render_instruction(params: InstructionParams) -> str:
    """The instruction for one variant (without any transferred skill)."""
    workload_lines = "".join(f"  - `{k}` = {v!r}\n" for k, v in params.workload.items())
    return INSTRUCTION_TEMPLATE.format(
        problem_id=params.problem_id,
        problem_description=params.problem_description,
        workload_lines=workload_lines,
        inputs=", ".join(params.inputs),
        outputs=", ".join(params.outputs),
        output_plural="s" if len(params.outputs) > 1 else "",
        dsl_name=params.dsl.name,
        dsl_import=f"`{params.dsl.import_hint}`",
        workdir=WORKDIR,
        problem_file=PROBLEM_FILE,
        solution_file=SOLUTION_FILE,
        skill_file=SKILL_FILE,
        contract_file=CONTRACT_FILE,
        docs_dir=DOCS_DIR,
        launch_guide=LAUNCH_GUIDE_FILE,
        max_kb=MAX_SOURCE_KB,
        max_submissions=params.max_submissions,
        budget_minutes=params.budget_minutes,
        gpu=params.gpu,
        arch=params.arch,
    )


def append_transferred_skill(instruction: str, skill: str, source: DslInfo, target: DslInfo) -> str:
    """The target instruction with the source skill appended verbatim under a neutral header."""
    intro = TRANSFER_INTRO.format(source_name=source.name, dsl_name=target.name)
    return f"{instruction.rstrip()}\n\n{TRANSFER_HEADER}\n\n{intro}\n\n{skill}"


CONTRACT_TEMPLATE = """\
# Grading contract ({dsl_name} variant)

A submission is one Python file of at most {max_kb} kB defining `solve(*inputs)`, taking the
same positional inputs as the problem's `reference` and returning the same output structure.

## One evaluation

Everything below runs in a fresh child process with a 600-second limit covering import,
correctness, warm-up, timing and rechecks (the eager reference's own timing is excluded).

1. **Static check** of the source before it is imported. Rejected: other kernel languages or
   compilers (Triton; CUDA C/C++ through load_inline, nvrtc, cupy, numba or ctypes;
   torch.compile or torch.jit), CUDA Graphs, any use of `reference` or `make_inputs`, kernels
   imported from DSL kernel libraries, and raw code escapes (inline CUDA source, inline PTX,
   LLVM inline assembly, external bitcode, loading prebuilt modules).
2. **Correctness** on five input draws with fresh, unpredictable seeds. The anchor z is the
   reference run on inputs whose float32/float16/bfloat16 tensors are promoted to float64;
   v is the reference at the original dtypes. The reference runs with TF32 and
   reduced-precision reductions off and float32 matmul precision "highest"; these settings
   are not imposed on your code. For each floating output with machine epsilon ε:
   `max|u − z| ≤ 3 · max(max|v − z|, ε · max|z|)` over the finite positions of z; where z is
   infinite, u must equal it; any NaN fails. Integer, bool and fp8/fp4 outputs must equal v
   exactly. Container, length, nesting, `type(u) is torch.Tensor`, shape, dtype and device
   must match exactly.
3. **Timing**: 10 warm-up and 50 timed calls on fresh inputs generated outside the timed
   region; each call is timed end to end with CUDA events after a device synchronize; the
   median is reported. Three timed outputs are rechecked for correctness. The eager reference
   is timed the same way.
4. **DSL launches**: every call must launch at least one {dsl_name} kernel on which a returned
   output depends. Launches are counted, and a bypass test skips them (filling fresh memory
   with NaN): the outputs must then stop passing.
5. **Speedup** = eager median / implementation median, capped at 100×.

A scored pass needs all of the above. Inputs are checksummed around each call (except
declared in-place outputs), outputs may not alias inputs unless declared, and results travel
to the grader over a private channel.

Without a GPU (a CPU preview), correctness is checked but nothing is timed and the verdict is
"preview", never a scored pass.
"""


def render_contract(dsl: DslInfo) -> str:
    return CONTRACT_TEMPLATE.format(dsl_name=dsl.name, max_kb=MAX_SOURCE_KB)
