"""Upstream guide pages: fetched over real HTTP from a loopback stand-in for GitHub's raw-file
server, cached per DSL and tag, copied into task builds, and absent without a network."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from app.cli import main as mkb
from engine.tasks import guides
from engine.tasks.builder import build_task, staleness

CUTE = guides.GUIDE_SETS["cute"]
PREFIX = f"/{CUTE.repo}/v4.8.1/{CUTE.root}/"


class RawServer:
    """Serves every cute guide page but one; counts requests."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        page = request.path.removeprefix(PREFIX)
        if not request.path.startswith(PREFIX) or page == "faqs.rst":
            return web.Response(status=404)
        return web.Response(text=f"Guide page {page}\n=====\n")


@pytest.fixture
async def raw_server() -> AsyncIterator[RawServer]:
    server = RawServer()
    app = web.Application()
    app.router.add_get("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}"
    yield server
    await runner.cleanup()


def test_versions_map_to_release_tags() -> None:
    assert guides.release_tag("0.27.0.post1") == "v0.27.0"
    assert guides.release_tag(guides.pinned_version(guides.dsl_info("cute"))) == "v4.8.1"
    assert guides.cache_dir("tirx").name == "v0.27.0"


async def test_fetch_caches_pages_and_reports_failures(raw_server: RawServer) -> None:
    report = await guides.fetch_guides("cute", base_url=raw_server.url)
    assert report.tag == "v4.8.1" and report.failed == {"faqs.rst": "HTTP 404"}
    assert len(report.fetched) == len(CUTE.pages) - 1
    cached = guides.cached_guides("cute")
    assert "faqs.rst" not in cached
    assert cached["quick_start.rst"].read_text().startswith("Guide page quick_start.rst")
    asked = len(raw_server.requests)
    again = await guides.fetch_guides("cute", base_url=raw_server.url)
    assert again.fetched == [] and len(again.cached) == len(CUTE.pages) - 1
    assert len(raw_server.requests) == asked + 1  # only the missing page is asked again


async def test_no_network_is_reported_page_by_page() -> None:
    report = await guides.fetch_guides("tirx", base_url="http://127.0.0.1:9", timeout_s=5)
    assert report.fetched == [] and set(report.failed) == set(guides.GUIDE_SETS["tirx"].pages)
    assert all("Connect" in why or "Error" in why for why in report.failed.values())
    assert guides.cached_guides("tirx") == {}


async def test_builds_ship_cached_guides_and_go_stale_when_they_change(
    raw_server: RawServer, tmp_path: Path
) -> None:
    bare = await asyncio.to_thread(build_task, "p28", "cute", tmp_path / "before")
    index = (bare.path / "environment/docs/README.md").read_text()
    assert "mkb tasks guides --fetch" in index
    await guides.fetch_guides("cute", base_url=raw_server.url)
    assert staleness(bare.path)  # the cache changed what a build would hold
    built = await asyncio.to_thread(build_task, "p28", "cute", tmp_path / "after")
    shipped = built.path / "environment/docs/guides/cute_dsl_general/dsl_introduction.rst"
    assert shipped.read_text().startswith("Guide page")
    manifest = json.loads((built.path / "manifest.json").read_text())
    assert manifest["docs"]["guides"]["missing"] == ["faqs.rst"]
    assert "github.com/NVIDIA/cutlass/tree/v4.8.1" in manifest["docs"]["guides"]["source"]
    tirx = await asyncio.to_thread(build_task, "p28", "tirx", tmp_path / "after")
    assert not (tirx.path / "environment/docs/guides").exists()  # nothing cached for TIRx


async def test_cli_fetch_and_list(raw_server: RawServer, capsys: pytest.CaptureFixture) -> None:
    args = ["tasks", "guides", "--dsl", "cute", "--fetch", "--base-url", raw_server.url]
    code = await asyncio.to_thread(mkb, args)  # the server runs on this test's loop
    out = capsys.readouterr().out
    assert code == 1  # one page is still missing
    assert "failed faqs.rst: HTTP 404" in out and f"{len(CUTE.pages) - 1}/" in out
    assert mkb(["tasks", "guides", "--dsl", "cute"]) == 0
