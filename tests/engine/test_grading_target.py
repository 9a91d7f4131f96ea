"""``[grading] gpu``: parsed with the config, resolved against what the grading host reports
before an engine writes anything, and stored with the experiment.

The host reports come through the real interfaces: a fake ``nvidia-smi`` on PATH for the
local grader (what it and ``gpu_count`` read on a host without the driver's /proc files),
and a real ``mkb grader`` http server whose ``/status`` names its GPUs for http grading.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine.config import ConfigError, load_config, parse_config
from engine.factory import make_backend, make_runner
from engine.grading.backends.http_server import start_server
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend
from engine.targets import PROC_GPUS, local_gpu_names, resolve_experiment_gpu
from problems.targets import TargetMismatchError
from storage import queries
from storage.store import Store

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
[experiment]
name = "target"
problems = ["p28"]
dsls = ["cute"]
agent = "simulated"
grading = "{grading}"

[[models]]
name = "sim/a"

[grading]
{options}
"""
needs_no_driver = pytest.mark.skipif(
    PROC_GPUS.is_dir(), reason="this host has a real GPU driver: the fake report needs none"
)


def _config(grading: str = "local", **options: Any) -> str:
    lines = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in options.items())
    return CONFIG.format(grading=grading, options=lines)


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install a fake ``nvidia-smi`` reporting the given GPU names; returns the setter."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()

    def install(*names: str) -> None:
        lines = "".join(f"GPU {i}: {n} (UUID: GPU-fake-{i})\\n" for i, n in enumerate(names))
        script = bin_dir / "nvidia-smi"
        script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] && printf "{lines}"\n')
        script.chmod(0o755)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


# -- the config --------------------------------------------------------------------------------
def test_gpu_is_parsed_and_kept_out_of_the_backend_options() -> None:
    config = parse_config(_config(gpu="b200", gpus="none"))
    assert config.gpu == "b200" and config.grading_options == {"gpus": "none"}
    assert parse_config(_config()).gpu == "auto"


@pytest.mark.parametrize(
    ("grading", "options", "message"),
    [
        ("local", {"gpu": "a100"}, "[grading].gpu: must be one of b200, h200, h100, auto"),
        ("harbor", {"gpu": "auto"}, "harbor grading cannot report its GPU"),
    ],
)
def test_bad_gpu_settings_are_refused_naming_the_field(
    grading: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(grading, **options), "exp.toml")
    assert "exp.toml" in str(err.value) and message in str(err.value)


def test_the_paper_config_names_the_b200() -> None:
    config = load_config(REPO / "experiments" / "paper.toml")
    assert config.gpu == "b200"


# -- the local grader's host report ------------------------------------------------------------
@needs_no_driver
def test_local_names_follow_the_gpus_option_and_visible_devices(fake_smi, monkeypatch) -> None:
    fake_smi("NVIDIA H200", "NVIDIA H100 80GB HBM3")
    assert local_gpu_names() == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert local_gpu_names([1]) == ["NVIDIA H100 80GB HBM3"]
    assert local_gpu_names("none") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert local_gpu_names() == ["NVIDIA H100 80GB HBM3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpu_names() == []


def test_driver_files_are_read_before_nvidia_smi(tmp_path: Path) -> None:
    for i, model in enumerate(["NVIDIA B200", "NVIDIA B200"]):
        info = tmp_path / f"0000:0{i}:00.0" / "information"
        info.parent.mkdir()
        info.write_text(f"Model: \t\t {model}\nIRQ:   \t\t 42\n")
    assert local_gpu_names(environ={"PATH": ""}, proc_root=tmp_path) == ["NVIDIA B200"] * 2


@needs_no_driver
async def test_a_config_the_local_host_contradicts_is_refused_before_anything_is_written(
    fake_smi, tmp_path: Path
) -> None:
    fake_smi("NVIDIA H200")
    config = parse_config(_config(gpu="b200"))
    backend = make_backend(config)  # the real local grader: it sees the fake GPU too
    assert backend.device == "cuda"  # type: ignore[attr-defined]
    store = Store(tmp_path / "s.sqlite")
    try:
        engine = Engine(store, config, make_runner(config), backend)
        with pytest.raises(TargetMismatchError) as err:
            await engine.run()
        assert await store.read(queries.experiments) == []  # nothing was written
    finally:
        await backend.close()
        store.close()
    message = str(err.value)
    assert 'gpu = "b200" (NVIDIA B200 (Blackwell, sm_100a))' in message
    assert "reports NVIDIA H200 (NVIDIA H200 (Hopper, sm_90a))" in message


@needs_no_driver
async def test_auto_takes_the_local_hosts_gpu(fake_smi) -> None:
    fake_smi("NVIDIA B200")
    config = parse_config(_config())
    backend = make_backend(config)
    try:
        assert (await resolve_experiment_gpu(config, backend)).gpu == "b200"
    finally:
        await backend.close()


async def test_a_preview_host_accepts_any_target_and_auto_means_the_h200() -> None:
    cpu = make_backend(parse_config(_config(gpus="none")))
    try:
        for gpu, expected in (("b200", "b200"), ("auto", "h200")):
            config = parse_config(_config(gpu=gpu, gpus="none"))
            assert (await resolve_experiment_gpu(config, cpu)).gpu == expected
    finally:
        await cpu.close()


# -- http grading: each grader's /status ------------------------------------------------------
class ReportingBackend(SimulatedBackend):
    """A grader backend that names its GPUs in ``/status``, as a B200 host's grader would."""

    def __init__(self, gpu_names: list[str] | None) -> None:
        super().__init__()
        self.names = gpu_names

    def status(self) -> dict[str, Any]:
        base: dict[str, Any] = {"backend": "simulated", "slots": ["gpu0"], "queued": 0}
        return base if self.names is None else {**base, "gpu_names": self.names}

    async def close(self) -> None:
        return None


@pytest.fixture
async def grader():
    """Start a grader server for a backend; yields the starter, cleans every server up."""
    runners = []

    async def start(names: list[str] | None) -> str:
        runner, port = await start_server(ReportingBackend(names), "127.0.0.1", 0, "t0k")
        runners.append(runner)
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def _run_http(url: str, gpu: str, db: Path) -> tuple[Any, Any]:
    config = parse_config(_config("http", gpu=gpu, urls=[url], token="t0k"))
    backend = make_backend(config)
    store = Store(db)
    try:
        summary = await Engine(store, config, make_runner(config), backend).run()
        return summary, await store.read(queries.experiment, config.id)
    finally:
        await backend.close()
        store.close()


async def test_http_auto_records_the_graders_gpu_and_a_contradiction_is_refused(
    grader, tmp_path: Path
) -> None:
    b200 = await grader(["NVIDIA B200"])
    summary, row = await _run_http(b200, "auto", tmp_path / "a.sqlite")
    assert summary.ran > 0 and row.gpu == "b200"
    with pytest.raises(TargetMismatchError, match="hosts report NVIDIA B200"):
        await _run_http(b200, "h100", tmp_path / "b.sqlite")
    mixed = [b200, await grader(["NVIDIA H200"])]
    config = parse_config(_config("http", gpu="auto", urls=mixed, token="t0k"))
    backend = make_backend(config)
    try:
        with pytest.raises(TargetMismatchError, match="report different GPUs"):
            await resolve_experiment_gpu(config, backend)
    finally:
        await backend.close()


async def test_a_grader_that_does_not_report_cannot_decide_auto(grader, tmp_path: Path) -> None:
    silent = await grader(None)
    with pytest.raises(TargetMismatchError, match="did not report its GPU"):
        await _run_http(silent, "auto", tmp_path / "a.sqlite")
    _, row = await _run_http(silent, "b200", tmp_path / "b.sqlite")  # a named GPU is trusted
    assert row.gpu == "b200"
