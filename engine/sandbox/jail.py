"""Bubblewrap jails: run commands as an unprivileged host uid that sees only what is bound in.

Standard library only: the grading runner imports this module on bare GPU hosts.

Every jail built by :func:`jail_argv` has:

* an unprivileged host uid/gid (never 0; ``setpriv`` switches to it when the caller is root),
  no supplementary groups, no capabilities (``--cap-drop ALL``), ``no_new_privs`` (setuid
  binaries cannot escalate) and no way to create further user namespaces;
* fresh user, PID, IPC, UTS and cgroup namespaces, and a fresh network namespace (only its own
  loopback) unless ``network=True``;
* a root that is read-only after set-up: ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*``
  links (read-only), a fresh ``/proc``, a minimal ``/dev`` (null, zero, random, tty, pts...),
  private tmpfs mounts (``/tmp``), plus exactly the ``ro``/``rw`` binds and devices asked for;
* from ``/etc`` only an allow-list (:data:`ETC_ALLOWED`: the dynamic linker cache, name
  service switch, CA certificates, alternatives, time zone, os-release, shell profiles) and
  generated ``passwd``/``group``/``hosts`` files naming only root, the jail user and nobody.
  The rest of ``/etc`` is left out on purpose: it may hold credentials (``pip.conf``,
  ``npmrc``, ``gitconfig``, ``shadow``, TLS private keys...);
* resource limits (``prlimit``) and a clean environment (``env -i`` for bwrap itself, whose
  init process the jail can inspect; ``--clearenv`` then ``env`` for the command);
* ``--die-with-parent`` and ``--new-session`` by default.

Nothing of ``/root``, ``/home``, the project tree, the store or ``.env`` is visible unless a
caller binds it. Bind sources the jail uid could not reach (e.g. a Python under ``/root``)
are first bound, as root, into a private staging tmpfs in a throw-away mount namespace.

:func:`join_argv` runs a further command inside a running jail (for long-lived sandboxes): it
enters the jail's namespaces with ``nsenter``, switches to the jail uid/gid, and ends with the
same restrictions (no groups, no capabilities, ``no_new_privs``, the same limits).

Failing closed: :func:`check_jail` raises :class:`JailUnavailableError` naming the missing
piece (bwrap, user namespaces, the uid switch...).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_UID = 1000
DEFAULT_GID = 1000
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "mkb-jail"
MIB = 1024 * 1024
# Top-level links (or, on non-merged-/usr systems, directories) kept read-only.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The parts of /etc a jail sees (read-only). Nothing here holds secrets.
ETC_ALLOWED = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "ssl/certs",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "localtime",
    "timezone",
    "os-release",
    "debian_version",
    "lsb-release",
    "mime.types",
    "magic",
    "magic.mime",
    "bash.bashrc",
    "profile",
    "inputrc",
    "terminfo",
    "fonts",
)
ETC_NETWORK = ("resolv.conf",)  # only for jails with network access
PYTHON_QUERY = (
    "import json, sys; print(json.dumps({'prefix': sys.prefix, 'base_prefix': "
    "sys.base_prefix, 'exec_prefix': sys.exec_prefix, 'base_exec_prefix': "
    "sys.base_exec_prefix, 'executable': sys.executable, 'path': sys.path}))"
)


class JailUnavailableError(RuntimeError):
    """A jail cannot be built here; the message names the missing piece."""


@dataclass(frozen=True)
class Limits:
    """Per-process resource limits (``None``: inherit). Sizes in MiB, CPU time in seconds.

    ``nproc`` counts the jail uid's processes: jails sharing a host uid share it (use a
    per-sandbox pids cgroup for a per-jail cap). ``address_space_mb`` is off by default:
    CUDA and PyTorch reserve far more virtual memory than they use.
    """

    address_space_mb: int | None = None
    nproc: int | None = 2048
    file_size_mb: int | None = 8192
    cpu_s: int | None = None
    nofile: int | None = 4096

    def prlimit_args(self) -> list[str]:
        """``prlimit --as=... -- `` (empty when nothing is limited)."""
        values = {
            "as": self.address_space_mb * MIB if self.address_space_mb else None,
            "nproc": self.nproc,
            "fsize": self.file_size_mb * MIB if self.file_size_mb else None,
            "cpu": self.cpu_s,
            "nofile": self.nofile,
        }
        args = [f"--{name}={value}:{value}" for name, value in values.items() if value]
        return ["prlimit", *args, "--"] if args else []


@dataclass
class JailSpec:
    """What one jail sees and how it runs (see the module docstring)."""

    ro: list[tuple[str, str]] = field(default_factory=list)  # (host path, path inside)
    rw: list[tuple[str, str]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # bound with --dev-bind
    network: bool = False
    uid: int = DEFAULT_UID
    gid: int = DEFAULT_GID
    chdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)  # the whole environment inside
    tmpfs: list[str] = field(default_factory=lambda: ["/tmp"])
    tmpfs_size_mb: int | None = None  # per tmpfs mount; None: the kernel default (half of RAM)
    limits: Limits = field(default_factory=Limits)
    keep_fds: list[int] = field(default_factory=list)  # pass them with Popen(pass_fds=...)
    die_with_parent: bool = True
    new_session: bool = True
    hostname: str = HOSTNAME
    # the command itself as the jail's PID 1 (no bwrap reaper): signals from inside the jail
    # without a handler do not reach it, and it alone reaps (the runner template)
    as_pid_1: bool = False
    # /dev read-only but for a private tmpfs /dev/shm: no file left in /dev itself (the
    # runner template empties /dev/shm between the processes it forks)
    dev_readonly: bool = False


# -- command lines ------------------------------------------------------------------------------
def jail_argv(spec: JailSpec, argv: list[str]) -> list[str]:
    """The full command line running ``argv`` in a new jail (uid switch + bwrap + argv)."""
    _validate(spec)
    switch = _uid_switch(spec)
    binds = _binds(spec)
    staged = [i for i, (_, src, _) in enumerate(binds) if not _reachable(src, spec.uid, spec.gid)]
    stage_root = _runtime_dir() / "stage" if staged and os.geteuid() == 0 else None
    if stage_root is not None:
        stage_root.mkdir(mode=0o755, exist_ok=True)
    # bwrap's own processes (the jail's PID 1 among them) keep the caller's environment,
    # which the jail can read in /proc/1/environ: start from an empty one
    out: list[str] = ["env", "-i", f"PATH={DEFAULT_PATH}"]
    script: list[str] = []
    if stage_root is not None:
        script.append(f"mount -t tmpfs -o mode=0755 mkb-jail-stage {_q(stage_root)}")
        for i in staged:
            option, src, dst = binds[i]
            slot = f"{stage_root}/{i}"
            make = "mkdir" if Path(src).is_dir() else ": >"
            script.append(f"{make} {_q(slot)} && mount --rbind {_q(src)} {_q(slot)}")
            binds[i] = (option, slot, dst)
        out += ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c"]
        out += [" && ".join([*script, 'exec "$@"']), "mkb-jail-stage"]
    out += spec.limits.prlimit_args()
    out += switch
    out += _bwrap_args(spec, binds)
    return [*out, "--", *argv]


def join_argv(spec: JailSpec, pid: int, argv: list[str], cwd: str | None = None) -> list[str]:
    """A command line running ``argv`` inside the running jail whose process is ``pid``.

    It enters every namespace of that process (user, mount, PID, network, IPC, UTS, cgroup),
    then switches to the jail's uid/gid with no groups, no capabilities, ``no_new_privs`` and
    the jail's limits. Needs root (entering another user's namespaces).
    """
    _validate(spec)
    if os.geteuid() != 0:
        raise JailUnavailableError("joining a running jail needs root (nsenter)")
    enter = ["nsenter", "-t", str(pid), "--user", "--mount", "--pid", "--net", "--ipc"]
    enter += ["--uts", "--cgroup", "-r", f"--wdns={cwd or spec.chdir}"]
    enter += ["-S", str(spec.uid), "-G", str(spec.gid), "--"]
    drop = ["setpriv", "--inh-caps=-all", "--no-new-privs", "--"]
    return [*enter, *drop, *spec.limits.prlimit_args(), *argv]


def _validate(spec: JailSpec) -> None:
    if spec.uid <= 0 or spec.gid <= 0:
        raise ValueError("a jail never runs as uid or gid 0")
    for _, inside in [*spec.ro, *spec.rw]:
        if not inside.startswith("/"):
            raise ValueError(f"jail paths must be absolute: {inside!r}")


def _uid_switch(spec: JailSpec) -> list[str]:
    euid = os.geteuid()
    if euid == 0:
        return [
            "setpriv",
            f"--reuid={spec.uid}",
            f"--regid={spec.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ]
    if euid != spec.uid:
        raise JailUnavailableError(
            f"uid switch not permitted: this process runs as uid {euid}, not root, so the "
            f"jail cannot run as uid {spec.uid}; run as root or use uid={euid}"
        )
    return []


def _binds(spec: JailSpec) -> list[tuple[str, str, str]]:
    """(bwrap option, host source, path inside), sources resolved, parents before children."""
    binds: list[tuple[str, str, str]] = []
    for name in ETC_ALLOWED + (ETC_NETWORK if spec.network else ()):
        source = Path("/etc") / name
        if source.exists():
            binds.append(("--ro-bind", os.path.realpath(source), str(source)))
    for name, path in identity_files(spec).items():
        binds.append(("--ro-bind", str(path), f"/etc/{name}"))
    user = [("--ro-bind", src, dst) for src, dst in spec.ro]
    user += [("--bind", src, dst) for src, dst in spec.rw]
    for option, src, dst in sorted(user, key=lambda b: len(Path(b[2]).parts)):
        if not os.path.exists(src):
            raise JailUnavailableError(f"jail bind source does not exist: {src}")
        binds.append((option, os.path.realpath(src), os.path.normpath(dst)))
    binds += [("--dev-bind", dev, dev) for dev in spec.devices]
    return binds


def _bwrap_args(spec: JailSpec, binds: list[tuple[str, str, str]]) -> list[str]:
    args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns"]
    if spec.network:
        args.append("--share-net")
    if spec.die_with_parent:
        args.append("--die-with-parent")
    if spec.new_session:
        args.append("--new-session")
    if spec.as_pid_1:
        args.append("--as-pid-1")
    args += ["--cap-drop", "ALL", "--uid", str(spec.uid), "--gid", str(spec.gid)]
    args += ["--hostname", spec.hostname, "--clearenv"]
    for key, value in {"PATH": DEFAULT_PATH, **spec.env}.items():
        args += ["--setenv", key, value]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for target in [*spec.tmpfs, *(["/dev/shm"] if spec.dev_readonly else [])]:
        if spec.tmpfs_size_mb:
            args += ["--size", str(spec.tmpfs_size_mb * MIB)]
        args += ["--tmpfs", target]
    for option, src, dst in binds:
        args += [option, src, dst]
    if spec.dev_readonly:
        args += ["--remount-ro", "/dev"]
    args += ["--remount-ro", "/", "--chdir", spec.chdir]
    return args


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` (no other groups) may look up ``path`` (search on every parent)."""
    for parent in reversed(Path(path).parents):
        try:
            info = os.stat(parent)
        except OSError:
            return False
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _q(path: str | Path) -> str:
    return shlex.quote(str(path))


# -- files the jail needs -----------------------------------------------------------------------
def _runtime_dir() -> Path:
    """A private directory (owned by this uid, not writable by others) for jail files."""
    if os.geteuid() == 0 and Path("/run").is_dir():
        path = Path("/run/mkb-jail")
    else:
        path = Path(tempfile.gettempdir()) / f"mkb-jail-{os.geteuid()}"
    path.mkdir(mode=0o755, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise JailUnavailableError(f"{path} is not a private directory owned by this user")
    return path


def identity_files(spec: JailSpec) -> dict[str, Path]:
    """Generated ``passwd``, ``group`` and ``hosts`` for the jail (root, the jail user, nobody)."""
    home = spec.env.get("HOME", "/tmp")
    contents = {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"agent:x:{spec.uid}:{spec.gid}:jailed user:{home}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\nagent:x:{spec.gid}:\nnogroup:x:65534:\n",
        "hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{spec.hostname}\n",
    }
    digest = hashlib.sha256(json.dumps(contents, sort_keys=True).encode()).hexdigest()[:16]
    folder = _runtime_dir() / f"identity-{digest}"
    if not folder.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=folder.parent))
        for name, text in contents.items():
            (scratch / name).write_text(text)
            (scratch / name).chmod(0o644)
        scratch.chmod(0o755)
        try:
            scratch.rename(folder)
        except OSError:  # another process wrote the same files first
            shutil.rmtree(scratch, ignore_errors=True)
    return {name: folder / name for name in contents}


@functools.cache
def _python_facts(python: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "-s", "-c", PYTHON_QUERY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env={"PATH": DEFAULT_PATH, "LC_ALL": "C.UTF-8"},
        check=False,
    )
    if done.returncode != 0:
        raise JailUnavailableError(f"cannot ask {python} for its paths: {done.stderr.strip()}")
    facts: dict[str, object] = json.loads(done.stdout)
    return facts


def python_mounts(python: str, exclude: list[str]) -> list[str]:
    """Directories (and files) the interpreter ``python`` needs, to bind read-only in place.

    Its prefix and base prefix, the real path of its executable and every existing
    ``sys.path`` entry (the interpreter is asked once; cached), minus entries under an
    ``exclude`` path. The interpreter's own install directories are kept even under an
    excluded path (a venv inside the project, a Python under ``$HOME``), and so are
    ``site-packages``/``dist-packages`` folders (a venv layered on another via a ``.pth``);
    an excluded path inside a kept directory raises :class:`JailUnavailableError`.
    """
    facts = _python_facts(python)
    real = [os.path.realpath(p) for p in exclude]
    installs = {
        os.path.realpath(str(facts[key]))
        for key in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix")
    }
    wanted = set(installs)
    wanted.add(os.path.realpath(str(facts["executable"])))
    for entry in facts["path"]:  # type: ignore[attr-defined]
        if not entry or not os.path.exists(entry):
            continue
        path = os.path.realpath(entry)
        inside_install = any(_under(path, p) for p in installs)
        packages = Path(path).name in ("site-packages", "dist-packages")
        if inside_install or packages or not any(_under(path, x) for x in real):
            wanted.add(path)
    kept = sorted(p for p in wanted if not any(p != q and _under(p, q) for q in wanted))
    for path in kept:
        for excluded in real:
            if _under(excluded, path):
                raise JailUnavailableError(
                    f"{python} needs {path}, which contains the excluded {excluded}"
                )
    return kept


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def gpu_device_nodes(dev: Path = Path("/dev")) -> list[str]:
    """The NVIDIA device nodes that exist (``/dev/nvidia*``, ``/dev/nvidia-caps/*``)."""
    found = [*dev.glob("nvidia*"), *dev.glob("nvidia-caps/*")]
    return sorted(str(p) for p in found if p.exists() and stat.S_ISCHR(p.stat().st_mode))


# -- availability -------------------------------------------------------------------------------
def jail_problem(uid: int = DEFAULT_UID) -> str | None:
    """Why a jail cannot run here (the missing piece), or None when it can."""
    try:
        check_jail(uid)
    except JailUnavailableError as exc:
        return str(exc)
    return None


def check_jail(uid: int = DEFAULT_UID) -> None:
    """Raise :class:`JailUnavailableError` naming what is missing; start a probe jail once."""
    if not sys.platform.startswith("linux"):
        raise JailUnavailableError(f"bubblewrap jails need Linux (this is {sys.platform})")
    if shutil.which("bwrap") is None:
        raise JailUnavailableError(
            "bubblewrap is not installed (no bwrap on PATH); install it: apt-get install bubblewrap"
        )
    if _sysctl("user/max_user_namespaces") == "0":
        raise JailUnavailableError("user namespaces are disabled (user.max_user_namespaces = 0)")
    if _sysctl("kernel/unprivileged_userns_clone") == "0":
        raise JailUnavailableError(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
        )
    if os.geteuid() == 0:
        for tool in ("setpriv", "prlimit", "unshare", "nsenter"):
            if shutil.which(tool) is None:
                raise JailUnavailableError(f"the util-linux tool {tool!r} is not installed")
    _probe(uid, os.geteuid())


@functools.cache
def _probe(uid: int, euid: int) -> None:
    """Start one jail running ``true`` (cached per uid once it worked)."""
    argv = jail_argv(JailSpec(uid=uid, gid=uid if euid == uid else DEFAULT_GID), ["true"])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JailUnavailableError(f"bwrap could not start a jail: {exc}") from exc
    if done.returncode != 0:
        hint = ""
        if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
            hint = " (kernel.apparmor_restrict_unprivileged_userns = 1 may block it)"
        raise JailUnavailableError(
            f"bwrap could not start a jail{hint}: {done.stderr.strip() or done.returncode}"
        )


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None
