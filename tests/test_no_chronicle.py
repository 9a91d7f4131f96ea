"""The project's text speaks to users: no chronicle of numbered work rounds, a short README.

History lives in CHANGELOG.md, by date. These checks read every file git knows (tracked, or
new and not ignored) under the user-facing folders and fail naming each file and line that
cites a numbered round ("session 9", "Session10", "session\\n9"), and fail when README.md
grows past 200 lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("README.md", "docs", "engine", "app", "screens", "storage", "problems", "benchmarks")
README_MAX_LINES = 200
# "session 9", "Session10", and a number carried onto the next line ("session\n  9").
ROUND = re.compile(r"session(?:[ \t]|\n[ \t]*)?[0-9]+", re.IGNORECASE)


def scoped_files() -> list[Path]:
    """Files git lists under SCOPE: tracked ones still on disk, and new ones not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the scope is what git lists")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *SCOPE],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()})


def text_of(path: Path) -> str | None:
    """The file as text, or None for binary files."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def round_citations(path: Path, text: str) -> list[str]:
    """One 'file:line: excerpt' per citation of a numbered round in the text."""
    found = []
    for match in ROUND.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        excerpt = " ".join(match.group(0).split())
        found.append(f"{path.relative_to(ROOT)}:{line}: {excerpt!r}")
    return found


def test_the_pattern_finds_what_it_must() -> None:
    """The search itself: it must see the spellings a chronicle uses, and nothing else."""
    text = "a\nIn session 9 we\nSession10 on\nin session\n  7 too\nsession-less 12\n"
    hits = round_citations(ROOT / "x.md", text)
    assert hits == [
        "x.md:2: 'session 9'",
        "x.md:3: 'Session10'",
        "x.md:4: 'session 7'",
    ]


def test_no_file_cites_a_numbered_round() -> None:
    """Dates and purposes name when and why something happened, not the round it was done in."""
    files = scoped_files()
    assert any(f.name == "README.md" for f in files), "git listed no README.md: scope is wrong"
    citations = []
    for path in files:
        text = text_of(path)
        if text is not None:
            citations += round_citations(path, text)
    assert not citations, "numbered work rounds cited (say the date and what changed):\n" + (
        "\n".join(citations)
    )


def test_readme_is_short() -> None:
    """The README is for users: details live in docs/, history in CHANGELOG.md."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move detail into docs/ (limit {README_MAX_LINES})"
    )
