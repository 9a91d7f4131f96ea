"""CPU, memory and process-count limits for a sandbox through cgroups (v1 or v2), where the
host allows it."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000


@dataclass
class CgroupLimits:
    """A per-sandbox cgroup (one directory per controller) holding its processes."""

    name: str
    cpus: float | None
    memory_mb: int | None
    pids: int | None = None  # most processes (and threads) at once
    root: Path = CGROUP_ROOT
    dirs: list[Path] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def create(self) -> None:
        """Create the cgroup(s) and write the limits; failures are recorded, not raised."""
        if (self.root / "cgroup.controllers").exists():
            self._create_v2()
        else:
            self._create_v1()

    def _create_v2(self) -> None:
        path = self.root / f"mkb-{self.name}"
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            self.problems.append(f"cgroup v2 mkdir failed: {exc}")
            return
        self.dirs.append(path)
        if self.memory_mb:
            self._write(path / "memory.max", str(self.memory_mb * 1024 * 1024), "memory")
        if self.cpus:
            quota = int(self.cpus * CFS_PERIOD_US)
            self._write(path / "cpu.max", f"{quota} {CFS_PERIOD_US}", "cpu")
        if self.pids:
            self._write(path / "pids.max", str(self.pids), "pids")

    def _create_v1(self) -> None:
        wanted = []
        if self.memory_mb:
            wanted.append(("memory", "memory.limit_in_bytes", str(self.memory_mb * 1024 * 1024)))
        if self.cpus:
            wanted.append(("cpu", "cpu.cfs_quota_us", str(int(self.cpus * CFS_PERIOD_US))))
        if self.pids:
            wanted.append(("pids", "pids.max", str(self.pids)))
        for controller, knob, value in wanted:
            base = self.root / controller
            if not base.is_dir():
                self.problems.append(f"cgroup v1 controller {controller} not mounted")
                continue
            path = base / f"mkb-{self.name}"
            try:
                path.mkdir(exist_ok=True)
            except OSError as exc:
                self.problems.append(f"cgroup {controller} mkdir failed: {exc}")
                continue
            self.dirs.append(path)
            if controller == "cpu":
                self._write(path / "cpu.cfs_period_us", str(CFS_PERIOD_US), None)
            self._write(path / knob, value, controller)

    def _write(self, path: Path, value: str, label: str | None) -> None:
        try:
            path.write_text(value)
            if label:
                self.applied.append(label)
        except OSError as exc:
            self.problems.append(f"writing {path.name} failed: {exc}")

    def join(self) -> None:
        """Move the calling process into every cgroup (used in a child before exec)."""
        pid = str(os.getpid())
        for path in self.dirs:
            with contextlib.suppress(OSError):
                (path / "cgroup.procs").write_text(pid)

    def remove(self) -> None:
        """Remove the cgroup directories whose processes have exited; others stay listed."""
        remaining = []
        for path in self.dirs:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                remaining.append(path)
        self.dirs = remaining
