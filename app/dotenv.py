"""Read model keys from a `.env` file into the environment (values already set win).

Lines are ``KEY=VALUE`` (optionally ``export KEY=VALUE``); blank lines and ``#`` comments are
skipped; single or double quotes around a value are removed. A malformed line is reported
by number and skipped, never echoed (it may hold a secret).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def parse_dotenv(text: str, source: str = ".env") -> tuple[dict[str, str], list[str]]:
    """(variables, problems) from the text of a .env file."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            problems.append(f"{source}:{number}: not KEY=VALUE (line skipped)")
            continue
        key, value = match.group(1), match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values, problems


def load_dotenv(
    path: str | os.PathLike[str] = ".env", environ: MutableMapping[str, str] | None = None
) -> list[str]:
    """Set the file's variables that the environment lacks; returns the names set."""
    env = os.environ if environ is None else environ
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError:
        return []
    values, problems = parse_dotenv(text, str(p))
    for problem in problems:
        print(f"mkb: warning: {problem}", file=sys.stderr)
    added = [k for k in values if k not in env]
    for key in added:
        env[key] = values[key]
    return added
