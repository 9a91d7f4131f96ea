"""Model keys come from `.env`; values already in the environment win; bad lines are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.dotenv import load_dotenv, parse_dotenv


def test_parse_dotenv_forms() -> None:
    values, problems = parse_dotenv(
        "# keys\nOPENAI_API_KEY=sk-abc\nexport GEMINI_API_KEY='g 1'\nX=\"q\"\n"
        "Y=plain # comment\nnot a line\n\n"
    )
    assert values == {"OPENAI_API_KEY": "sk-abc", "GEMINI_API_KEY": "g 1", "X": "q",
                      "Y": "plain"}
    assert problems == [".env:6: not KEY=VALUE (line skipped)"]


def test_environment_wins_and_missing_file_is_fine(tmp_path: Path) -> None:
    env = {"KEEP": "from-env"}
    dotenv = tmp_path / ".env"
    dotenv.write_text("KEEP=from-file\nNEW=value\n")
    assert load_dotenv(dotenv, env) == ["NEW"]
    assert env == {"KEEP": "from-env", "NEW": "value"}
    assert load_dotenv(tmp_path / "absent.env", env) == []


def test_cli_loads_dotenv_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from app.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MKB_TEST_DOTENV_KEY", raising=False)
    (tmp_path / ".env").write_text("MKB_TEST_DOTENV_KEY=secret-value\n=broken\n")
    assert main(["db", "info", "--db", str(tmp_path / "x.sqlite"), "--json"]) == 0
    assert os.environ.pop("MKB_TEST_DOTENV_KEY") == "secret-value"
    err = capsys.readouterr().err
    assert ".env:2" in err and "secret" not in err
