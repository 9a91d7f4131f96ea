"""Failing closed, the explicit opt-out (config, CLI, environment kwarg), its record on each
attempt and its marker in the TUI, and `mkb sandbox check`."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from jail_support import make_env, needs_root_linux

from app.cli import main
from engine import environments
from engine.config import ConfigError, parse_config
from engine.sandbox import jail, jail_check
from engine.sandbox.local_ns import SandboxUnavailableError
from storage import queries, writes
from storage.db import open_db

CONFIG = """
[experiment]
name = "unsafe-flag"
problems = ["p28"]
dsls = ["cute", "tirx"]
sandbox = "local"
agent = "simulated"
grading = "simulated"
{extra}

[[models]]
name = "sim/a"
"""


def test_the_config_field_is_a_local_only_boolean() -> None:
    assert parse_config(CONFIG.format(extra="")).unsafe_no_jail is False
    assert parse_config(CONFIG.format(extra="unsafe_no_jail = true")).unsafe_no_jail is True
    with pytest.raises(ConfigError, match="unsafe_no_jail.*true/false"):
        parse_config(CONFIG.format(extra='unsafe_no_jail = "yes"'))
    docker = CONFIG.format(extra="unsafe_no_jail = true").replace(
        'sandbox = "local"', 'sandbox = "docker"'
    )
    with pytest.raises(ConfigError, match="local"):
        parse_config(docker)


def test_the_opt_out_reaches_the_environment_kwargs() -> None:
    from engine.attempts.runner import environment_config
    from engine.attempts.spec import AttemptSpec, ModelSpec
    from engine.factory import sandbox_kwargs

    safe = parse_config(CONFIG.format(extra=""))
    unsafe = parse_config(CONFIG.format(extra="unsafe_no_jail = true"))
    assert sandbox_kwargs(safe, {"limit_resources": True}) == {"limit_resources": True}
    kwargs = sandbox_kwargs(unsafe, {})
    assert kwargs == {"unsafe_no_jail": True}
    spec = AttemptSpec(
        "x", "p28", "cute", ModelSpec("openai/x"), Path("/tmp"), environment_kwargs=kwargs
    )
    assert environment_config(spec).kwargs["unsafe_no_jail"] is True


@pytest.mark.parametrize("flag", [False, True])
def test_mkb_run_records_the_opt_out_on_each_attempt(
    tmp_path: Path, flag: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "exp.toml"
    config.write_text(CONFIG.format(extra=""))
    db = tmp_path / "run.sqlite"
    args = ["run", str(config), "--db", str(db), "--json"]
    assert main(args + (["--unsafe-no-jail"] if flag else [])) == 0
    assert ("--unsafe-no-jail" in capsys.readouterr().err) is flag  # a loud warning
    conn = open_db(db, readonly=True)
    started = [a for a in queries.attempts_for_experiment(conn, "unsafe-flag") if a.started_at]
    conn.conn.close()
    assert started and {a.unsafe_no_jail for a in started} == {int(flag)}


def test_the_flag_is_refused_for_other_sandboxes(tmp_path: Path) -> None:
    from app.cli import UsageError
    from app.commands.run import unsafe_no_jail

    config = parse_config(CONFIG.format(extra="").replace('"local"', '"docker"'))
    with pytest.raises(UsageError, match="local sandbox"):
        unsafe_no_jail(config, argparse.Namespace(unsafe_no_jail=True))
    assert unsafe_no_jail(config, argparse.Namespace(unsafe_no_jail=False)) is config


def test_mkb_demo_accepts_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--unsafe-no-jail" in capsys.readouterr().out


def test_the_column_is_migrated_and_updatable(tmp_path: Path) -> None:
    db = open_db(tmp_path / "m.sqlite")
    writes.create_experiment(db, "e", "e")
    aid = writes.ensure_attempt(
        db,
        "e",
        "k",
        model="m",
        problem_id="p28",
        family="f",
        dsl="cute",
        arm="solo_cute",
        replicate=1,
    )
    assert queries.attempt(db, aid).unsafe_no_jail == 0  # type: ignore[union-attr]
    writes.update_attempt(db, aid, "attempt_started", state="running", unsafe_no_jail=1)
    assert queries.attempt(db, aid).unsafe_no_jail == 1  # type: ignore[union-attr]
    with pytest.raises(Exception, match="CHECK"):
        db.execute("UPDATE attempts SET unsafe_no_jail = 2 WHERE id = ?", [aid])
    db.conn.close()


def test_the_attempts_table_marks_unsafe_attempts(tmp_path: Path) -> None:
    from screens.attempts import STATE_COLUMN, UNSAFE_MARK, row_cells

    db = open_db(tmp_path / "t.sqlite")
    writes.create_experiment(db, "e", "e")
    aid = writes.ensure_attempt(
        db,
        "e",
        "k",
        model="m",
        problem_id="p28",
        family="f",
        dsl="cute",
        arm="solo_cute",
        replicate=1,
    )
    writes.update_attempt(db, aid, state="finished", outcome="preview")
    now = datetime.now(UTC)
    safe = queries.attempt(db, aid)
    writes.update_attempt(db, aid, unsafe_no_jail=1)
    unsafe = queries.attempt(db, aid)
    db.conn.close()
    assert safe is not None and unsafe is not None
    assert UNSAFE_MARK not in row_cells(safe, now)[STATE_COLUMN].plain
    state = row_cells(unsafe, now)[STATE_COLUMN].plain
    assert state.startswith("finished:preview") and state.endswith(UNSAFE_MARK)


@needs_root_linux
async def test_without_bubblewrap_the_sandbox_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = jail.shutil.which
    monkeypatch.setattr(
        jail.shutil, "which", lambda tool: None if tool == "bwrap" else real_which(tool)
    )
    env = make_env(tmp_path)
    with pytest.raises(SandboxUnavailableError, match="bubblewrap.*--unsafe-no-jail"):
        await env.start(force_build=False)
    await env.stop(delete=True)
    config = parse_config(CONFIG.format(extra="").replace('"simulated"', '"terminus-2"', 1))
    assert any("agent jail" in p for p in environments.check_sandbox(config))
    opted_out = parse_config(
        CONFIG.format(extra="unsafe_no_jail = true").replace('"simulated"', '"terminus-2"', 1)
    )
    assert not any("agent jail" in p for p in environments.check_sandbox(opted_out))
    unjailed = make_env(tmp_path, "unsafe", unsafe_no_jail=True)  # the explicit opt-out runs
    await unjailed.start(force_build=False)
    try:
        assert (await unjailed.exec("id -u")).stdout.strip() == "0"
    finally:
        await unjailed.stop(delete=True)


@needs_root_linux
def test_mkb_sandbox_check_lists_each_property_and_fails_when_one_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "check"]) == 0
    out = capsys.readouterr().out
    passed = [line for line in out.splitlines() if line.strip().startswith("PASS")]
    assert len(passed) >= 12 and "FAIL" not in out
    assert "PASS runs as an unprivileged uid" in out
    real = jail_check._environment
    monkeypatch.setattr(  # the probes must catch a sandbox without the jail
        jail_check, "_environment", lambda base: _unjailed(real(base))
    )
    assert main(["sandbox", "check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)["jail"]
    failed = {name for name, verdict in report.items() if verdict != "pass"}
    assert {
        "runs as an unprivileged uid",
        "no capabilities",
        "project, store, .env and host home invisible",
        "system directories read-only",
    } <= failed


def _unjailed(env):  # type: ignore[no-untyped-def]
    env._unsafe_no_jail = True
    return env
