"""Agent jail start-up: a bare jail running ``true``, and the local sandbox's Harbor start.

Times, over ``--runs`` runs each:

* ``jail_true``: ``jail_argv(JailSpec(), ["true"])`` until it exits (uid switch + bwrap);
* ``jail_true_python``: the same with the sandbox Python bound (as agents get it; sources
  under ``/root`` are staged first);
* ``env_start``: ``LocalNamespaceEnvironment.start`` until the jail's holder is ready;
* ``env_exec``: one ``exec("true")`` joining the running jail;
* ``env_stop``: ``stop(delete=True)``.

Prints one JSON object: milliseconds, min/median/max per measurement.

    .venv/bin/python benchmarks/jail_startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harbor.models.task.config import EnvironmentConfig as TaskEnvironment  # noqa: E402
from harbor.models.trial.paths import TrialPaths  # noqa: E402

from engine.sandbox.agent_jail import python_binds  # noqa: E402
from engine.sandbox.jail import JailSpec, check_jail, jail_argv  # noqa: E402
from engine.sandbox.local_ns import LocalNamespaceEnvironment  # noqa: E402


def _summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "min": round(min(ms), 1),
        "median": round(statistics.median(ms), 1),
        "max": round(max(ms), 1),
    }


def _time_jail(spec: JailSpec, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        argv = jail_argv(spec, ["true"])
        done = subprocess.run(argv, capture_output=True, check=False)
        samples.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"jail failed: {done.stderr.decode()}")
    return samples


async def _time_environment(runs: int, root: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"env_start": [], "env_exec": [], "env_stop": []}
    env_dir = root / "environment"
    env_dir.mkdir()
    (env_dir / "hello.txt").write_text("hi\n")
    for i in range(runs):
        paths = TrialPaths(root / f"trial-{i}")
        paths.mkdir()
        env = LocalNamespaceEnvironment(
            environment_dir=env_dir,
            environment_name="bench",
            session_id=f"bench-{i}__env",
            trial_paths=paths,
            task_env_config=TaskEnvironment(workdir="/workspace", network_mode="no-network"),
            root_dir=str(root / "sandboxes"),
        )
        started = time.perf_counter()
        await env.start(force_build=False)
        times["env_start"].append(time.perf_counter() - started)
        started = time.perf_counter()
        result = await env.exec("true")
        times["env_exec"].append(time.perf_counter() - started)
        assert result.return_code == 0, result.stderr
        started = time.perf_counter()
        await env.stop(delete=True)
        times["env_stop"].append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    check_jail()
    python = [(p, p) for p in python_binds(Path(sys.executable).parent)]
    report: dict[str, object] = {
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "jail_true": _summary(_time_jail(JailSpec(), args.runs)),
        "jail_true_python": _summary(_time_jail(JailSpec(ro=python), args.runs)),
    }
    with tempfile.TemporaryDirectory() as scratch:
        for name, samples in asyncio.run(_time_environment(args.runs, Path(scratch))).items():
            report[name] = _summary(samples)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
