"""`mkb tui` wiring: options, errors as usage errors, the default command, serve."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.commands import tui as tui_command
from app.serve import served_command

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_the_options() -> None:
    result = subprocess.run([sys.executable, "-m", "app.cli", "tui", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--db", "--attach", "--theme", "--serve"):
        assert option in result.stdout


def test_attach_to_a_missing_database_is_a_usage_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "none.sqlite"
    assert main(["tui", "--attach", "--db", str(missing)]) == 2
    assert "no such database" in capsys.readouterr().err
    assert not missing.exists()


def test_default_command_is_the_tui() -> None:
    assert callable(tui_command.default_command)


def test_serve_without_textual_serve_says_how_to_get_it(
    seeded_db: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "textual_serve.server", None)  # import fails
    assert main(["tui", "--serve", "8765", "--db", str(seeded_db)]) == 2
    assert "pip install textual-serve" in capsys.readouterr().err


def test_served_command_is_the_browser_attach_view(seeded_db: Path) -> None:
    command = served_command(str(seeded_db))
    assert "tui --browser --db" in command and str(seeded_db) in command
    assert "MKB_CONTROL_TOKEN_SHA256" not in command  # read-only: no token for the tabs
    assert "MKB_CONTROL_TOKEN_SHA256=ab12 " in served_command(str(seeded_db), "ab12")


def test_a_missing_database_is_an_error_unless_created(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.tui import MkbApp

    monkeypatch.setattr(MkbApp, "run", lambda self: 0)  # no terminal in tests
    missing = tmp_path / "typo.sqlite"
    assert main(["tui", "--db", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"no database at {missing}" in err and "--create" in err
    assert not missing.exists()
    monkeypatch.setenv("MKB_DB", str(missing))
    assert tui_command.default_command() == 2  # plain `mkb` says so too
    assert not missing.exists()
    assert main(["tui", "--create", "--db", str(missing)]) == 0
    assert missing.exists()
    assert main(["tui", "--db", str(missing)]) == 0  # now it exists
