"""CPU placement of a GPU slot's runner and judge (engine/grading/judge/placement.py): the
topology read from a /sys tree built here, and the affinity a real child process gets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.grading.judge import placement
from engine.grading.judge.placement import Share


def fake_host(tmp_path: Path, packages: int, cores: int, threads: int) -> Path:
    """A /sys/devices/system/cpu tree: CPU n is thread n // (packages*cores) of its core, as
    Linux numbers hyperthreads (all first threads, then all second threads)."""
    root = tmp_path / "cpu"
    per_thread = packages * cores
    for cpu in range(per_thread * threads):
        slot = cpu % per_thread
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{slot // cores}\n")
        (topology / "core_id").write_text(f"{slot % cores}\n")
    return root


def fake_gpus(tmp_path: Path, local: list[str]) -> tuple[Path, Path]:
    """The driver's GPU list and the PCI devices' local_cpulist, GPU i near ``local[i]``."""
    gpus, pci = tmp_path / "nvidia" / "gpus", tmp_path / "pci"
    for i, cpus in enumerate(local):
        bus = f"0000:{0x18 + i:02X}:00.0"
        (gpus / bus).mkdir(parents=True)
        (pci / bus.lower()).mkdir(parents=True)
        (pci / bus.lower() / "local_cpulist").write_text(cpus + "\n")
    return gpus, pci


def test_cpu_lists_read_and_written_as_the_kernel_writes_them() -> None:
    assert placement.parse_cpus("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert placement.format_cpus({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    for bad in ("a", "3-1", "-2"):
        with pytest.raises(ValueError):
            placement.parse_cpus(bad)


def test_hyperthreads_of_one_core_are_grouped(tmp_path: Path) -> None:
    sys_cpu = fake_host(tmp_path, packages=2, cores=4, threads=2)  # 16 CPUs
    cores = placement.physical_cores(frozenset(range(16)), sys_cpu)
    assert len(cores) == 8
    assert cores[0] == {0, 8} and cores[4] == {4, 12}


def test_each_gpu_gets_cores_near_it_and_the_runner_a_whole_core(tmp_path: Path) -> None:
    sys_cpu = fake_host(tmp_path, packages=2, cores=4, threads=2)
    # GPUs 0, 1 on package 0 (CPUs 0-3, 8-11), GPUs 2, 3 on package 1
    gpus, pci = fake_gpus(tmp_path, ["0-3,8-11", "0-3,8-11", "4-7,12-15", "4-7,12-15"])
    allowed = frozenset(range(16))
    shares = [placement.share_for(i, 4, allowed, sys_cpu, gpus, pci) for i in range(4)]
    assert shares[0] == Share(runner=frozenset({0, 8}), judge=frozenset({1, 9}))
    assert shares[1] == Share(runner=frozenset({2, 10}), judge=frozenset({3, 11}))
    assert shares[2] == Share(runner=frozenset({4, 12}), judge=frozenset({5, 13}))
    used = [cpu for s in shares if s is not None for cpu in s.runner | s.judge]
    assert len(used) == len(set(used)) == 16  # no CPU in two shares


def test_a_share_of_one_core_places_nothing(tmp_path: Path) -> None:
    sys_cpu = fake_host(tmp_path, packages=1, cores=4, threads=1)
    gpus, pci = fake_gpus(tmp_path, ["0-3"] * 4)
    assert placement.share_for(0, 4, frozenset(range(4)), sys_cpu, gpus, pci) is None
    assert placement.share_for(0, 2, frozenset(range(4)), sys_cpu, gpus, pci) is not None


def test_without_driver_files_the_allowed_cpus_are_split(tmp_path: Path) -> None:
    sys_cpu = fake_host(tmp_path, packages=1, cores=8, threads=1)
    missing = tmp_path / "absent"
    share = placement.share_for(1, 2, frozenset(range(8)), sys_cpu, missing, missing)
    assert share == Share(runner=frozenset({4}), judge=frozenset({5, 6, 7}))
    with pytest.raises(ValueError):
        placement.share_for(2, 2, frozenset(range(8)), sys_cpu, missing, missing)


def test_the_share_travels_in_the_environment_and_off_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    share = Share(runner=frozenset({0}), judge=frozenset({1, 2}))
    assert placement.from_env(share.env()) == share
    assert placement.from_env(placement.NO_PLACEMENT) is None
    assert placement.describe(share.env()) == {"runner": "0", "judge": "1-2"}
    assert placement.slot_env(0, 1, "off") == placement.NO_PLACEMENT
    monkeypatch.setenv("MKB_CPU_PLACEMENT", "off")
    assert placement.slot_env(0, 1, "auto") == placement.NO_PLACEMENT
    with pytest.raises(ValueError, match="cpu_placement"):
        placement.slot_env(0, 1, "pinned")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_child_forked_while_spawning_on_runs_there_and_the_parent_gets_its_cpus_back() -> None:
    before = os.sched_getaffinity(0)
    target = frozenset({min(before)})
    probe = "import os; print(sorted(os.sched_getaffinity(0)))"
    with placement.spawning_on(target):
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert child.stdout.strip() == str(sorted(target))
    assert os.sched_getaffinity(0) == before


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_jailed_runner_spawned_with_a_share_runs_on_the_runner_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess, process_tree

    runner_cpu = min(os.sched_getaffinity(0))
    share = Share(runner=frozenset({runner_cpu}), judge=os.sched_getaffinity(0) - {runner_cpu})
    for key, value in share.env().items():
        monkeypatch.setenv(key, value)
    runner = RunnerProcess.spawn(RunnerOptions(device="cpu", preload_dsls=False))
    try:
        runner.wait_ready()
        allowed = set()
        for pid in process_tree(runner.pid):
            with open(f"/proc/{pid}/status") as fh:
                line = next(x for x in fh if x.startswith("Cpus_allowed_list:"))
            allowed.add(line.split()[1])
        assert allowed == {str(runner_cpu)}  # bwrap, the runner and every thread it made
    finally:
        runner.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_local_backend_hands_each_gpu_slot_its_share_and_cpu_slots_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.grading.backends.local import LocalBackend

    monkeypatch.setenv(placement.RUNNER_ENV, "0")  # stale, from an outer placed process
    monkeypatch.setenv(placement.JUDGE_ENV, "1")
    # nothing starts until the first grading: the slots and their environments only
    gpu = LocalBackend(gpus=[0]).slots[0].env
    expected = placement.share_for(0, 1, frozenset(os.sched_getaffinity(0)))
    assert placement.from_env(gpu) == expected
    off = LocalBackend(gpus=[0], cpu_placement="off").slots[0].env
    assert placement.from_env(off) is None
    cpu = LocalBackend(gpus="none").slots[0].env
    assert placement.from_env(cpu) is None
    with pytest.raises(ValueError, match="cpu_placement"):
        LocalBackend(gpus=[0], cpu_placement="yes")
