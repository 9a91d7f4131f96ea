"""Config-level checks for docker, modal and daytona sandboxes and the fleet's grading options.

No engine or account exists here, so each check runs against real inputs it can see: PATH,
environment variables, config files in a temporary HOME, real sockets standing in for a Docker
daemon, and task directories built by the real task builder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import ConfigError, parse_config
from engine.environments import (
    check_experiment,
    check_grading,
    check_sandbox,
    check_task,
    daytona_problems,
    docker_ping,
    docker_problems,
    import_path_problems,
    modal_problems,
)
from engine.tasks.builder import build_task

HAS_MODAL = importlib.util.find_spec("modal") is not None
HAS_DAYTONA = importlib.util.find_spec("daytona") is not None


def config_text(
    sandbox: str, grading: str = "local", grading_table: str = "", agent: str = "terminus-2"
) -> str:
    return f"""
[experiment]
name = "cloud"
problems = ["p28"]
sandbox = "{sandbox}"
grading = "{grading}"
agent = "{agent}"

[[models]]
name = "openai/gpt-4.1"

{grading_table}
"""


def serve_once(server: socket.socket, answer: bytes) -> threading.Thread:
    """Answer one connection on ``server`` with ``answer`` (an HTTP response)."""

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


# -- docker ------------------------------------------------------------------------------------
def test_docker_without_the_cli_says_so(tmp_path: Path) -> None:
    problems = docker_problems({"PATH": str(tmp_path)})
    assert len(problems) == 1 and "docker CLI is not on PATH" in problems[0]


def test_docker_ping_reads_a_real_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        thread = serve_once(server, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
        assert docker_ping(f"unix://{path}") is None
        thread.join(5)
        thread = serve_once(server, b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
        assert "unexpected answer" in (docker_ping(f"unix://{path}") or "")
        thread.join(5)
    assert "does not exist" in (docker_ping(f"unix://{tmp_path / 'missing.sock'}") or "")


def test_docker_ping_over_tcp_refused_and_answered() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        server.listen(1)
        thread = serve_once(server, b"HTTP/1.0 200 OK\r\n\r\nOK")
        assert docker_ping(f"tcp://127.0.0.1:{port}") is None
        thread.join(5)
    assert docker_ping(f"tcp://127.0.0.1:{port}") is not None  # closed now: refused
    assert "scheme" in (docker_ping("npipe:////./pipe/docker_engine") or "")


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")
def test_docker_with_cli_names_the_unreachable_daemon(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    problems = docker_problems(env)
    daemon = [p for p in problems if "no Docker daemon answers" in p]
    assert len(daemon) == 1 and f"unix://{tmp_path}/none.sock" in daemon[0]

    path = tmp_path / "d.sock"  # a daemon that answers: no daemon problem any more
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        thread = serve_once(server, b"HTTP/1.1 200 OK\r\n\r\nOK")
        problems = docker_problems({**env, "DOCKER_HOST": f"unix://{path}"})
        thread.join(5)
    assert not [p for p in problems if "daemon" in p]


# -- modal and daytona ---------------------------------------------------------------------------
def test_modal_credentials(home: Path) -> None:
    sdk = ["sdk"] if not HAS_MODAL else []

    def kinds(env: dict[str, str]) -> list[str]:
        found = modal_problems({"HOME": str(home), **env})
        out = ["sdk" for p in found if "SDK" in p]
        out += ["token" for p in found if "no Modal token" in p]
        out += ["secret" for p in found if "MODAL_TOKEN_SECRET is not set" in p]
        return out

    assert kinds({}) == [*sdk, "token"]
    assert kinds({"MODAL_TOKEN_ID": "ak-1"}) == [*sdk, "secret"]
    assert kinds({"MODAL_TOKEN_ID": "ak-1", "MODAL_TOKEN_SECRET": "as-1"}) == sdk
    (home / ".modal.toml").write_text('[default]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n')
    assert kinds({}) == sdk
    other = home / "elsewhere.toml"
    assert kinds({"MODAL_CONFIG_PATH": str(other)}) == [*sdk, "token"]


def test_daytona_credentials() -> None:
    sdk = 0 if HAS_DAYTONA else 1
    assert len(daytona_problems({})) == sdk + 1
    assert "DAYTONA_API_KEY" in daytona_problems({})[-1]
    assert len(daytona_problems({"DAYTONA_API_KEY": "dtn_x"})) == sdk
    jwt_only = daytona_problems({"DAYTONA_JWT_TOKEN": "j"})
    assert "DAYTONA_ORGANIZATION_ID" in jwt_only[-1]
    assert len(daytona_problems({"DAYTONA_JWT_TOKEN": "j", "DAYTONA_ORGANIZATION_ID": "o"})) == sdk


def test_experiment_check_uses_the_configured_sandbox(home: Path) -> None:
    env = {"HOME": str(home), "PATH": str(home)}
    modal = check_experiment(parse_config(config_text("modal")), env)
    assert modal and all(p.startswith("sandbox 'modal'") for p in modal)
    daytona = check_sandbox(parse_config(config_text("daytona")), env)
    assert any("DAYTONA_API_KEY" in p for p in daytona)
    docker = check_sandbox(parse_config(config_text("docker")), env)
    assert any("docker CLI" in p for p in docker)
    # simulated agents start no sandbox, so nothing is missing for them
    assert check_sandbox(parse_config(config_text("modal", agent="simulated")), env) == []


def test_import_path_sandboxes() -> None:
    assert "cannot import" in import_path_problems("no_such_module_x:Env")[0]
    assert (
        "not a harbor BaseEnvironment" in import_path_problems("engine.config:ExperimentConfig")[0]
    )
    assert "cannot import" in import_path_problems("engine.config:NoSuchClass")[0]


# -- grading options -----------------------------------------------------------------------------
def test_http_grading_options() -> None:
    def problems(table: str) -> list[str]:
        return check_grading(parse_config(config_text("local", "http", table)), {})

    assert any("[grading].urls" in p for p in problems("[grading]\ntoken = 't'\n"))
    remote = problems('[grading]\nurls = ["http://gpu-1:8765"]\n')
    assert len(remote) == 1 and "[grading].token" in remote[0]
    assert problems('[grading]\nurls = ["http://gpu-1:8765"]\ntoken = "t"\n') == []
    assert problems('[grading]\nurls = ["http://127.0.0.1:8765", "http://localhost:1"]\n') == []
    bad = problems('[grading]\nurls = ["gpu-1:8765"]\ntoken = "t"\n')
    assert any("not an http(s)://host:port URL" in p for p in bad)
    with pytest.raises(ConfigError, match=r"\[grading\]\.retries: unknown key"):  # when read
        problems('[grading]\nurls = ["http://127.0.0.1:1"]\nretries = 2\n')


def test_harbor_grading_options(home: Path) -> None:
    def problems(table: str) -> list[str]:
        config = parse_config(config_text("local", "harbor", '[grading]\ngpu = "h200"\n' + table))
        return check_grading(config, {"HOME": str(home), "PATH": str(home)})

    with pytest.raises(ConfigError, match=r"\[grading\]\.image: unknown key"):  # when read
        problems('image = "x"\n')
    local = (
        'import_path = "engine.sandbox.local_ns:LocalNamespaceEnvironment"\nenvironment_type = ""\n'
    )
    assert any("docker_image" in p for p in problems(local))
    assert any(
        "gpus must be at least 1" in p
        for p in problems(local + 'docker_image = "mkb-grader:cu13"\ngpus = 0\n')
    )
    docker = problems('docker_image = "mkb-grader:cu13"\nenvironment_type = "docker"\n')
    assert docker and all(p.startswith("[grading] harbor environment 'docker'") for p in docker)


# -- built tasks ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("tasks")
    yield {dsl: build_task("p28", dsl, root).path for dsl in ("cute", "tirx")}


@pytest.mark.parametrize("sandbox", ["docker", "modal", "daytona", "local"])
@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_built_tasks_validate_for_each_sandbox(
    built: dict[str, Path], dsl: str, sandbox: str
) -> None:
    task = built[dsl]
    assert (task / "environment" / "Dockerfile").is_file()
    assert check_task(task, sandbox) == []


def test_broken_tasks_are_reported(built: dict[str, Path], tmp_path: Path) -> None:
    task = tmp_path / "p28-cute"
    shutil.copytree(built["cute"], task)
    toml = task / "task.toml"
    text = toml.read_text()

    toml.write_text(text.replace('network_mode = "no-network"', 'network_mode = "public"'))
    assert any("network_mode is 'public'" in p for p in check_task(task, "modal"))
    toml.write_text(text.replace("cpus = 2", "cpus = 2\ngpus = 1"))
    assert any("CPU-only" in p for p in check_task(task, "daytona"))
    toml.write_text(text.replace("[environment]", "[environment]\nbogus_key = [1"))
    assert any("Harbor cannot read it" in p for p in check_task(task, "docker"))
    toml.write_text(text)

    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("WORKDIR /", "WORKDIR /elsewhere/"))
    assert any("differs from task.toml workdir" in p for p in check_task(task, "docker"))
    dockerfile.unlink()
    for sandbox in ("docker", "modal", "daytona"):
        assert any("no environment definition" in p for p in check_task(task, sandbox))
    assert check_task(task, "local") == []  # the local sandbox needs no image
    (task / "task.toml").unlink()
    assert "no task.toml" in check_task(task, "docker")[0]
