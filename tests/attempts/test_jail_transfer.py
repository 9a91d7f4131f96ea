"""What crosses into a transfer attempt's jail: the task's environment/ files, nothing else.

The source skill reaches the target agent through its instruction (the first prompt, see
test_attempt_e2e); the workspace holds exactly the built task's ``environment/`` (minus the
container build files). The source attempt's folders (its task, trials, solution) and the
instruction file stay outside.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from attempts_support import needs_namespaces
from harbor.models.task.config import EnvironmentConfig as TaskEnvironment
from harbor.models.trial.paths import TrialPaths

from engine.sandbox.local_ns import LocalNamespaceEnvironment
from engine.tasks.builder import build_task

SKILL_MARK = "mkb-transfer-skill-7f3a"
SOURCE_MARK = "mkb-source-attempt-91c2"


@needs_namespaces
async def test_only_the_task_environment_crosses_into_the_target(tmp_path: Path) -> None:
    source = build_task("p28", "cute", tmp_path / "source" / "task", name="src")
    (source.path.parent / "solution.py").write_text(f"# {SOURCE_MARK}\n")  # the source's work
    skill = f"# notes\n\n- {SKILL_MARK}: accumulate in float32\n"
    target = build_task(
        "p28", "tirx", tmp_path / "target" / "task", source_skill=skill, source_dsl="cute"
    )
    assert SKILL_MARK in (target.path / "instruction.md").read_text()  # the prompt carries it
    paths = TrialPaths(tmp_path / "target" / "trial")
    paths.mkdir()
    env = LocalNamespaceEnvironment(
        environment_dir=target.path / "environment",
        environment_name="target",
        session_id=f"transfer-{os.getpid()}__env",
        trial_paths=paths,
        task_env_config=TaskEnvironment(workdir="/workspace", network_mode="no-network"),
        root_dir=str(tmp_path / "sandboxes"),
    )
    await env.start(force_build=False)
    try:
        listed = await env.exec("cd /workspace && find . -type f | sort")
        expected = sorted(
            "./" + str(p.relative_to(target.path / "environment"))
            for p in (target.path / "environment").rglob("*")
            if p.is_file() and p.name != "Dockerfile"
        )
        assert listed.stdout.split() == expected  # exactly the environment files
        grep = await env.exec(
            f"grep -rl -e {SKILL_MARK} -e {SOURCE_MARK} /workspace /mkb /mkb-home /tmp /tests "
            "/solution /logs; echo done"
        )
        assert grep.stdout.strip() == "done", grep.stdout
        for host_path in (source.path, target.path / "instruction.md", tmp_path):
            r = await env.exec(f"ls {shlex.quote(str(host_path))}")
            assert r.return_code != 0, host_path
    finally:
        await env.stop(delete=True)
