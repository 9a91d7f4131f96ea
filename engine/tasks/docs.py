"""Offline DSL documentation, generated at build time from the installed packages.

For each module a DSL variant lists, the page holds every public class and function with its
signature and docstring (via :mod:`inspect`), and the functions of namespace objects such as
TIRx's ``T.cuda`` and ``T.ptx``. Nothing third-party is committed to git: pages
are written into the task directory when it is built. Where the DSL package is not installed
on the building machine, a placeholder page names the missing package.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import warnings
from pathlib import Path
from types import ModuleType

from engine.tasks.dsls import DslInfo

DOCS_GENERATOR_VERSION = "2"
MAX_DOC_CHARS = 4000
NAMESPACE_DEPTH = 2  # how deep namespace objects (``T.cuda``, ``T.ptx.cp``) are listed


def package_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"


def _doc(obj: object) -> str:
    text = inspect.getdoc(obj) or ""
    return text if len(text) <= MAX_DOC_CHARS else text[:MAX_DOC_CHARS] + "\n[…]"


def _member(obj: object, name: str) -> object:
    """``getattr(obj, name)`` without the DSL's deprecation warnings: listing every public
    name reaches deprecated aliases too (``cutlass.utils.Band``), and listing one is no use."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(obj, name)


def _is_namespace(obj: object, package: str) -> bool:
    """An instance (not a class, function or module) of a type from ``package`` that groups
    functions as attributes, e.g. TIRx's ``T.cuda`` and ``T.ptx``."""
    if inspect.isclass(obj) or inspect.ismodule(obj) or callable(obj):
        return False
    if type(obj).__module__.split(".")[0] != package:
        return False
    return sum(callable(getattr(obj, n, None)) for n in dir(obj) if not n.startswith("_")) >= 2


def namespace_reference(path: str, obj: object, package: str, depth: int = 1) -> list[str]:
    """Markdown for a namespace object's public functions (and nested namespaces)."""
    lines = [f"## namespace `{path}`", ""]
    if type(obj).__doc__:
        lines += [_doc(type(obj)), ""]
    nested: list[tuple[str, object]] = []
    for name in sorted(n for n in dir(obj) if not n.startswith("_")):
        try:
            member = _member(obj, name)
        except Exception:  # noqa: BLE001 - a lazy attribute that fails is left out
            continue
        if depth < NAMESPACE_DEPTH and _is_namespace(member, package):
            nested.append((f"{path}.{name}", member))
        elif callable(member):
            lines += [f"### `{path}.{name}{_signature(member)}`", "", _doc(member), ""]
    for sub_path, sub in nested:
        lines += namespace_reference(sub_path, sub, package, depth + 1)
    return lines


def module_reference(module: ModuleType) -> str:
    """A Markdown API reference of one module's public classes and functions."""
    lines = [f"# `{module.__name__}`", ""]
    package = module.__name__.split(".")[0]
    if module.__doc__:
        lines += [_doc(module), ""]
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in sorted(set(names)):
        try:
            obj = _member(module, name)
        except AttributeError:
            continue
        if obj is None or inspect.ismodule(obj):
            continue
        if _is_namespace(obj, package):
            lines += namespace_reference(name, obj, package)
            continue
        if inspect.isclass(obj):
            lines += [f"## class `{name}{_signature(obj)}`", "", _doc(obj), ""]
            for meth_name, meth in sorted(vars(obj).items()):
                if meth_name.startswith("_") or not callable(meth):
                    continue
                lines += [f"### `{name}.{meth_name}{_signature(meth)}`", "", _doc(meth), ""]
        elif callable(obj):
            lines += [f"## `{name}{_signature(obj)}`", "", _doc(obj), ""]
    return "\n".join(lines).rstrip() + "\n"


def placeholder_page(dsl: DslInfo) -> str:
    return (
        f"# {dsl.name} documentation is not available in this build\n\n"
        f"The package `{dsl.distribution}` was not installed on the machine that built this "
        "task, so no API reference could be generated from it. Install "
        f"{', '.join(f'`{r}`' for r in dsl.requirements)} and rebuild the task "
        "(`mkb tasks build`) to get the generated reference here.\n"
    )


def build_docs(dsl: DslInfo, out_dir: Path, modules: tuple[str, ...] | None = None) -> dict:
    """Write the offline docs for ``dsl`` into ``out_dir``; returns a summary for the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    version = package_version(dsl.distribution)
    written: list[str] = []
    failed: dict[str, str] = {}
    if version is not None or modules is not None:
        for name in modules or dsl.doc_modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any import failure is reported
                failed[name] = f"{type(exc).__name__}: {exc}"
                continue
            page = out_dir / f"{name}.md"
            page.write_text(module_reference(module))
            written.append(page.name)
    index = [f"# Offline {dsl.name} documentation", ""]
    if written:
        index.append(f"Generated from `{dsl.distribution}` {version or ''} by introspection.")
        index += ["", *[f"- [{p}]({p})" for p in written]]
    else:
        (out_dir / "MISSING.md").write_text(placeholder_page(dsl))
        index.append(f"Not generated: `{dsl.distribution}` is not installed. See MISSING.md.")
    if failed:
        index += ["", "Modules that could not be imported:"]
        index += [f"- `{name}`: {why}" for name, why in failed.items()]
    (out_dir / "README.md").write_text("\n".join(index) + "\n")
    return {
        "distribution": dsl.distribution,
        "version": version,
        "pages": written,
        "failed": failed,
        "generator": DOCS_GENERATOR_VERSION,
    }
