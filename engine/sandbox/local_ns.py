"""A Docker-free Harbor environment: one bubblewrap jail per attempt (the agent jail).

Each sandbox is a long-lived holder process in a jail built by :mod:`engine.sandbox.jail`
(see :mod:`engine.sandbox.agent_jail`): an unprivileged host uid (``jail_uid``, 1000 by
default) with no capabilities and ``no_new_privs``, fresh user, PID, IPC, UTS, cgroup and
(unless the task asks for public network) network namespaces. The jail sees its workspace
(the workdir, read-write, seeded with the task's ``environment/``), the private ``/tests``,
``/solution``, ``/mkb``, HOME (``/mkb-home``) and ``/logs`` folders (Harbor downloads the
logs: the trial folder, where its host side writes, is never shared with the jail), the
Python the sandbox puts first on PATH (read-only: the DSL's prepared venv or the host venv,
with the installs it needs and nothing else of the project), the system directories
(read-only), a private ``/tmp`` and ``/dev/shm`` and a minimal ``/dev``. Nothing else of the
host: no project checkout, no store, no ``.env``, no host home, no other attempt's workspace.

Commands run by joining the holder's namespaces (``nsenter``) and ending with the jail's
restrictions, with a clean environment (host secrets such as API keys never reach the
sandbox); the ``user`` argument of ``exec`` is ignored: everything runs as the jail uid.
Files move through jailed ``tar``/``cat`` processes. Stopping kills the jail's PID 1, which
takes every sandbox process with it.

CPU, memory and process-count limits come from a per-sandbox cgroup when the host allows one
(otherwise memory falls back to an address-space limit); per-process limits (processes, file
size, CPU time, open files) are always set. Requirements: Linux, root, bubblewrap (``bwrap``),
util-linux (``unshare``, ``nsenter``, ``setpriv``, ``prlimit``) and tmux for Terminus-2.
Without bubblewrap the sandbox fails closed (:class:`SandboxUnavailableError` naming the
missing piece). ``unsafe_no_jail=True`` runs the old namespace-only sandbox instead
(:mod:`engine.sandbox.unjailed`): mount, PID and network namespaces via ``unshare``, commands
as root, the whole host file system visible and writable. The documented fall-back elsewhere
is Harbor's Docker environment (``-e docker``) with the task's ``environment/Dockerfile``.

Use it from Harbor::

    harbor run -p TASK -a oracle -e engine.sandbox.local_ns:LocalNamespaceEnvironment
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode
from harbor.models.trial.paths import EnvironmentPaths

from engine.sandbox.agent_jail import (
    AGENT_GID,
    AGENT_UID,
    AgentJail,
    agent_limits,
    chown_tree,
    namespace_gone,
    python_binds,
)
from engine.sandbox.jail import JailSpec, JailUnavailableError, check_jail
from engine.sandbox.limits import CgroupLimits
from engine.sandbox.unjailed import holder_init_pid, join_argv, mount_table, spawn_holder

DEFAULT_PRIVATE_DIRS = ("/mkb",)
DEFAULT_WORKDIR = "/workspace"
SANDBOX_HOME = "/mkb-home"  # a private HOME (not /root: the host Python may live under it)
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 20.0
JAIL_TMPFS = ("/tmp", "/dev/shm")
DEFAULT_PIDS_MAX = 1024


class SandboxUnavailableError(RuntimeError):
    """This host cannot create the namespaces the local sandbox needs."""


class SandboxStartError(RuntimeError):
    """The sandbox's namespaces or mounts could not be set up."""


def namespace_support_problem() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"Linux namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "creating mount/PID/network namespaces needs root (or CAP_SYS_ADMIN)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"the util-linux tool {tool!r} is not installed"
    return None


def default_python_bin() -> Path:
    """The folder of the Python the sandbox puts first on PATH (the host venv by default)."""
    return Path(sys.executable).parent


class LocalNamespaceEnvironment(BaseEnvironment):
    """Per-trial Linux namespaces on this host (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        root_dir: str | None = None,
        python_bin: str | None = None,
        private_dirs: list[str] | tuple[str, ...] = DEFAULT_PRIVATE_DIRS,
        limit_resources: bool = True,
        visible_gpus: str = "",
        unsafe_no_jail: bool = False,
        jail_uid: int = AGENT_UID,
        jail_gid: int = AGENT_GID,
        jail_limits: dict[str, int | None] | None = None,
        **kwargs: Any,
    ) -> None:
        self._root_dir = (
            Path(root_dir or os.environ.get("MKB_SANDBOX_ROOT") or Path(tempfile.gettempdir()))
            / "mkb-sandboxes"
        )
        self._python_bin = Path(python_bin) if python_bin else default_python_bin()
        self._private_dirs = tuple(private_dirs)
        self._limit_resources = limit_resources
        self._visible_gpus = visible_gpus
        self._unsafe_no_jail = bool(unsafe_no_jail)
        self._jail_uid = int(jail_uid)
        self._jail_gid = int(jail_gid)
        self._jail_limits = dict(jail_limits or {})
        self._jail: AgentJail | None = None
        self._base: Path | None = None
        self._holder: subprocess.Popen[bytes] | None = None
        self._init_pid: int | None = None
        self._cgroup: CgroupLimits | None = None
        # Unjailed, Harbor's log folders are bind-mounted from the trial folder. Jailed, they
        # are private to the jail and Harbor downloads them (its host side writes into the
        # trial folder, which must never be reachable, e.g. through a planted symlink).
        kwargs.setdefault("auto_mounting", self._unsafe_no_jail)
        super().__init__(*args, **kwargs)

    # -- Harbor's abstract interface ---------------------------------------------------------

    @staticmethod
    def type() -> str:
        return "mkb-local-ns"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(
            mounted=self._unsafe_no_jail, disable_internet=True, gpus=False
        )

    def _validate_definition(self) -> None:
        if not self.environment_dir.is_dir():
            raise FileNotFoundError(f"environment directory not found: {self.environment_dir}")

    @property
    def workdir(self) -> str:
        return self.task_env_config.workdir or DEFAULT_WORKDIR

    @property
    def isolate_network(self) -> bool:
        """No network unless both the runtime policy and the task ask for public access."""
        task_mode = getattr(self.task_env_config, "network_mode", NetworkMode.PUBLIC)
        policy_mode = self.network_policy.network_mode
        return not (policy_mode == NetworkMode.PUBLIC and task_mode == NetworkMode.PUBLIC)

    @property
    def jailed(self) -> bool:
        """Whether attempts run in the agent jail (False only with ``unsafe_no_jail``)."""
        return not self._unsafe_no_jail

    @property
    def init_pid(self) -> int:
        if self._init_pid is None:
            raise RuntimeError("the sandbox is not running")
        return self._init_pid

    async def start(self, force_build: bool) -> None:
        problem = namespace_support_problem()
        if problem:
            raise SandboxUnavailableError(
                f"The local namespace sandbox cannot run here: {problem}. Fall back to "
                "Harbor's Docker environment (--environment docker, using the task's "
                "environment/Dockerfile) or run mkb as root on Linux."
            )
        if self.jailed:
            try:
                check_jail(self._jail_uid)
            except JailUnavailableError as exc:
                raise SandboxUnavailableError(
                    f"The agent jail cannot be built here: {exc}. Install bubblewrap "
                    "(apt-get install bubblewrap), or run without the jail (--unsafe-no-jail: "
                    "the agent then runs as root and sees the whole host)."
                ) from exc
        else:
            self.logger.warning("UNSAFE: sandbox %s runs without the agent jail", self.session_id)
        self._root_dir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix=f"{self.session_id[:60]}-", dir=self._root_dir))
        self._base = base
        if self._limit_resources:
            self._cgroup = CgroupLimits(
                name=base.name,
                cpus=float(self.task_env_config.cpus) if self.task_env_config.cpus else None,
                memory_mb=self.task_env_config.memory_mb,
                pids=DEFAULT_PIDS_MAX if self.jailed else None,
            )
            self._cgroup.create()
            if self._cgroup.problems:
                self.logger.warning(
                    "sandbox resource limits not fully applied: %s",
                    "; ".join(self._cgroup.problems),
                )
        if self.jailed:
            await self._start_jail(base)
            return
        table = self._mount_table(base)
        self._prepare_host_dirs(base, table)
        await self._start_holder(table)

    # -- the agent jail ----------------------------------------------------------------------

    def _own_folders(self, with_logs: bool) -> list[tuple[str, str]]:
        """The sandbox's private folders: (folder under its base, path inside)."""
        folders = [
            ("work", self.workdir),
            ("tests", "/tests"),
            ("solution", "/solution"),
            ("home", SANDBOX_HOME),
        ]
        if with_logs:
            folders.append(("logs", str(EnvironmentPaths.logs_dir)))
        return folders + [(f"private{i}", target) for i, target in enumerate(self._private_dirs)]

    def _jail_rw(self, base: Path) -> list[tuple[Path, str]]:
        """The jail's private read-write folders: (host source, path inside)."""
        return [(base / name, target) for name, target in self._own_folders(with_logs=True)]

    def jail_spec(self, base: Path) -> JailSpec:
        """The agent jail for this sandbox (host folders under ``base``).

        Explicit Harbor ``mounts`` are bound as given (read-only when marked so); the jail
        uid needs permission on them, and the host should not write into writable ones.
        """
        rw = [(str(src), dst) for src, dst in self._jail_rw(base)]
        ro = [(p, p) for p in python_binds(self._python_bin)]
        for mount in self._host_mounts:  # explicit mounts only: Harbor's log binds stay out
            pair = (str(mount["source"]), str(mount["target"]))
            (ro if mount.get("read_only") else rw).append(pair)
        memory_mb = self.task_env_config.memory_mb
        cgroup_memory = self._cgroup is not None and "memory" in self._cgroup.applied
        return JailSpec(
            ro=ro,
            rw=rw,
            network=not self.isolate_network,
            uid=self._jail_uid,
            gid=self._jail_gid,
            chdir=self.workdir,
            env={"PATH": self._sandbox_env(None)["PATH"], "HOME": SANDBOX_HOME},
            tmpfs=list(JAIL_TMPFS),
            tmpfs_size_mb=memory_mb,
            limits=agent_limits(memory_mb, cgroup_memory, **self._jail_limits),
        )

    async def _start_jail(self, base: Path) -> None:
        for source, _ in self._jail_rw(base):
            source.mkdir(parents=True, exist_ok=True)
        for folder in ("agent", "verifier", "artifacts"):
            (base / "logs" / folder).mkdir()
        self._seed_workspace(base / "work")
        self._write_profile(base / "home")
        for source, _ in self._jail_rw(base):
            chown_tree(source, self._jail_uid, self._jail_gid)
        try:
            jail = AgentJail(self.jail_spec(base))
        except JailUnavailableError as exc:
            raise SandboxUnavailableError(f"The agent jail cannot be built here: {exc}") from exc
        cgroup = self._cgroup
        try:
            await jail.start(cgroup.join if cgroup else None, START_TIMEOUT_S)
        except RuntimeError as exc:
            raise SandboxStartError(str(exc)) from exc
        self._jail = jail
        self._init_pid = jail.init_pid

    def _mount_table(self, base: Path) -> list[tuple[Path, str]]:
        """The unjailed sandbox's binds: (host source, sandbox target), in mount order."""
        own = self._own_folders(with_logs=False)
        return mount_table(base, own, self._mounts, self._python_bin)

    def _prepare_host_dirs(self, base: Path, table: list[tuple[Path, str]]) -> None:
        for source, target in table:
            source.mkdir(parents=True, exist_ok=True)
            Path(target).mkdir(parents=True, exist_ok=True)  # the mount point on the host
        self._seed_workspace(base / "work")
        self._write_profile(base / "home")

    def _seed_workspace(self, work: Path) -> None:
        """Copy the task's ``environment/`` (all but the container build files) into it."""
        for item in self.environment_dir.iterdir():
            if item.name in ("Dockerfile", "docker-compose.yaml", ".dockerignore"):
                continue
            dest = work / item.name
            if item.is_dir():
                shutil.copytree(item, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(item, dest)

    def _write_profile(self, home: Path) -> None:
        profile = (
            f'export PATH="{self._python_bin}:{self.workdir}/bin:$PATH"\n'
            f"cd {self.workdir} 2>/dev/null || true\n"
        )
        (home / ".bash_profile").write_text(profile)

    async def _start_holder(self, table: list[tuple[Path, str]]) -> None:
        cgroup = self._cgroup
        self._holder = spawn_holder(table, self.isolate_network, cgroup.join if cgroup else None)
        try:
            self._init_pid = await holder_init_pid(self._holder, START_TIMEOUT_S)
        except RuntimeError as exc:
            raise SandboxStartError(str(exc)) from exc

    async def stop(self, delete: bool) -> None:
        if self._jail is not None:
            await self._jail.stop()
            self._jail = None
        init_pid = self._init_pid
        if init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(init_pid, signal.SIGKILL)
        if self._holder is not None:
            holder = self._holder
            with contextlib.suppress(ProcessLookupError):
                holder.kill()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(holder.wait, 10)
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()
        if init_pid is not None:
            await namespace_gone(init_pid)
        self._init_pid = None
        self._holder = None
        if self._cgroup is not None:
            for _ in range(20):
                self._cgroup.remove()
                if not self._cgroup.dirs:
                    break
                await asyncio.sleep(0.1)
        if delete and self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)

    def _sandbox_env(self, env: dict[str, str] | None) -> dict[str, str]:
        clean = {
            "PATH": f"{self._python_bin}:{self.workdir}/bin:{SANDBOX_PATH}",
            "HOME": SANDBOX_HOME,
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "CUDA_VISIBLE_DEVICES": self._visible_gpus,
            "MKB_SANDBOX": "local-ns" if self._unsafe_no_jail else "jail",
        }
        clean.update(self._merge_env(env) or {})
        return clean

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        if self._jail is not None:  # every process runs as the jail user, whoever is asked
            argv = self._jail.join(["bash", "-c", command], cwd or self.workdir)
        else:
            argv = self._unjailed_argv(command, cwd, user)
        cgroup = self._cgroup
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._sandbox_env(env),
            start_new_session=True,
            preexec_fn=cgroup.join if cgroup else None,
        )
        callback = self._output_callback()

        async def pump(stream: asyncio.StreamReader | None, name: str) -> str:
            chunks: list[str] = []
            if stream is None:
                return ""
            while True:
                data = await stream.read(65536)
                if not data:
                    break
                text = data.decode(errors="replace")
                chunks.append(text)
                if callback is not None:
                    await callback(text, name)  # type: ignore[arg-type]
            return "".join(chunks)

        readers = asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
        try:
            stdout, stderr = await asyncio.wait_for(readers, timeout_sec)
            code = await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return ExecResult(
                stdout="", stderr=f"command timed out after {timeout_sec} s", return_code=124
            )
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        return ExecResult(stdout=stdout, stderr=stderr, return_code=code)

    def _unjailed_argv(self, command: str, cwd: str | None, user: str | int | None) -> list[str]:
        who = self._resolve_user(user)
        return join_argv(self.init_pid, self.isolate_network, cwd or self.workdir, who, command)

    # -- file transfer: jailed tar/cat, or (unjailed) the holder's view of the filesystem ----

    def _absolute(self, sandbox_path: str | PurePosixPath) -> str:
        path = PurePosixPath(sandbox_path)
        return str(path if path.is_absolute() else PurePosixPath(self.workdir) / path)

    def host_path(self, sandbox_path: str | PurePosixPath) -> Path:
        """Where a sandbox path is reachable from the host (through /proc/<init>/root)."""
        path = PurePosixPath(sandbox_path)
        if not path.is_absolute():
            path = PurePosixPath(self.workdir) / path
        return Path(f"/proc/{self.init_pid}/root") / str(path).lstrip("/")

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        if self._jail is not None:
            await self._jail.upload(Path(source_path), self._absolute(target_path))
            return
        dest = self.host_path(target_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copy2, source_path, dest)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        if self._jail is not None:
            await self._jail.upload(Path(source_dir), self._absolute(target_dir))
            return
        dest = self.host_path(target_dir)
        await asyncio.to_thread(shutil.copytree, source_dir, dest, dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        if self._jail is not None:
            await self._jail.download_file(self._absolute(source_path), Path(target_path))
            return
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copy2, self.host_path(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        if self._jail is not None:
            await self._jail.download_dir(self._absolute(source_dir), Path(target_dir))
            return
        await asyncio.to_thread(
            shutil.copytree, self.host_path(source_dir), target_dir, dirs_exist_ok=True
        )
