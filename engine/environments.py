"""Can this machine run an experiment's sandboxes and grading? Config-level checks.

Each check returns a list of problems (empty: nothing missing), each a sentence that says what
is missing and how to provide it. Nothing here starts a sandbox or a container:

- ``docker``: the docker CLI, its compose plugin (Harbor drives containers through compose)
  and a daemon that answers ``GET /_ping`` at ``$DOCKER_HOST`` or the default socket;
- ``modal``: the ``modal`` SDK and a token (MODAL_TOKEN_ID + MODAL_TOKEN_SECRET, or the
  config file ``modal token new`` writes: $MODAL_CONFIG_PATH or ~/.modal.toml);
- ``daytona``: the ``daytona`` SDK and DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN together with
  DAYTONA_ORGANIZATION_ID);
- ``local``: Linux, root, util-linux ``unshare``/``nsenter``, tmux and (unless
  ``unsafe_no_jail``) a working bubblewrap agent jail;
- an import path ``module:Class``: importable, a Harbor ``BaseEnvironment``, its preflight;
- grading ``http``: options the client pool accepts, grader URLs, a token for remote hosts;
  grading ``harbor``: the per-evaluation environment's configuration and credentials.

:func:`check_task` checks a built task directory against a sandbox kind: the task.toml Harbor
parses, the Dockerfile that docker, modal and daytona build the sandbox image from, and the
no-network policy each of them must enforce.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.config import ExperimentConfig

CLOUD_SANDBOXES = ("docker", "modal", "daytona")
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
# Harbor 0.25 environments that enforce network_mode = "no-network" for a single-container task:
# modal and daytona block the sandbox's network; docker adds an egress-control sidecar, which
# needs nftables support in the daemon's kernel (Harbor probes that when a sandbox starts).
ENFORCES_NO_NETWORK = {"docker": True, "modal": True, "daytona": True, "local": True}

Env = Mapping[str, str]


def check_experiment(config: ExperimentConfig, environ: Env | None = None) -> list[str]:
    """Every problem with the config's sandbox and grading backend on this machine."""
    return check_sandbox(config, environ) + check_grading(config, environ)


# -- sandboxes ---------------------------------------------------------------------------------
def check_sandbox(config: ExperimentConfig, environ: Env | None = None) -> list[str]:
    """Problems with ``[experiment].sandbox`` (and ``[sandbox]`` options) here."""
    if config.agent == "simulated":
        return []  # simulated agents start no sandbox
    env = os.environ if environ is None else environ
    problems = sandbox_problems(config.sandbox, env)
    if config.sandbox == "local" and not config.unsafe_no_jail:
        problems += jail_problems()
    return problems


def jail_problems() -> list[str]:
    """Why the local sandbox's agent jail cannot be built here (empty: it can)."""
    from engine.sandbox.jail import jail_problem

    why = jail_problem()
    if why is None:
        return []
    return [
        f"sandbox 'local': the agent jail cannot be built: {why}; or run without it "
        "(--unsafe-no-jail: agents then see the whole host)"
    ]


def sandbox_problems(kind: str, environ: Env) -> list[str]:
    checks: dict[str, Callable[[Env], list[str]]] = {
        "local": lambda _env: local_problems(),
        "docker": docker_problems,
        "modal": modal_problems,
        "daytona": daytona_problems,
    }
    if kind in checks:
        return checks[kind](environ)
    if ":" in kind:
        return import_path_problems(kind)
    return [f"sandbox {kind!r}: unknown; use local, docker, modal, daytona or module:Class"]


def local_problems() -> list[str]:
    from engine.sandbox.local_ns import namespace_support_problem

    problems = []
    why = namespace_support_problem()
    if why is not None:
        problems.append(f"sandbox 'local': {why}; or choose sandbox = \"docker\"")
    if shutil.which("tmux") is None:
        problems.append(
            "sandbox 'local': tmux is not installed (Terminus-2 drives a tmux "
            "session); install it, e.g. apt-get install tmux"
        )
    return problems


def docker_problems(environ: Env) -> list[str]:
    docker = shutil.which("docker", path=environ.get("PATH"))
    if docker is None:
        return [
            "sandbox 'docker': the docker CLI is not on PATH; install Docker Engine "
            "(https://docs.docker.com/engine/install/) or choose another sandbox"
        ]
    problems = []
    if not _has_compose(docker, environ):
        problems.append(
            "sandbox 'docker': the docker compose plugin is missing (Harbor "
            "starts sandboxes with `docker compose`); install docker-compose-plugin"
        )
    host = environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    why = docker_ping(host)
    if why is not None:
        problems.append(
            f"sandbox 'docker': no Docker daemon answers at {host} ({why}); start "
            "it (systemctl start docker) or point DOCKER_HOST at one"
        )
    return problems


def _has_compose(docker: str, environ: Env) -> bool:
    try:
        done = subprocess.run(
            [docker, "compose", "version"],
            capture_output=True,
            timeout=10,
            env=dict(environ),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def docker_ping(host: str, timeout_s: float = 3.0) -> str | None:
    """None when a Docker API answers ``GET /_ping`` with 200 at ``host``, else why not."""
    parts = urlsplit(host)
    try:
        if parts.scheme == "unix":
            path = parts.path or parts.netloc
            if not Path(path).exists():
                return f"{path} does not exist"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            sock.connect(path)
        elif parts.scheme in ("tcp", "http"):
            sock = socket.create_connection(
                (parts.hostname or "localhost", parts.port or 2375), timeout=timeout_s
            )
        elif parts.scheme in ("ssh", "https"):
            return None  # reached through ssh or TLS: the docker CLI checks it at run time
        else:
            return f"unsupported DOCKER_HOST scheme {parts.scheme!r}"
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = sock.recv(64)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        return f"unexpected answer {head[:40]!r}"
    return None


def modal_problems(environ: Env) -> list[str]:
    problems = []
    if importlib.util.find_spec("modal") is None:
        problems.append(
            "sandbox 'modal': the modal SDK is not installed; pip install 'harbor[modal]'"
        )
    token_id, secret = environ.get("MODAL_TOKEN_ID"), environ.get("MODAL_TOKEN_SECRET")
    config_file = Path(environ.get("MODAL_CONFIG_PATH") or Path(_home(environ)) / ".modal.toml")
    if token_id and secret:
        return problems
    if token_id or secret:
        missing = "MODAL_TOKEN_SECRET" if token_id else "MODAL_TOKEN_ID"
        problems.append(
            f"sandbox 'modal': {missing} is not set (MODAL_TOKEN_ID and "
            "MODAL_TOKEN_SECRET go together)"
        )
    elif not config_file.is_file():
        problems.append(
            f"sandbox 'modal': no Modal token: set MODAL_TOKEN_ID and "
            f"MODAL_TOKEN_SECRET, or run `modal token new` (writes {config_file})"
        )
    return problems


def daytona_problems(environ: Env) -> list[str]:
    problems = []
    if importlib.util.find_spec("daytona") is None:
        problems.append(
            "sandbox 'daytona': the daytona SDK is not installed; pip install 'harbor[daytona]'"
        )
    if environ.get("DAYTONA_API_KEY"):
        return problems
    jwt, org = environ.get("DAYTONA_JWT_TOKEN"), environ.get("DAYTONA_ORGANIZATION_ID")
    if jwt and not org:
        problems.append("sandbox 'daytona': DAYTONA_JWT_TOKEN needs DAYTONA_ORGANIZATION_ID")
    elif not jwt:
        problems.append(
            "sandbox 'daytona': DAYTONA_API_KEY is not set (create a key in the "
            "Daytona dashboard; or set DAYTONA_JWT_TOKEN and "
            "DAYTONA_ORGANIZATION_ID)"
        )
    return problems


def import_path_problems(target: str) -> list[str]:
    module_name, _, class_name = target.partition(":")
    try:
        env_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        return [f"sandbox {target!r}: cannot import it ({type(exc).__name__}: {exc})"]
    try:
        from harbor.environments.base import BaseEnvironment
    except ImportError as exc:
        return [f"sandbox {target!r}: harbor is not installed ({exc})"]
    if not isinstance(env_class, type) or not issubclass(env_class, BaseEnvironment):
        return [f"sandbox {target!r}: not a harbor BaseEnvironment subclass"]
    environment: type[BaseEnvironment] = env_class
    try:
        environment.preflight()
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - preflight raises SystemExit
        return [f"sandbox {target!r}: preflight failed: {exc}"]
    return []


def _home(environ: Env) -> str:
    return environ.get("HOME") or str(Path.home())


# -- grading -----------------------------------------------------------------------------------
def check_grading(config: ExperimentConfig, environ: Env | None = None) -> list[str]:
    """Problems with ``[experiment].grading`` and its ``[grading]`` options."""
    env = os.environ if environ is None else environ
    options = dict(config.grading_options)
    if config.grading == "http":
        return http_grading_problems(options)
    if config.grading == "harbor":
        return harbor_grading_problems(options, env)
    return []


def _unknown_options(
    options: Mapping[str, Any], target: Callable[..., Any], where: str
) -> list[str]:
    params = inspect.signature(target).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    unknown = sorted(set(options) - set(params) - {"self"})
    allowed = ", ".join(n for n in params if n != "self")
    return [f"{where}: unknown option {name!r} (allowed: {allowed})" for name in unknown]


def http_grading_problems(options: dict[str, Any]) -> list[str]:
    from engine.grading.backends.http_client import HttpBackend

    problems = _unknown_options(options, HttpBackend.__init__, "[grading] (http)")
    urls = options.get("urls")
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        return [
            *problems,
            "[grading].urls: list the grader services, e.g. "
            'urls = ["http://gpu-1:8765"] (start each with `mkb grader serve`)',
        ]
    remote = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"[grading].urls: {url!r} is not an http(s)://host:port URL")
        elif not _is_loopback(parts.hostname):
            remote.append(url)
    if remote and not options.get("token"):
        problems.append(
            f"[grading].token: required for remote graders ({', '.join(remote)}); "
            "use the token each `mkb grader serve --token` was started with"
        )
    return problems


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def harbor_grading_problems(options: dict[str, Any], environ: Env) -> list[str]:
    from engine.grading.backends.harbor import HarborBackend, HarborConfig, HarborConfigError

    problems = _unknown_options(options, HarborConfig, "[grading] (harbor)")
    if problems:
        return problems
    config = HarborConfig(**options)
    if config.environment_type in CLOUD_SANDBOXES and not config.import_path:
        # the same engines and credentials as a sandbox of that kind
        found = sandbox_problems(config.environment_type, environ)
        problems += [p.replace("sandbox ", "[grading] harbor environment ", 1) for p in found]
        if found:
            return problems
    try:
        HarborBackend(config).validate()
    except HarborConfigError as exc:
        problems.append(f"[grading] {exc}")
    return problems


# -- built tasks -------------------------------------------------------------------------------
def check_task(task_dir: Path, sandbox: str) -> list[str]:
    """Problems running the built task at ``task_dir`` in a ``sandbox`` environment."""
    task_dir = Path(task_dir)
    problems: list[str] = []
    try:
        from harbor.models.task.config import TaskConfig
    except ImportError as exc:
        return [f"{task_dir}: harbor is not installed ({exc})"]
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        return [f"{task_dir}: no task.toml (build it with `mkb tasks build`)"]
    try:
        task = TaskConfig.model_validate_toml(toml_path.read_text())
    except Exception as exc:  # noqa: BLE001 - pydantic and toml errors alike
        return [f"{toml_path}: Harbor cannot read it: {exc}"]
    if not (task_dir / "instruction.md").is_file():
        problems.append(f"{task_dir}: no instruction.md")
    env_cfg = task.environment
    if sandbox in CLOUD_SANDBOXES:
        problems += _dockerfile_problems(task_dir / "environment", env_cfg)
    network = str(getattr(env_cfg.network_mode, "value", env_cfg.network_mode))
    if network != "no-network":
        problems.append(
            f"{toml_path}: network_mode is {network!r}; attempts run with "
            'network_mode = "no-network"'
        )
    elif not ENFORCES_NO_NETWORK.get(sandbox, False) and ":" not in sandbox:
        problems.append(f'sandbox {sandbox!r} cannot enforce network_mode = "no-network"')
    if (env_cfg.gpus or 0) > 0:
        problems.append(
            f"{toml_path}: sandboxes are CPU-only (gpus = {env_cfg.gpus}); "
            "grading runs on the grader hosts"
        )
    if sandbox in CLOUD_SANDBOXES:
        problems += _resource_problems(sandbox, env_cfg)
    return problems


def _dockerfile_problems(env_dir: Path, env_cfg: Any) -> list[str]:
    from harbor.environments.definition import require_agent_environment_definition

    try:
        require_agent_environment_definition(env_dir, docker_image=env_cfg.docker_image)
    except FileNotFoundError as exc:
        return [str(exc)]
    dockerfile = env_dir / "Dockerfile"
    if env_cfg.docker_image or not dockerfile.is_file():
        return []
    lines = [ln.strip() for ln in dockerfile.read_text().splitlines()]
    problems = []
    if not any(ln.upper().startswith("FROM ") for ln in lines):
        problems.append(f"{dockerfile}: no FROM line")
    workdirs = [ln.split(None, 1)[1] for ln in lines if ln.upper().startswith("WORKDIR ")]
    if env_cfg.workdir and workdirs and workdirs[-1] != env_cfg.workdir:
        problems.append(
            f"{dockerfile}: WORKDIR {workdirs[-1]} differs from task.toml workdir {env_cfg.workdir}"
        )
    return problems


def _resource_problems(sandbox: str, env_cfg: Any) -> list[str]:
    """Whether Harbor's environment for ``sandbox`` can honour the task's CPU/memory asks."""
    try:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.environment_type import EnvironmentType

        caps = EnvironmentFactory.resource_capabilities(EnvironmentType(sandbox))
    except Exception as exc:  # noqa: BLE001 - an unloadable environment module
        return [f"sandbox {sandbox!r}: Harbor cannot load it: {exc}"]
    if caps is None:
        return []
    problems = []
    cpus = env_cfg.cpus
    if isinstance(cpus, float) and not cpus.is_integer() and not caps.fractional_cpus:
        problems.append(f"sandbox {sandbox!r} cannot give fractional CPUs ({cpus})")
    return problems


def format_problems(problems: list[str]) -> str:
    """A numbered block for a CLI error message."""
    return "\n".join(f"  {i}. {p}" for i, p in enumerate(problems, 1))


if __name__ == "__main__":  # python -m engine.environments CONFIG.toml
    from engine.config import load_config

    found = check_experiment(load_config(sys.argv[1]))
    print(format_problems(found) if found else "ok: nothing missing")
    raise SystemExit(1 if found else 0)
