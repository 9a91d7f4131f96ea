"""Upstream DSL guide pages at the pinned versions, fetched when a network is available.

The generated API reference (:mod:`engine.tasks.docs`) says what each function takes; the
guides say how the DSL is meant to be used. They are third-party text, so nothing here is
committed: :func:`fetch_guides` downloads the listed pages of the DSL's own repository at the
tag matching the pinned package version into a local cache, and task builds copy whatever the
cache holds into ``docs/guides/``. Without a network the fetch reports each page as failed and
builds go on with the API reference alone.

Cache: ``$MKB_GUIDES_CACHE`` or ``~/.cache/metakernelbench/guides``, one folder per DSL and
tag. Source: ``$MKB_GUIDES_BASE_URL`` or ``https://raw.githubusercontent.com`` (a mirror or a
test server can stand in), then ``/<repo>/<tag>/<root>/<page>``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.tasks.dsls import DslInfo, dsl_info

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
#: pages about one architecture's tensor cores: copied only into tasks graded on it
ARCH_PAGES = {
    "guides/mma/wgmma_programming.rst": "sm_90a",
    "guides/mma/tcgen05_programming.rst": "sm_100a",
}
MAX_PAGE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class GuideSet:
    """Which pages of which repository make a DSL's guides."""

    repo: str
    root: str
    pages: tuple[str, ...]


GUIDE_SETS: dict[str, GuideSet] = {
    "cute": GuideSet(
        repo="NVIDIA/cutlass",
        root="media/docs/pythonDSL",
        pages=(
            "overview.rst",
            "quick_start.rst",
            "faqs.rst",
            "limitations.rst",
            "cute_dsl_general/dsl_introduction.rst",
            "cute_dsl_general/dsl_control_flow.rst",
            "cute_dsl_general/dsl_jit_compilation_options.rst",
            "cute_dsl_general/dsl_jit_caching.rst",
            "cute_dsl_general/framework_integration.rst",
            "cute_dsl_general/debugging.rst",
            "guides/mma/wgmma_programming.rst",
            "guides/mma/tcgen05_programming.rst",
        ),
    ),
    "tirx": GuideSet(
        repo="apache/tvm",
        root="docs/tirx",
        pages=(
            "overview.rst",
            "install.rst",
            "native_basics/cuda/first_kernel.rst",
            "native_basics/cuda/functions.rst",
            "native_basics/cuda/buffers.rst",
            "native_basics/cuda/control_flow.rst",
            "native_basics/cuda/threads_sync.rst",
            "native_basics/cuda/data_types.rst",
            "native_basics/cuda/compiling.rst",
            "native_basics/cuda/profiling.rst",
            "layout.rst",
            "tile_primitives/gemm.rst",
        ),
    ),
}


@dataclass
class FetchReport:
    """What one fetch did, page by page."""

    dsl: str
    tag: str
    source: str
    fetched: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def pinned_version(dsl: DslInfo) -> str:
    """The version the DSL is pinned to (``nvidia-cutlass-dsl[cu13]==4.8.1`` → ``4.8.1``)."""
    match = re.search(r"==\s*([\w.]+)", dsl.requirements[0])
    if match is None:
        raise ValueError(f"{dsl.key}: requirement {dsl.requirements[0]!r} pins no version")
    return match.group(1)


def release_tag(version: str) -> str:
    """The repository tag of a package version: ``0.27.0.post1`` → ``v0.27.0``."""
    return "v" + re.sub(r"(\.post\d+|\+.*)$", "", version)


def pinned_tag(dsl_key: str) -> str:
    """The repository tag of the DSL version this project pins."""
    return release_tag(pinned_version(dsl_info(dsl_key)))


def cache_root() -> Path:
    return Path(os.environ.get("MKB_GUIDES_CACHE") or Path.home() / ".cache/metakernelbench/guides")


def cache_dir(dsl_key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / dsl_key / pinned_tag(dsl_key)


def cached_guides(dsl_key: str, root: Path | None = None) -> dict[str, Path]:
    """The guide pages already in the cache for this DSL's pinned version, by page name."""
    folder = cache_dir(dsl_key, root)
    pages = GUIDE_SETS[dsl_key].pages
    return {page: folder / page for page in pages if (folder / page).is_file()}


def guides_digest(dsl_key: str, root: Path | None = None) -> str:
    """A hash of the cached pages (part of a task build's inputs hash)."""
    h = hashlib.sha256()
    for page, path in sorted(cached_guides(dsl_key, root).items()):
        h.update(page.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


async def fetch_guides(
    dsl_key: str,
    root: Path | None = None,
    base_url: str | None = None,
    timeout_s: float = 20.0,
    refresh: bool = False,
) -> FetchReport:
    """Download the DSL's guide pages into the cache; failures are reported, never raised."""
    import aiohttp

    guide = GUIDE_SETS[dsl_key]
    tag = pinned_tag(dsl_key)
    base = (base_url or os.environ.get("MKB_GUIDES_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    source = f"{base}/{guide.repo}/{tag}/{guide.root}"
    report = FetchReport(dsl_key, tag, source)
    folder = cache_dir(dsl_key, root)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for page in guide.pages:
            target = folder / page
            if target.is_file() and not refresh:
                report.cached.append(page)
                continue
            try:
                async with session.get(f"{source}/{page}") as response:
                    if response.status != 200:
                        report.failed[page] = f"HTTP {response.status}"
                        continue
                    body = await response.content.read(MAX_PAGE_BYTES + 1)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                detail = str(exc)
                report.failed[page] = (
                    f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
                )
                continue
            if len(body) > MAX_PAGE_BYTES:
                report.failed[page] = f"larger than {MAX_PAGE_BYTES} bytes"
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(target.suffix + ".part")
            partial.write_bytes(body)
            partial.replace(target)  # a killed fetch never leaves half a page behind
            report.fetched.append(page)
    return report


def copy_guides(
    dsl_key: str, out_dir: Path, root: Path | None = None, arch: str | None = None
) -> dict[str, object]:
    """Copy the cached pages into a task's ``docs/guides`` (with ``arch``: only the
    architecture pages of that arch); returns the manifest entry."""
    guide = GUIDE_SETS[dsl_key]
    tag = pinned_tag(dsl_key)
    wanted = [p for p in guide.pages if arch is None or ARCH_PAGES.get(p, arch) == arch]
    pages = {p: path for p, path in cached_guides(dsl_key, root).items() if p in wanted}
    for page, path in pages.items():
        target = out_dir / page
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    return {
        "source": f"https://github.com/{guide.repo}/tree/{tag}/{guide.root}",
        "tag": tag,
        "pages": sorted(pages),
        "missing": [p for p in wanted if p not in pages],
    }
