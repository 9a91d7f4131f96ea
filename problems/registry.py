"""Find, load and validate the problem modules; look problems up by id or slug."""

from __future__ import annotations

import fnmatch
import importlib.util
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from problems.spec import FAMILY_DIRS, Problem, ProblemFormatError, problem_from_module

CATALOG_ROOT = Path(__file__).resolve().parent


def problem_files(root: Path = CATALOG_ROOT) -> list[Path]:
    """Every ``pNN_*.py`` file in the family folders under ``root``, sorted by name."""
    files: list[Path] = []
    for folder in FAMILY_DIRS:
        files.extend(sorted((root / folder).glob("p[0-9][0-9]_*.py")))
    return sorted(files, key=lambda p: p.name)


@lru_cache(maxsize=1)
def _file_index() -> dict[str, str]:
    """Problem id by slug, from the catalog's file names (``pNN_<slug>.py``) alone."""
    return {path.stem.split("_", 1)[1]: path.stem.split("_", 1)[0]
            for path in problem_files()}


def matching_ids(key: str) -> list[str]:
    """Problem ids named by ``pNN``, ``NN``, a slug, a glob, or a part of a slug, found from
    file names without importing any problem (fast enough for a filter as it is typed)."""
    k = key.strip().lower()
    number = k[1:] if k.startswith("p") else k
    if number.isdigit():
        return [f"p{int(number):02d}"]
    index = _file_index()
    if k in index:
        return [index[k]]
    if any(ch in k for ch in "*?["):
        hits = [pid for slug, pid in index.items()
                if fnmatch.fnmatch(slug, k) or fnmatch.fnmatch(pid, k)]
    else:
        hits = [pid for slug, pid in index.items() if k and k in slug]
    return sorted(set(hits))


def resolve_id(key: str) -> str | None:
    """The id of the catalog problem named exactly by ``pNN``, ``NN`` or its slug, else None
    (from file names, without importing any problem)."""
    k = key.strip().lower()
    number = k[1:] if k.startswith("p") else k
    index = _file_index()
    if number.isdigit():
        pid = f"p{int(number):02d}"
        return pid if pid in index.values() else None
    return index.get(k)


def load_problem(path: Path) -> Problem:
    """Import one problem file and validate it; errors name the file."""
    module_name = f"problems.{path.parent.name}.{path.stem}"
    if path.resolve().is_relative_to(CATALOG_ROOT):
        existing = sys.modules.get(module_name)
        if existing is not None and getattr(existing, "__file__", None) == str(path):
            return problem_from_module(existing, path)
    else:
        module_name = f"mkb_external_problem_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemFormatError(path, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is a format error
        sys.modules.pop(module_name, None)
        raise ProblemFormatError(path, f"import failed: {type(exc).__name__}: {exc}") from exc
    return problem_from_module(module, path)


class Catalog:
    """The loaded problems, indexed by id and slug."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: p.number)
        self._by_key: dict[str, Problem] = {}
        for p in self.problems:
            for key in (p.id, p.slug):
                if key in self._by_key:
                    raise ProblemFormatError(p.path, f"duplicate id or slug {key!r}")
                self._by_key[key] = p

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.problems)

    def get(self, key: str) -> Problem:
        """Look a problem up by ``pNN``, ``NN`` or slug."""
        k = key.strip()
        if k.isdigit():
            k = f"p{int(k):02d}"
        try:
            return self._by_key[k]
        except KeyError:
            raise KeyError(f"unknown problem {key!r} (use an id like p01 or a slug)") from None

    def select(
        self, keys: Iterable[str] | None = None, family: str | None = None
    ) -> list[Problem]:
        """Problems named by ids, slugs or glob patterns, optionally within one family."""
        chosen: list[Problem]
        keys = list(keys or [])
        if not keys:
            chosen = list(self.problems)
        else:
            chosen = []
            for key in keys:
                if any(ch in key for ch in "*?["):
                    hits = [
                        p
                        for p in self.problems
                        if fnmatch.fnmatch(p.id, key) or fnmatch.fnmatch(p.slug, key)
                    ]
                    if not hits:
                        raise KeyError(f"no problem matches {key!r}")
                    chosen.extend(hits)
                else:
                    chosen.append(self.get(key))
        if family is not None:
            fam = _family_name(family)
            chosen = [p for p in chosen if p.family == fam]
        seen: set[str] = set()
        return [p for p in chosen if not (p.id in seen or seen.add(p.id))]  # type: ignore[func-returns-value]


def _family_name(family: str) -> str:
    wanted = family.strip().lower()
    for folder, name in FAMILY_DIRS.items():
        if wanted in (folder, name.lower()):
            return name
    raise KeyError(f"unknown family {family!r} (one of: {', '.join(FAMILY_DIRS.values())})")


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The catalog shipped in this package (loaded once per process)."""
    return Catalog(load_problem(path) for path in problem_files())


def get(key: str) -> Problem:
    """Shorthand for ``catalog().get(key)``."""
    return catalog().get(key)
