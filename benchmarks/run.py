"""The benchmarks' one entry point: list them, or run one from the repository root.

    python3 benchmarks/run.py list            every benchmark with its first line
    python3 benchmarks/run.py NAME [ARGS...]  run benchmarks/NAME(.py|.sh) with PYTHONPATH=.

``benchmarks/README.md`` says which to run when; each script's own docstring (or, for a shell
script, its opening comment) says how.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def scripts() -> list[Path]:
    """Every benchmark script (this entry point left out)."""
    found = [*HERE.glob("*.py"), *HERE.glob("*.sh")]
    return sorted(p for p in found if p.name not in ("run.py", "__init__.py"))


def first_line(path: Path) -> str:
    """A script's one-line description: its docstring's first line, or its first comment."""
    text = path.read_text()
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    for line in text.splitlines()[1:]:
        if line.startswith("#") and line.strip("# "):
            return line.lstrip("# ").strip()
    return ""


def listing() -> str:
    rows = [(p.name, first_line(p)) for p in scripts()]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {line}" for name, line in rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("list", "-h", "--help"):
        print(listing())
        return 0
    name = args[0]
    matches = [p for p in scripts() if p.name in (name, f"{name}.py", f"{name}.sh")]
    if not matches:
        print(f"no benchmark named {name!r}; `python3 benchmarks/run.py list`", file=sys.stderr)
        return 2
    path = matches[0]
    command = ["bash" if path.suffix == ".sh" else sys.executable, str(path), *args[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.call(command, cwd=REPO, env=env)


if __name__ == "__main__":
    sys.exit(main())
