"""The judge's handle on a runner process: liveness and the runner's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from engine.grading.judge.job import runner_options
from engine.grading.judge.runner_proc import RunnerOptions, _alive, preload_modules, runner_env


def test_a_zombie_counts_as_exited_and_a_running_child_as_alive() -> None:
    # children by fork + exec (subprocess), not a bare os.fork() of the multi-threaded test
    # process (DeprecationWarning: fork() of a multi-threaded process may deadlock the child)
    sleeper_proc = subprocess.Popen(["sleep", "30"])
    quitter_proc = subprocess.Popen(["true"])
    sleeper, quitter = sleeper_proc.pid, quitter_proc.pid
    try:
        time.sleep(0.3)  # the quitter is a zombie now: exited, not yet reaped
        assert _alive(sleeper)
        assert not _alive(quitter)
    finally:
        os.kill(sleeper, signal.SIGKILL)
        sleeper_proc.wait()
        quitter_proc.wait()
    assert not _alive(quitter)  # reaped: no such process


def test_the_runner_environment_carries_no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary")
    monkeypatch.setenv("MKB_GRADER_TOKEN", "canary")
    monkeypatch.setenv("PYTHONPATH", "/work/main")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    env = runner_env(RunnerOptions(device="cpu", env={"MY_SECRET": "x"}))
    assert "canary" not in str(env) and "sk-" not in str(env) and "MY_SECRET" not in env
    assert "PYTHONPATH" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "3"


def test_a_runner_started_for_a_job_preloads_its_dsl_only_and_a_spare_both() -> None:
    for dsl, modules in (("cute", "cutlass,cutlass.cute"), ("tirx", "tvm,tvm_ffi")):
        options = runner_options({"device": "cuda", "dsl": dsl})
        assert options.dsl == dsl and preload_modules(options) == modules
    assert preload_modules(RunnerOptions(device="cuda")) == "cutlass,cutlass.cute,tvm,tvm_ffi"
    assert preload_modules(RunnerOptions(device="cuda", dsl="cute", preload_dsls=False)) == ""


MAIN = """
import argparse, json, os, socket
parser = argparse.ArgumentParser()
parser.add_argument("--sock-fd", type=int)
args, _ = parser.parse_known_args()
here = sorted(os.listdir(os.path.dirname(os.path.abspath(__file__))))
socket.socket(fileno=args.sock_fd).send(json.dumps({"op": "ready", "files": here}).encode())
"""


@pytest.mark.parametrize("jail", [False, True])
def test_a_runner_can_start_another_main_beside_its_files(tmp_path, jail: bool) -> None:  # type: ignore[no-untyped-def]
    """``spawn(main=...)`` (the layer benchmark's worker): that script runs in loop.py's place,
    from a folder holding the runner's files and it, jailed or not."""
    from engine.grading.judge.runner_proc import RUNNER_FILES, RunnerProcess
    from engine.sandbox import jail as jails

    if jail and jails.jail_problem() is not None:
        pytest.skip(f"no jail here: {jails.jail_problem()}")
    main = tmp_path / "bench_main.py"
    main.write_text(MAIN)
    runner = RunnerProcess.spawn(RunnerOptions("cpu", preload_dsls=False, jail=jail), main=main)
    try:
        ready = runner.wait_ready(60)
    finally:
        runner.close()
    assert set(ready["files"]) >= {*RUNNER_FILES, "bench_main.py"}
