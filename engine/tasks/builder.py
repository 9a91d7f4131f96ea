"""Build one Harbor task directory per problem × DSL, content-hashed so stale builds show.

Layout of a built variant ``<out>/<pid>-<dsl>/``::

    task.toml            agent timeout = budget, no network, 2 CPUs, 8 GB, workdir /workspace;
                         [metadata] names the grading GPU and its arch
    instruction.md       the instruction (plus a transferred skill for skill-conditioned runs)
    manifest.json        inputs hash, file hashes, DSL package versions, grading GPU
    environment/         copied into the workdir: problem.py, problems/ (the shared modules
                         and every helper the problem imports, so problem.py runs without
                         this project installed), CONTRACT.md, bin/submit, docs/, Dockerfile
    tests/               the final evaluation for plain ``harbor run`` (CPU preview)
    solution/solve.sh    only when a reference solution is given (oracle runs)
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import problems
from engine.tasks import instruction as ins
from engine.tasks.compile_check_script import COMPILE_CHECK_PATH, render_compile_check_script
from engine.tasks.docs import build_docs, package_version
from engine.tasks.dsls import DslInfo, dsl_info
from engine.tasks.final_eval_script import FINAL_EVAL_PY, TEST_SH
from engine.tasks.guides import copy_guides, guides_digest
from engine.tasks.launch_guide import LAUNCH_GUIDE_FILE, render_launch_guide
from engine.tasks.submit_script import MAILBOX, SUBMIT_PATH, render_submit_script
from problems.targets import DEFAULT_GPU, Target, target

if TYPE_CHECKING:
    from problems.spec import Problem

BUILDER_VERSION = "1"
DEFAULT_BUDGET_S = 40 * 60
DEFAULT_MAX_SUBMISSIONS = 10
MAX_SOURCE_BYTES = ins.MAX_SOURCE_KB * 1024
CPUS = 2
MEMORY_MB = 8192
VENDORED_MODULES = ("common.py", "spec.py", "compare.py")
MANIFEST = "manifest.json"
BASE_IMAGE = "pytorch/pytorch:2.13.0-cuda13.2-cudnn9-runtime"


@dataclass(frozen=True)
class BuiltTask:
    path: Path
    problem_id: str
    dsl: str
    inputs_sha256: str


def _problem_source(problem_id: str) -> tuple[Problem, bytes]:
    from problems import registry

    problem = registry.get(problem_id)
    return problem, Path(problem.path).read_bytes()


def _imported_problem_modules(source: bytes) -> set[str]:
    """Dotted names under ``problems`` that a source imports (``from problems.x import _y``
    counts ``problems.x._y`` when that is a module, else ``problems.x``)."""
    root = Path(problems.__file__).resolve().parent
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("problems."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "problems" and not node.module.startswith("problems."):
                continue
            names.add(node.module)
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if (root.parent / (dotted.replace(".", "/") + ".py")).is_file():
                    names.add(dotted)
    names.discard("problems")
    return names


def vendored_problem_files(problem_source: bytes = b"") -> dict[str, bytes]:
    """The ``problems`` package files a built task ships, by path inside ``problems/``: the
    shared modules plus every helper the problem imports, followed through their imports."""
    root = Path(problems.__file__).resolve().parent
    files = {name: (root / name).read_bytes() for name in VENDORED_MODULES}
    pending = [problem_source, *files.values()]
    while pending:
        for dotted in sorted(_imported_problem_modules(pending.pop())):
            rel = Path(*dotted.split(".")[1:])
            module = root / rel.with_suffix(".py")
            if module.is_file():
                key = rel.with_suffix(".py").as_posix()
            elif (root / rel / "__init__.py").is_file():
                module, key = root / rel / "__init__.py", (rel / "__init__.py").as_posix()
            else:
                raise FileNotFoundError(f"the problem imports {dotted}, which does not exist")
            if key in files:
                continue
            files[key] = module.read_bytes()
            pending.append(files[key])
            for parent in rel.parents:  # subpackages need their __init__.py
                init = (parent / "__init__.py").as_posix()
                if parent != Path(".") and init not in files:
                    files[init] = (root / init).read_bytes()
    return dict(sorted(files.items()))


def _index_guides(index: Path, guides: dict) -> None:
    """List the upstream guide pages (or say how to get them) in the docs index."""
    lines = ["", f"## Upstream guides ({guides['tag']})", ""]
    if guides["pages"]:
        lines.append(f"Pages of {guides['source']}, unchanged:")
        lines += [f"- [guides/{p}](guides/{p})" for p in guides["pages"]]
    else:
        lines.append(
            "Not included in this build (the machine that built it had no cached "
            "copy; `mkb tasks guides --fetch` downloads them where a network exists)."
        )
    with index.open("a") as fh:
        fh.write("\n".join(lines) + "\n")


def inputs_hash(
    problem_source: bytes,
    dsl: DslInfo,
    budget_s: int,
    max_submissions: int,
    source_skill: str | None,
    source_dsl: str | None,
    solution_source: str | None,
    gpu: str = DEFAULT_GPU,
) -> str:
    """A hash over everything a built task depends on (sources, parameters, versions, the
    grading GPU: a change of target makes a build stale)."""
    gpu_target = target(gpu)
    h = hashlib.sha256()
    parts: list[bytes] = [
        BUILDER_VERSION.encode(),
        problem_source,
        *(name.encode() + data for name, data in vendored_problem_files(problem_source).items()),
        Path(ins.__file__).read_bytes(),
        render_launch_guide(dsl, gpu_target).encode(),
        render_submit_script(MAX_SOURCE_BYTES).encode(),
        render_compile_check_script(gpu_target.arch).encode(),
        FINAL_EVAL_PY.encode(),
        dsl.key.encode(),
        str(package_version(dsl.distribution)).encode(),
        guides_digest(dsl.key).encode(),
        str(budget_s).encode(),
        str(max_submissions).encode(),
        (source_skill or "").encode(),
        (source_dsl or "").encode(),
        (solution_source or "").encode(),
        f"gpu={gpu_target.key}:{gpu_target.arch}".encode(),
    ]
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def files_hash(task_dir: Path) -> dict[str, str]:
    """sha256 of every file in a built task except the manifest."""
    out: dict[str, str] = {}
    for path in sorted(task_dir.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            out[str(path.relative_to(task_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def task_toml(problem_id: str, dsl: DslInfo, budget_s: int, gpu: Target) -> str:
    return f"""schema_version = "1.4"

[metadata]
problem = "{problem_id}"
dsl = "{dsl.key}"
builder = "mkb {BUILDER_VERSION}"
gpu = "{gpu.key}"
gpu_name = "{gpu.name}"
arch = "{gpu.arch}"

[agent]
timeout_sec = {float(budget_s)}

[verifier]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
cpus = {CPUS}
memory_mb = {MEMORY_MB}
network_mode = "no-network"
workdir = "{ins.WORKDIR}"
"""


def dockerfile(dsl: DslInfo) -> str:
    reqs = " ".join(f'"{r}"' for r in dsl.requirements)
    return (
        f"FROM {BASE_IMAGE}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends tmux "
        "&& rm -rf /var/lib/apt/lists/*\n"
        f"RUN pip install --no-cache-dir {reqs}\n"
        f"WORKDIR {ins.WORKDIR}\n"
        f"COPY . {ins.WORKDIR}/\n"
        f"RUN mkdir -p {MAILBOX} && ln -s {ins.WORKDIR}/{SUBMIT_PATH} /usr/local/bin/submit\n"
    )


def build_task(
    problem_id: str,
    dsl: str,
    out_root: Path,
    *,
    budget_s: int = DEFAULT_BUDGET_S,
    max_submissions: int = DEFAULT_MAX_SUBMISSIONS,
    source_skill: str | None = None,
    source_dsl: str | None = None,
    solution_source: str | None = None,
    name: str | None = None,
    gpu: str = DEFAULT_GPU,
) -> BuiltTask:
    """Write one task variant graded on ``gpu`` (``b200``, ``h200`` or ``h100``: its arch
    goes into the instruction, metadata, compile_check and docs); returns where it is.
    Rebuilds from scratch every time."""
    info = dsl_info(dsl)
    gpu_target = target(gpu)
    problem, problem_src = _problem_source(problem_id)
    digest = inputs_hash(
        problem_src,
        info,
        budget_s,
        max_submissions,
        source_skill,
        source_dsl,
        solution_source,
        gpu_target.key,
    )
    task_dir = Path(out_root) / (name or f"{problem.id}-{info.key}")
    if task_dir.exists():
        shutil.rmtree(task_dir)
    env_dir = task_dir / "environment"
    tests_dir = task_dir / "tests"
    (env_dir / "problems").mkdir(parents=True)
    (env_dir / "bin").mkdir()
    (tests_dir / "problems").mkdir(parents=True)

    text = _instruction(
        problem, info, budget_s, max_submissions, source_skill, source_dsl, gpu_target
    )
    (task_dir / "instruction.md").write_text(text)
    (task_dir / "task.toml").write_text(task_toml(problem.id, info, budget_s, gpu_target))
    _write_problem_files(problem_src, (env_dir, tests_dir))
    docs_summary = _write_environment(env_dir, info, gpu_target)
    _write_tests(tests_dir)
    if solution_source is not None:
        _write_solution(task_dir / "solution", solution_source)

    manifest = {
        "problem": problem.id,
        "dsl": info.key,
        "budget_s": budget_s,
        "max_submissions": max_submissions,
        "transfer_from": source_dsl if source_skill is not None else None,
        "builder": BUILDER_VERSION,
        "gpu": gpu_target.key,
        "gpu_name": gpu_target.name,
        "arch": gpu_target.arch,
        "inputs_sha256": digest,
        "docs": docs_summary,
        "files": files_hash(task_dir),
    }
    (task_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return BuiltTask(task_dir, problem.id, info.key, digest)


def _instruction(
    problem: Problem,
    info: DslInfo,
    budget_s: int,
    max_submissions: int,
    source_skill: str | None,
    source_dsl: str | None,
    gpu: Target,
) -> str:
    """The instruction text, with the transferred skill appended when there is one."""
    params = ins.InstructionParams(
        problem_id=problem.id,
        problem_description=problem.description,
        inputs=problem.inputs,
        outputs=problem.outputs,
        workload=dict(problem.workload),
        dsl=info,
        budget_minutes=round(budget_s / 60),
        max_submissions=max_submissions,
        gpu=gpu.describe(),
        arch=gpu.arch,
    )
    text = ins.render_instruction(params)
    if source_skill is not None:
        text = ins.append_transferred_skill(text, source_skill, dsl_info(source_dsl or ""), info)
    return text


def _write_problem_files(problem_src: bytes, folders: tuple[Path, ...]) -> None:
    """The problem and the ``problems`` helpers it needs, in each of ``folders``."""
    vendored = vendored_problem_files(problem_src)
    for folder in folders:
        (folder / ins.PROBLEM_FILE).write_bytes(problem_src)
        (folder / "problems" / "__init__.py").write_text('"""Helpers the problem imports."""\n')
        for rel, data in vendored.items():
            target = folder / "problems" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def _write_environment(env_dir: Path, info: DslInfo, gpu: Target) -> dict[str, Any]:
    """The agent's workspace beyond the problem: contract, submit script, Dockerfile, docs
    (the API reference, guide pages and launch guide of the grading GPU's architecture).

    Returns the docs summary recorded in the manifest."""
    (env_dir / ins.CONTRACT_FILE).write_text(ins.render_contract(info))
    submit = env_dir / SUBMIT_PATH
    submit.write_text(render_submit_script(MAX_SOURCE_BYTES))
    submit.chmod(0o755)
    check = env_dir / COMPILE_CHECK_PATH
    check.write_text(render_compile_check_script(gpu.arch))
    check.chmod(0o755)
    (env_dir / "Dockerfile").write_text(dockerfile(info))
    docs = env_dir / ins.DOCS_DIR
    docs_summary = build_docs(info, docs, info.modules_for(gpu.arch) if _has(info) else None)
    docs_summary["guides"] = copy_guides(info.key, docs / "guides", arch=gpu.arch)
    _index_guides(docs / "README.md", docs_summary["guides"])
    (docs / LAUNCH_GUIDE_FILE).write_text(render_launch_guide(info, gpu))
    with (docs / "README.md").open("a") as fh:
        fh.write(
            f"\n## Calling kernels\n\n- [{LAUNCH_GUIDE_FILE}]({LAUNCH_GUIDE_FILE}): the "
            "lowest-overhead way to call a compiled kernel from `solve`, with measured costs\n"
            f"\n## Grading GPU\n\n{gpu.describe()}: compile for `{gpu.arch}`. Tensor-core "
            f"instructions of this architecture: {', '.join(gpu.features)}.\n"
        )
    return docs_summary


def _has(info: DslInfo) -> bool:
    """The DSL's package is installed here (else the docs are a placeholder page)."""
    return package_version(info.distribution) is not None


def _write_tests(tests_dir: Path) -> None:
    """The final evaluation a plain ``harbor run`` verifier runs."""
    test_sh = tests_dir / "test.sh"
    test_sh.write_text(TEST_SH.format(workdir=ins.WORKDIR, solution=ins.SOLUTION_FILE))
    test_sh.chmod(0o755)
    (tests_dir / "final_eval.py").write_text(FINAL_EVAL_PY)


def _write_solution(sol_dir: Path, solution_source: str) -> None:
    """The oracle's solution and the ``solve.sh`` that puts it in place."""
    sol_dir.mkdir()
    (sol_dir / "solution.py").write_text(solution_source)
    solve = sol_dir / "solve.sh"
    solve.write_text(f"#!/bin/bash\ncp /solution/solution.py {ins.WORKDIR}/{ins.SOLUTION_FILE}\n")
    solve.chmod(0o755)


def staleness(task_dir: Path, gpu: str | None = None) -> list[str]:
    """Why a built task no longer matches its inputs or its own files, or (``gpu`` given) was
    built for another grading GPU (empty: up to date)."""
    path = Path(task_dir) / MANIFEST
    if not path.is_file():
        return ["no manifest.json (not built by mkb tasks build)"]
    manifest = json.loads(path.read_text())
    reasons: list[str] = []
    built_for = target(manifest.get("gpu", DEFAULT_GPU))
    if gpu is not None and target(gpu) != built_for:
        reasons.append(
            f"built for {built_for.describe()}, not the grading GPU {target(gpu).describe()}"
        )
    try:
        _, src = _problem_source(manifest["problem"])
    except KeyError as exc:
        return [f"problem no longer exists: {exc}"]
    solution = Path(task_dir) / "solution" / "solution.py"
    instruction = (Path(task_dir) / "instruction.md").read_text()
    skill = None
    if manifest.get("transfer_from"):
        skill = instruction.split(ins.TRANSFER_HEADER, 1)[-1].split("\n\n", 2)[-1]
    expected = inputs_hash(
        src,
        dsl_info(manifest["dsl"]),
        manifest["budget_s"],
        manifest["max_submissions"],
        skill,
        manifest.get("transfer_from"),
        solution.read_text() if solution.is_file() else None,
        built_for.key,
    )
    if expected != manifest["inputs_sha256"]:
        reasons.append("inputs changed since the build (problem, templates, versions or params)")
    current = files_hash(Path(task_dir))
    changed = sorted(set(current.items()).symmetric_difference(manifest["files"].items()), key=str)
    if changed:
        names = sorted({name for name, _ in changed})
        reasons.append(f"files edited after the build: {', '.join(names[:5])}")
    return reasons
