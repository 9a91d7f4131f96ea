"""The harbor backend: a fresh container per evaluation through a Harbor 0.25 environment.

Per evaluation: create the environment (``EnvironmentFactory``; a registered type such as
``docker``/``modal``/``daytona`` or an ``import_path``), start it with the configured image
and GPUs and no network, upload the grading code (``engine/grading``, ``problems``) and the
job file, run ``python3 -m engine.grading.parent.supervise --job-file …`` (which deletes the job
file, supervises the worker with the contract's limits and prints the nonce-tagged outcome),
then stop and delete the environment. The image must provide Python, torch and the DSLs.

Harbor is imported lazily, so this module imports without it; :meth:`HarborBackend.validate`
checks the configuration and reports a clear error when Harbor or the environment type is
unusable (this machine has no Docker: it cannot run here).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.grading.api import Feedback, GradeRequest
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import (
    feedback_from,
    make_job,
    screen_request,
)
from engine.grading.parent.supervise import REPO_ROOT, ChildOutcome, tagged_messages
from engine.grading.verdict import InfrastructureError

UPLOADS = ("engine/__init__.py", "engine/grading", "problems")


class HarborConfigError(ValueError):
    """The harbor backend's configuration cannot work; the message says why."""


@dataclass
class HarborConfig:
    """Where and how to start the per-evaluation container."""

    docker_image: str = ""  # image with python3, torch and the DSLs
    environment_type: str | None = "docker"  # a harbor EnvironmentType value
    import_path: str | None = None  # or "module:Class" of a custom environment
    gpus: int = 1
    gpu_types: list[str] | None = None
    memory_mb: int | None = None
    remote_root: str = "/opt/mkb"
    python: str = "python3"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1


class HarborBackend:
    """Grades each submission in a fresh Harbor environment with GPUs."""

    name = "harbor"

    def __init__(self, config: HarborConfig, eval_config: EvalConfig | None = None) -> None:
        self.config = config
        self.eval_config = eval_config or EvalConfig()
        self._slots = asyncio.Semaphore(max(1, config.concurrency))

    def validate(self) -> type:
        """Check the configuration; returns the environment class or raises a clear error."""
        cfg = self.config
        if not cfg.docker_image:
            raise HarborConfigError("harbor backend: set docker_image (python3, torch, DSLs)")
        if cfg.gpus < 1:
            raise HarborConfigError("harbor backend: gpus must be at least 1 (scored grading)")
        if bool(cfg.environment_type) == bool(cfg.import_path):
            raise HarborConfigError(
                "harbor backend: give exactly one of environment_type and import_path"
            )
        try:
            from harbor.environments import factory
        except ImportError as exc:
            raise HarborConfigError(f"harbor backend: harbor is not installed ({exc})") from exc
        if cfg.import_path:
            from harbor.utils.import_path import import_class

            try:
                env_class = import_class(cfg.import_path, label="environment")
            except Exception as exc:  # noqa: BLE001
                raise HarborConfigError(
                    f"harbor backend: cannot import {cfg.import_path}: {exc}"
                ) from exc
        else:
            from harbor.models.environment_type import EnvironmentType

            known = {t.value for t in EnvironmentType}
            if cfg.environment_type not in known:
                raise HarborConfigError(
                    f"harbor backend: unknown environment type {cfg.environment_type!r} "
                    f"(one of {', '.join(sorted(known))})"
                )
            try:
                env_class = factory._load_environment_class(EnvironmentType(cfg.environment_type))
            except Exception as exc:  # noqa: BLE001 - missing extras, bad install
                raise HarborConfigError(
                    f"harbor backend: environment {cfg.environment_type!r} is unavailable: {exc}"
                ) from exc
        try:
            env_class.preflight()
        except BaseException as exc:  # noqa: BLE001 - preflight raises SystemExit
            raise HarborConfigError(
                f"harbor backend: {cfg.environment_type or cfg.import_path} preflight failed: {exc}"
            ) from exc
        return env_class  # type: ignore[no-any-return]

    def _environment(self, env_class: type, workdir: Path) -> Any:
        from harbor.models.task.config import EnvironmentConfig, NetworkMode
        from harbor.models.trial.paths import TrialPaths

        cfg = self.config
        task_env = EnvironmentConfig(
            docker_image=cfg.docker_image,
            gpus=cfg.gpus,
            gpu_types=cfg.gpu_types,
            memory_mb=cfg.memory_mb,
            network_mode=NetworkMode.NO_NETWORK,
        )
        env_dir = workdir / "environment"
        env_dir.mkdir()
        trial_paths = TrialPaths(workdir / "trial")
        trial_paths.mkdir()
        session = f"mkb-grade__{uuid.uuid4().hex[:8]}__env"
        try:
            return env_class(
                environment_dir=env_dir,
                environment_name="mkb-grade",
                session_id=session,
                trial_paths=trial_paths,
                task_env_config=task_env,
                **cfg.env_kwargs,
            )
        except RuntimeError as exc:  # e.g. "does not support GPU allocation"
            raise HarborConfigError(f"harbor backend: {exc}") from exc

    async def grade(self, request: GradeRequest) -> Feedback:
        opening = screen_request(request, self.eval_config)
        if opening is not None:
            return opening
        try:
            env_class = self.validate()
        except HarborConfigError as exc:
            return Feedback.decided(request, InfrastructureError(str(exc)))
        async with self._slots:
            workdir = Path(tempfile.mkdtemp(prefix="mkb-harbor-"))
            try:
                return await self._grade_in(env_class, request, workdir)
            except HarborConfigError as exc:
                return Feedback.decided(request, InfrastructureError(str(exc)))
            except Exception as exc:  # noqa: BLE001 - infrastructure: retryable error
                return Feedback.decided(
                    request, InfrastructureError(f"harbor environment failed: {exc!r}")
                )
            finally:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _grade_in(self, env_class: type, request: GradeRequest, workdir: Path) -> Feedback:
        cfg = self.config
        remote = cfg.remote_root
        job = make_job(request, "cuda", self.eval_config, f"{remote}/work")
        limits = self.eval_config.limits("cuda")
        job_file = workdir / "job.json"
        job_file.write_text(json.dumps({"job": job, "limits": asdict(limits)}))
        env = self._environment(env_class, workdir)
        await env.start(force_build=False)
        try:
            for rel in UPLOADS:
                source = REPO_ROOT / rel
                if source.is_dir():
                    await env.upload_dir(source, f"{remote}/{rel}")
                else:
                    await env.upload_file(source, f"{remote}/{rel}")
            await env.upload_file(job_file, f"{remote}/job.json")
            job_file.unlink()
            budget = int(
                limits.eager_timeout_s + limits.timeout_s + limits.grace_s
                + limits.judge_extra_s + 120
            )
            result = await env.exec(
                f"{cfg.python} -m engine.grading.parent.supervise --job-file {remote}/job.json",
                cwd=remote,
                env={"PYTHONPATH": remote, "PYTHONDONTWRITEBYTECODE": "1"},
                timeout_sec=budget,
            )
        finally:
            await env.stop(delete=True)
        messages, _ = tagged_messages(result.stdout or "", job["nonce"])
        outcomes = [m for m in messages if m.get("kind") == "outcome"]
        if not outcomes:
            tail = ((result.stdout or "") + (result.stderr or ""))[-2000:]
            return Feedback.decided(
                request,
                InfrastructureError(f"no outcome from the container (exit {result.return_code})"),
                log_tail=tail,
            )
        return feedback_from(request, ChildOutcome.from_dict(outcomes[0]["data"]), "cuda")

    async def close(self) -> None:
        return None
